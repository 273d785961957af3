"""Per-request reads of rounds for the round manager, with what never changes kept decoded.

Every stage request looks its round up several times (the deadline tick, the participant
check, the expected senders). A round's spec never changes once written, nor does a closed
stage's broadcast, so both are decoded once and kept while the round is live; only the
mutable columns (status, stage index, deadline clock) are read from the store each time,
without decoding the spec, since a secure round makes hundreds of such reads.
"""

from __future__ import annotations

from typing import Any

from sdk.rounds import ROUND_KINDS, ServerRound
from sdk.serving import NotFoundError
from sdk.wire import RoundSpec
from server_app._store import RoundRow, Store

__all__ = ["RoundLookup", "started"]


def started(row: RoundRow) -> bool:
    """Whether a ``Store.round_row`` belongs to a round that started (its spec was written;
    a round that failed at creation keeps the empty ``{}``)."""
    return row.spec not in ("", "{}")


class RoundLookup:
    """The live rounds' server halves and cached specs and closures; not thread-safe by
    itself (the round manager calls it under its lock, or for reads that tolerate a race)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.live: dict[int, ServerRound] = {}
        self._specs: dict[int, RoundSpec] = {}  # immutable once started: parsed once
        # Live rounds' closed-stage broadcasts, decoded once: a closure never changes.
        self.closures: dict[tuple[int, str], dict[str, dict[str, Any]]] = {}

    def server(self, round_id: int) -> tuple[RoundRow, ServerRound | None]:
        """The round's row (spec undecoded) and live server half; 404 unless it started."""
        row = self.store.round_row(round_id)
        if row is None:
            raise NotFoundError(f"round {round_id} does not exist")
        if not started(row):
            raise NotFoundError(f"round {round_id} was never started")
        return row, self.live.get(round_id)

    def spec(self, round_id: int, row: RoundRow | None = None) -> RoundSpec:
        """The round's spec (``row``: its ``Store.round_row`` if the caller has it)."""
        spec = self._specs.get(round_id)
        if spec is None:
            if row is None:
                row = self.server(round_id)[0]
            spec = self._specs[round_id] = RoundSpec.model_validate_json(row.spec)
        return spec

    def stages(self, round_id: int, row: RoundRow) -> list[str]:
        """The round's stage names: its kind's."""
        return list(ROUND_KINDS[self.spec(round_id, row).kind].stages)

    def closure(self, round_id: int, stage: str) -> dict[str, dict[str, Any]] | None:
        """``Store.closure`` (read-only; visible once the close committed), cached while the
        round is live: every submission and stage input reads one, all clients' JSON at once."""
        closed = self.closures.get((round_id, stage))
        if closed is None:
            closed = self.store.closure(round_id, stage)
            if closed is not None and round_id in self.live:
                self.closures[(round_id, stage)] = closed
        return closed

    def forget(self, round_id: int) -> None:
        """An ended round: drop its server half and closures (they stay in the store)."""
        self.live.pop(round_id, None)
        for key in [k for k in list(self.closures) if k[0] == round_id]:  # ``info`` may add
            self.closures.pop(key, None)
