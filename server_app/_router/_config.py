"""The consortium's router configuration at run time: the lineages in the store, the check of
the settings' ``[router]`` against them at start-up, the terms every round opens with, and a
new lineage's first version carried over from the current router (a member joins, or the
operator changes the head order: nothing trained is wiped)."""

from __future__ import annotations

import json
import logging

import numpy as np

from sdk.serving import ConflictError, NotFoundError
from sdk.wire import ConsortiumRouterConfig, PayloadError, RouterConfigInfo, RouterConfigRef
from server_app._store import LineageRow, Store, VersionRow

__all__ = ["ENROLLMENT", "LINEAGE_COMMAND", "RouterLineages", "carried_router"]

_log = logging.getLogger("fedmor.server.router")
ENROLLMENT = "enrollment of "
"""How a lineage the server started for a joining member names its actor (then the name)."""

LINEAGE_COMMAND = "fedmor router lineage --config FILE"
"""The operator command that starts a new router lineage (``POST /v1/router/lineage``)."""


def _info(row: LineageRow, current: int | None,
          versions: tuple[int, int] | None = None) -> RouterConfigInfo:
    first, latest = versions or (None, None)
    return RouterConfigInfo(lineage=row.lineage, sha256=row.sha256,
                            num_params=row.num_params,
                            config=ConsortiumRouterConfig.model_validate_json(row.config),
                            created_at=row.created_at,
                            current=row.lineage == current, first_version=first,
                            latest_version=latest, started_by=row.actor)


def carried_router(flat: np.ndarray, old: ConsortiumRouterConfig,
                   new: ConsortiumRouterConfig) -> np.ndarray | None:
    """``old``'s router parameters ``flat`` (P,) laid out for ``new``: the trunk (every
    parameter before the head) as it is, each head row (W_k (d,), b_k) of a name both list
    moved to its new place, a new name's row zero (its logit starts at 0, as
    ``Router.add_client`` grows a head). None when the encoder or the trunk differ: a trained
    trunk fits only its own architecture."""
    if old.encoder != new.encoder or old.router != new.router:
        return None
    d = old.router.d_model
    trunk = old.num_params - (d + 1) * len(old.heads)  # parameters() order: the head is last
    w_old = flat[trunk:trunk + d * len(old.heads)].reshape(len(old.heads), d)  # (K, d)
    b_old = flat[trunk + d * len(old.heads):]  # (K,)
    w = np.zeros((len(new.heads), d), dtype="<f4")  # (K', d)
    b = np.zeros(len(new.heads), dtype="<f4")  # (K',)
    for k, name in enumerate(new.heads):
        if name in old.heads:
            w[k], b[k] = w_old[old.heads.index(name)], b_old[old.heads.index(name)]
    return np.concatenate([flat[:trunk], w.reshape(-1), b]).astype("<f4")


def _ref(row: LineageRow) -> RouterConfigRef:
    return RouterConfigRef(lineage=row.lineage, sha256=row.sha256,
                           num_params=row.num_params)


def _label(row: LineageRow) -> str:
    return (f"router configuration sha256 {row.sha256[:12]} (lineage {row.lineage}, "
            f"{row.num_params} parameters)")


class RouterLineages:
    """Which router configuration rounds follow. The settings declare it; the store records
    each lineage (a configuration and the versions trained under it). At run time an
    operator's command (:meth:`start`) or a member's enrollment (:meth:`join`: the same
    configuration with one more head) changes it; a restart with settings that differ from
    the store's current lineage is refused (:meth:`check_declared`), unless they declare the
    lineage the joins started from."""

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
            if latest is not None and latest.length != declared.num_params:
                raise ValueError(
                    f"the settings declare {declared.describe()}, but the store's router "
                    f"versions (newest: {latest.version}) have {latest.length} "
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
        if current.sha256 != declared.sha256 and not self._joined_from(declared, current):
            raise ValueError(
                f"the settings declare {declared.describe()}, the store's current lineage "
                f"{current.lineage} follows {_label(current)}: a changed router "
                f"configuration needs a new lineage. Start the server with the current "
                f"configuration and run `{LINEAGE_COMMAND}` (signed by an operator) with the "
                f"new one, then declare it in [router]; or put the current one back in "
                f"[router]")

    def _joined_from(self, declared: ConsortiumRouterConfig, current: LineageRow) -> bool:
        """Whether ``declared`` is a lineage from which only members' joins led to
        ``current``: the settings keep the consortium's first declaration."""
        row: LineageRow | None = current
        while row is not None and row.actor.startswith(ENROLLMENT):
            row = self.store.lineage(row.lineage - 1)
            if row is not None and row.sha256 == declared.sha256:
                _log.info("the settings declare lineage %s; members' enrollments since then "
                          "lead to lineage %s, which stays current", row.lineage,
                          current.lineage)
                return True
        return False

    def current(self) -> RouterConfigInfo | None:
        """The configuration rounds open on now (None: the server declares none)."""
        row = self.store.lineage()
        return None if row is None else _info(row, row.lineage)

    def get(self, lineage: int | None = None) -> RouterConfigInfo:
        """Lineage ``lineage``'s configuration (the current one when None); 404 if none."""
        row = self.store.lineage(lineage)
        if row is None:
            raise NotFoundError("this server declares no router configuration ([router])"
                                if lineage is None else f"router lineage {lineage} does not "
                                "exist")
        current = self.store.lineage()
        return _info(row, None if current is None else current.lineage,
                     self.store.lineage_versions().get(row.lineage))

    def history(self) -> list[RouterConfigInfo]:
        """Every lineage with its first and latest version, oldest first."""
        current = self.store.lineage()
        at = None if current is None else current.lineage
        versions = self.store.lineage_versions()
        return [_info(row, at, versions.get(row.lineage))
                for row in self.store.lineages()]

    def start(self, config: ConsortiumRouterConfig, actor: str) -> RouterConfigInfo:
        """Start a new lineage on ``config`` (audited): rounds open on it from now on. Its
        first version carries the current router over (:func:`carried_router`) when the
        encoder and trunk are the same, so rounds and the reward service go on from what was
        trained; otherwise rounds start from no version, and the reward service keeps serving
        the latest version of the lineage before until one is published. 409 when ``config`` is the current
        configuration already."""
        with self.store.transaction():
            current = self.store.lineage()
            if current is not None and current.sha256 == config.sha256:
                raise ConflictError(f"{_label(current)} is the current one already")
            base = self.store.version()  # the current lineage's newest (None: none yet)
            lineage = self.store.add_lineage(config.sha256, config.num_params,
                                             config.canonical_json(), actor)
            carried = None
            if current is not None and base is not None:
                flat = carried_router(np.frombuffer(base.blob, dtype="<f4"),
                                      ConsortiumRouterConfig.model_validate_json(
                                          current.config), config)
                if flat is not None:
                    carried = self.store.add_version(None, flat.tobytes(), int(flat.shape[0]),
                                                     lineage, carried_from=base.version)
            self.store.audit(actor, "router_lineage_started", lineage=lineage,
                             sha256=config.sha256, num_params=config.num_params,
                             previous=None if current is None else current.lineage,
                             carried_version=carried)
        return self.get(lineage)

    def join(self, name: str) -> RouterConfigInfo | None:
        """A member enrolled: when the current lineage has no head for ``name``, start the
        next one with ``name``'s head appended, carrying the current router over (the member's
        head is not selected until a round of the new lineage trained it). None when it has
        one already, or the server declares no configuration."""
        with self.store.transaction():  # one join at a time: each appends to the newest
            current = self.store.lineage()
            if current is None:
                return None
            config = ConsortiumRouterConfig.model_validate_json(current.config)
            if name in config.heads:
                return None
            grown = ConsortiumRouterConfig.model_validate(
                {**config.model_dump(), "heads": [*config.heads, name]})
            info = self.start(grown, f"{ENROLLMENT}{name}")
        _log.info("member %s joined: router lineage %d (heads %s) starts from version %s",
                  name, info.lineage, ", ".join(info.config.heads), info.first_version)
        return info

    def ref(self, lineage: int | None) -> RouterConfigRef | None:
        """The reference of ``lineage`` (None for None: a version from before lineages)."""
        row = None if lineage is None else self.store.lineage(lineage)
        return None if row is None else _ref(row)

    def round_terms(self, vector_length: int | None
                    ) -> tuple[int, RouterConfigRef | None, VersionRow | None]:
        """(length, configuration reference, base version row) of a round asked with
        ``vector_length`` (None: the configuration's). A length the configuration does not
        give is refused, naming it; without a configuration the newest version fixes it."""
        current = self.store.lineage()
        base = self.store.version()
        if current is not None:
            wanted = current.num_params
            if vector_length is not None and vector_length != wanted:
                config = json.loads(current.config)
                raise PayloadError(
                    f"vector_length {vector_length} differs from the consortium's "
                    f"{_label(current)}, heads {', '.join(config['heads'])}: leave "
                    f"vector_length out to use it; another router needs a new lineage "
                    f"(`{LINEAGE_COMMAND}`)")
            return wanted, _ref(current), base
        if vector_length is None:
            raise PayloadError("vector_length is required: this server declares no router "
                               "configuration ([router] in its settings) to take it from")
        if base is not None and base.length != vector_length:
            raise PayloadError(f"vector_length {vector_length} differs from the current "
                               f"router version's length {base.length}")
        return vector_length, None, base
