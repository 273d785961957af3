"""Which router the reward service serves now, and which of its heads it may select.

The served version is the current lineage's newest; while that lineage has none (its
trunk could not be carried over), the newest version of the latest earlier lineage that has
one, so selection never waits for a round. A head is masked (never selected) while its member
is not enrolled (revoked, removed, or not enrolled yet) and while it joined in this lineage
and no finished round of the lineage has trained it; every other head serves. Membership is
read from the store at each batch, so a revocation applies to the next batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sdk.serving import ConflictError
from sdk.wire import ConsortiumRouterConfig
from server_app._store import LineageRow, Store, VersionMeta

__all__ = ["ServingRouter", "carry_online_state", "serving_router"]


@dataclass(frozen=True)
class ServingRouter:
    """The router version the routed selections use, its heads and their members."""

    version: int | None  # None: no router at all (the settings' members, unrouted methods)
    lineage: int | None
    encoder: dict[str, Any]
    router: dict[str, Any]
    heads: list[str]  # member names, in the router's output order
    client_ids: list[str]  # one per head; "" for a head whose member is not enrolled
    masked: dict[str, str] = field(default_factory=dict)  # head name -> why it is skipped

    @property
    def selectable(self) -> list[int]:
        """Indices of the heads the selection may pick."""
        return [k for k, name in enumerate(self.heads) if name not in self.masked]

    def check_selectable(self) -> None:
        """409 naming every head and its reason when none can be selected."""
        if not self.selectable:
            reasons = ", ".join(f"{n} ({why})" for n, why in self.masked.items())
            raise ConflictError(f"no head of router version {self.version} can be selected: "
                                f"{reasons}; enroll a member or wait for a round")

    def describe(self) -> str:
        """``k of K heads`` with the masked ones named, as the operator's views say it."""
        served = f"{len(self.selectable)} of {len(self.heads)} heads"
        if not self.masked:
            return served
        return served + " (masked: " + ", ".join(f"{n}: {why}"
                                                 for n, why in self.masked.items()) + ")"


def _served_lineage(store: Store) -> tuple[VersionMeta | None, LineageRow | None]:
    """(version row without blob, its lineage row): the current lineage's newest version, or
    the newest of the latest earlier lineage that has one."""
    current = store.lineage()
    if current is None:
        return store.version_meta(), None
    for lineage in range(current.lineage, 0, -1):
        row = store.version_meta(lineage)
        if row is not None:
            return row, store.lineage(lineage)
    return None, current


def _untrained(store: Store, lineage: LineageRow, version: int,
               heads: list[str]) -> set[str]:
    """Heads the lineage added to the router it carried over that no finished round of the
    lineage (up to ``version``) has trained with their member taking part."""
    source = store.carried_lineage(lineage.lineage)
    if source is None:  # the lineage carried nothing over: its rounds train every head
        return set()
    added = set(heads) - set(ConsortiumRouterConfig.model_validate_json(
        source.config).heads)
    if not added:
        return set()
    while (row := store.version_meta(version=version)) is not None and row.restored:
        version = row.restored  # a rollback serves what the restored version learned
    took_part = store.trained_in(lineage.lineage, version)
    names = store.names_of(took_part)
    return {h for h in added if h not in names}


def serving_router(store: Store, encoder: dict[str, Any], router: dict[str, Any],
                   members: list[str] | None) -> ServingRouter:
    """The router to serve now; ``encoder``, ``router`` and ``members`` are the settings'
    own (used when the store has no lineage)."""
    row, lineage = _served_lineage(store)
    enrolled = {m.name: m.client_id for m in store.clients("member")}
    if lineage is not None:
        declared = ConsortiumRouterConfig.model_validate_json(lineage.config)
        encoder, router = declared.encoder.model_dump(), declared.router.model_dump()
        heads: list[str] = list(declared.heads)
    elif members is not None:
        heads = list(members)
    else:
        heads = list(enrolled)
        if not heads:
            raise ConflictError("no member is enrolled: nobody can score rewards yet")
    masked = {}
    for name in heads:
        if name not in enrolled:
            masked[name] = "revoked" if store.revocation(name) is not None else "not enrolled"
    if row is not None and lineage is not None:
        for name in sorted(_untrained(store, lineage, row.version, heads)):
            masked.setdefault(name, f"joined in lineage {lineage.lineage}, not trained in "
                              f"a round yet")
    return ServingRouter(
        version=None if row is None else row.version,
        lineage=None if lineage is None else lineage.lineage, encoder=encoder,
        router=router, heads=heads, client_ids=[enrolled.get(n, "") for n in heads],
        masked=masked)


_PER_HEAD = ("head.weight", "head.bias", "phi0.weight", "phi0.bias", "u_diag", "u_inv")


def carry_online_state(saved: dict[str, Any], fresh: dict[str, Any], old_heads: list[str],
                       new_heads: list[str]) -> dict[str, Any]:
    """The online router state ``saved`` (Neural TS on ``old_heads``) moved onto the fresh
    state of the router a new lineage carried over (``new_heads``): a head both list keeps its
    learned row of the head, phi0 and U, a new head its fresh rows; the update count and the
    sampler go on. A join so keeps what the bandit learned about the members it knows."""
    out = {key: value.clone() if hasattr(value, "clone") else value
           for key, value in fresh.items()}
    for k, name in enumerate(new_heads):
        if name in old_heads:
            j = old_heads.index(name)
            for key in _PER_HEAD:
                if key in saved and key in out:
                    out[key][k] = saved[key][j]
    out["num_updates"], out["rng"] = saved["num_updates"], saved["rng"]
    return out
