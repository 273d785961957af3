"""The consortium's router configuration at run time: the lineages in the store, the check of
the settings' ``[router]`` against them at start-up, and the terms every round opens with."""

from __future__ import annotations

import json
from typing import Any

from sdk.wire import (
    ConflictError,
    ConsortiumRouterConfig,
    NotFoundError,
    PayloadError,
    RouterConfigInfo,
    RouterConfigRef,
)
from server_app._store import Store

__all__ = ["LINEAGE_COMMAND", "RouterLineages"]

LINEAGE_COMMAND = "fedmor router lineage --config FILE"
"""The operator command that starts a new router lineage (``POST /v1/router/lineage``)."""


def _info(row: dict[str, Any], current: int | None) -> RouterConfigInfo:
    return RouterConfigInfo(lineage=int(row["lineage"]), sha256=row["sha256"],
                            num_params=int(row["num_params"]),
                            config=ConsortiumRouterConfig.model_validate_json(row["config"]),
                            created_at=float(row["created_at"]),
                            current=int(row["lineage"]) == current)


def _ref(row: dict[str, Any]) -> RouterConfigRef:
    return RouterConfigRef(lineage=int(row["lineage"]), sha256=row["sha256"],
                           num_params=int(row["num_params"]))


def _label(row: dict[str, Any]) -> str:
    return (f"router configuration sha256 {str(row['sha256'])[:12]} (lineage {row['lineage']}, "
            f"{row['num_params']} parameters)")


class RouterLineages:
    """Which router configuration rounds follow. The settings declare it; the store records
    each lineage (a configuration and the versions trained under it). Only an operator's
    explicit command (:meth:`start`) changes it at run time; a restart with settings that
    differ from the store's current lineage is refused (:meth:`check_declared`)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def check_declared(self, declared: ConsortiumRouterConfig | None) -> None:
        """At start-up: the settings' configuration must be the store's current one. A store
        without lineages adopts it (and its versions, when their length fits); ``ValueError``
        otherwise, naming both configurations and the command."""
        current = self.store.lineage()
        if declared is None:
            if current is not None:
                raise ValueError(
                    f"the store's current {_label(current)} is not declared in the settings: "
                    f"put it in the [router] section (GET /v1/router/config shows it)")
            return
        if current is None:
            latest = self.store.version()
            if latest is not None and int(latest["length"]) != declared.num_params:
                raise ValueError(
                    f"the settings declare {declared.describe()}, but the store's router "
                    f"versions (newest: {latest['version']}) have {latest['length']} "
                    f"parameters: start the server without [router], run `{LINEAGE_COMMAND}` "
                    f"with the new configuration (a new lineage; no version is lost), then "
                    f"declare it in [router]")
            with self.store.transaction():
                lineage = self.store.add_lineage(declared.sha256, declared.num_params,
                                                 declared.canonical_json(), "settings")
                self.store.adopt_versions(lineage)
                self.store.audit("server", "router_lineage_declared", lineage=lineage,
                                 sha256=declared.sha256, num_params=declared.num_params)
            return
        if current["sha256"] != declared.sha256:
            raise ValueError(
                f"the settings declare {declared.describe()}, the store's current lineage "
                f"{current['lineage']} follows {_label(current)}: a changed router "
                f"configuration needs a new lineage. Start the server with the current "
                f"configuration and run `{LINEAGE_COMMAND}` (signed by an operator) with the "
                f"new one, then declare it in [router]; or put the current one back in "
                f"[router]")

    def current(self) -> RouterConfigInfo | None:
        """The configuration rounds open on now (None: the server declares none)."""
        row = self.store.lineage()
        return None if row is None else _info(row, int(row["lineage"]))

    def get(self, lineage: int | None = None) -> RouterConfigInfo:
        """Lineage ``lineage``'s configuration (the current one when None); 404 if none."""
        row = self.store.lineage(lineage)
        if row is None:
            raise NotFoundError("this server declares no router configuration ([router])"
                                if lineage is None else f"router lineage {lineage} does not "
                                "exist")
        current = self.store.lineage()
        return _info(row, None if current is None else int(current["lineage"]))

    def history(self) -> list[RouterConfigInfo]:
        """Every lineage, oldest first."""
        current = self.store.lineage()
        at = None if current is None else int(current["lineage"])
        return [_info(row, at) for row in self.store.lineages()]

    def start(self, config: ConsortiumRouterConfig, actor: str) -> RouterConfigInfo:
        """Start a new lineage on ``config`` (an operator's explicit command, audited): rounds
        open on it from now on, starting from no router version; older versions stay readable.
        409 when ``config`` is the current configuration already."""
        with self.store.transaction():
            current = self.store.lineage()
            if current is not None and current["sha256"] == config.sha256:
                raise ConflictError(f"{_label(current)} is the current one already")
            lineage = self.store.add_lineage(config.sha256, config.num_params,
                                             config.canonical_json(), actor)
            self.store.audit(actor, "router_lineage_started", lineage=lineage,
                             sha256=config.sha256, num_params=config.num_params,
                             previous=None if current is None else int(current["lineage"]))
        return self.get(lineage)

    def ref(self, lineage: int | None) -> RouterConfigRef | None:
        """The reference of ``lineage`` (None for None: a version from before lineages)."""
        row = None if lineage is None else self.store.lineage(lineage)
        return None if row is None else _ref(row)

    def round_terms(self, vector_length: int | None
                    ) -> tuple[int, RouterConfigRef | None, dict[str, Any] | None]:
        """(length, configuration reference, base version row) of a round asked with
        ``vector_length`` (None: the configuration's). A length the configuration does not
        give is refused, naming it; without a configuration the newest version fixes it."""
        current = self.store.lineage()
        base = self.store.version()
        if current is not None:
            wanted = int(current["num_params"])
            if vector_length is not None and vector_length != wanted:
                config = json.loads(current["config"])
                raise PayloadError(
                    f"vector_length {vector_length} differs from the consortium's "
                    f"{_label(current)}, heads {', '.join(config['heads'])}: leave "
                    f"vector_length out to use it; another router needs a new lineage "
                    f"(`{LINEAGE_COMMAND}`)")
            return wanted, _ref(current), base
        if vector_length is None:
            raise PayloadError("vector_length is required: this server declares no router "
                               "configuration ([router] in its settings) to take it from")
        if base is not None and int(base["length"]) != vector_length:
            raise PayloadError(f"vector_length {vector_length} differs from the current "
                               f"router version's length {base['length']}")
        return vector_length, None, base
