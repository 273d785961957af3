"""What the server says about a round: its status (``RoundInfo``) and, when it fails, who left
it, where and why. Reads only (the store, the live lookup and the round's records), so status
polls never take the round lock."""

from __future__ import annotations

import time
from dataclasses import replace

from sdk.wire import Refusal, RoundInfo, RoundSpec
from server_app._rounds._lookup import RoundLookup, started
from server_app._rounds._records import RoundRecords, StageWalk
from server_app._store import RoundRow, Store

__all__ = ["RoundStatus"]


class RoundStatus:
    """Rounds' status views over ``store``, ``lookup`` (the live rounds) and ``records``."""

    def __init__(self, store: Store, lookup: RoundLookup, records: RoundRecords) -> None:
        self.store = store
        self._rounds = lookup
        self.records = records

    def info(self, round_id: int) -> RoundInfo:
        """Status of one round, read without the round lock (one stage close is one
        transaction: a poll sees the state before or after it)."""
        row, _ = self._rounds.server(round_id)
        spec = self._rounds.spec(round_id, row)
        stages = self._rounds.stages(round_id, row)
        walk = self._walk(round_id, row, stages)
        refusals = self.records.refusals(round_id)
        dropouts: set[str] = set()
        expected = set(spec.participants)
        for _, sent, closed in walk:
            if not closed:
                break
            dropouts |= expected - sent
            expected &= sent
        return RoundInfo.of(
            spec, status=row.status,
            stage=stages[row.stage_index] if row.status == "open" else None,
            stages=stages, dropouts=sorted(dropouts), router_version=row.router_version,
            error=row.error, created_at=row.created_at, finished_at=row.finished_at,
            refusals=refusals, failures=self._failures(refusals, row, spec, walk),
            dp=self.records.dp_account(round_id, row.status),
            captured=row.captured, resumed=row.resumed)

    def failure_text(self, round_id: int, cause: str) -> str:
        """A failing round's text: ``cause`` and who left it, where and why."""
        try:
            row, _ = self._rounds.server(round_id)
            spec = self._rounds.spec(round_id, row)
            walk = self._walk(round_id, replace(row, status="failed"),
                              self._rounds.stages(round_id, row))
            failures = self._failures(self.records.refusals(round_id), row, spec, walk,
                                      ended_at=time.time())
        except (ValueError, KeyError, LookupError):  # a round that cannot be read: its cause
            return cause
        return self.records.failure_text(cause, failures)

    def _walk(self, round_id: int, row: RoundRow, stages: list[str]) -> StageWalk:
        """Who sent each stage up to the current one; the current open stage only where
        someone may be named there (the round ended, or a member reported leaving it)."""
        walk: StageWalk = []
        named = row.status != "open" or bool(self.records.refusers(round_id))
        for stage in stages[: row.stage_index + 1]:
            closed = self._rounds.closure(round_id, stage) is not None
            if not (closed or named):
                break
            walk.append((stage, self.store.submitted(round_id, stage), closed))
            if not closed:
                break
        return walk

    def _failures(self, refusals: list[Refusal], row: RoundRow, spec: RoundSpec,
                  walk: StageWalk, ended_at: float | None = None) -> list[dict[str, str]]:
        """Who left the round, where and why; ``ended_at``: the round is failing now."""
        ended_at = ended_at if ended_at is not None else row.finished_at
        ended = ended_at is not None and row.status != "finished"
        # A stage cut short (a cancel, a failed replay) did not wait for its deadline.
        waited = ended_at is not None and ended and \
            ended_at - row.stage_opened_at >= spec.stage_deadline_s
        return self.records.failures(
            refusals, spec.participants, walk, ended=ended,
            cut="no answer by the stage deadline" if waited or not ended
            else "no answer before the round ended")

    def list(self, status: str | None = None) -> list[RoundInfo]:
        """All rounds (that started), oldest first."""
        return [self.info(r.round_id) for r in self.store.round_rows(status) if started(r)]
