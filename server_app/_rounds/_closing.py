"""Ending stages and rounds: close a stage with what arrived (the next stage's inputs, or the
router version the last stage publishes), fail a round with who left it and why, and hand an
ended round that was announced as captured to capture mode. The round manager calls it under
its lock."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

import numpy as np

from sdk.rounds import RoundFailed, ServerRound, from_delta
from server_app._rounds._state import RoundLookup, RoundRecords, RoundStatus
from server_app._store import Store

__all__ = ["RoundCapture", "StageCloser"]

_log = logging.getLogger("fedmor.server")


def _aggregate_problem(result: np.ndarray, bound: float) -> str | None:
    """Why ``result`` (P,) cannot be published as a router version, or None."""
    if not np.all(np.isfinite(result)):
        return "contains NaN or infinity"
    largest = float(np.max(np.abs(result))) if result.size else 0.0
    if largest > bound:
        return f"has a value of magnitude {largest:.3g}, outside [-{bound:g}, {bound:g}]"
    return None


class RoundCapture(Protocol):
    """What the round manager tells capture mode (``ServerCapture``) about a captured round."""

    def reserve(self, round_id: int) -> None:
        """Mark the round as being captured, durably, before its end is acknowledged."""

    def round_ended(self, round_id: int) -> None:
        """Capture the round's artefacts (in the background)."""


class StageCloser:
    """Closes stages and fails rounds in ``store``; ``notify`` is called after every change
    (the long polls wake), ``capture`` told of every captured round that ends."""

    def __init__(self, store: Store, lookup: RoundLookup, records: RoundRecords,
                 status: RoundStatus, *, capture: RoundCapture | None,
                 notify: Callable[[], None]) -> None:
        self.store = store
        self._rounds = lookup
        self.records = records
        self._status = status
        self.capture = capture
        self._notify = notify

    def expected(self, round_id: int, server: ServerRound, index: int) -> set[str]:
        """Who must still be heard from for stage ``index``: the participants, then those the
        previous stage's close addressed (or, without a broadcast, that sent it), less the
        members that refused the round."""
        if index == 0:
            expected = set(self._rounds.spec(round_id).participants)
        else:
            closed = self._rounds.closure(round_id, server.stages[index - 1]) or {}
            expected = set(closed) if closed else self.store.submitted(
                round_id, server.stages[index - 1])
        return expected - self.records.refusers(round_id)

    def _published(self, round_id: int, mean_delta: np.ndarray) -> np.ndarray:
        """The next router version: the round's base plus the weighted mean of the deltas."""
        base_version = self._rounds.spec(round_id).base_version
        row = None if base_version is None else self.store.version(base_version)
        base = None if row is None else np.frombuffer(row.blob, dtype="<f4")
        return np.ascontiguousarray(from_delta(mean_delta, base), dtype="<f4")

    def close(self, round_id: int) -> None:
        """Close the round's current stage: its broadcast and dropouts are committed in one
        transaction with the next stage's opening, or with the published router version
        after the last stage; a stage the kind cannot close fails the round."""
        row, server = self._rounds.server(round_id)
        if server is None:
            return
        index = row.stage_index
        stage = server.stages[index]
        captured = row.captured  # as announced when it opened, whatever the setting now
        present = self.store.submitted(round_id, stage)
        missing = self.expected(round_id, server, index) - present
        try:
            broadcast = server.close(stage)
        except (RoundFailed, ValueError, RuntimeError) as exc:
            self.fail(round_id, f"stage {stage}: {exc}")
            return
        last = index + 1 == len(server.stages)
        result = None
        if last:
            # The kind's bound holds the mean delta; base + delta is what gets published.
            mean = np.ascontiguousarray(server.result(), dtype="<f4")
            problem = _aggregate_problem(mean, server.aggregate_bound)
            if problem is not None:  # publish nothing: a poisoned router never goes out
                self.fail(round_id, f"stage {stage}: the aggregate {problem}")
                return
            result = self._published(round_id, mean)
            if captured and self.capture is not None:  # durable before the finish (and ack)
                self.capture.reserve(round_id)
        with self.store.transaction():  # one commit (one fsync) per close
            self.store.put_closure(round_id, stage, broadcast)
            self.store.audit("server", "stage_closed", round_id=round_id, stage=stage,
                             present=sorted(present), dropouts=sorted(missing))
            if result is None:
                self.store.update_round(round_id, stage_index=index + 1,
                                        stage_opened_at=time.time())
            else:
                terms = self._rounds.spec(round_id).router_config
                version = self.store.add_version(round_id, result.tobytes(),
                                                 int(result.shape[0]),
                                                 None if terms is None else terms.lineage)
                self.store.update_round(round_id, status="finished", router_version=version,
                                        finished_at=time.time())
                self.store.audit("server", "round_finished", round_id=round_id, version=version)
                if captured and self.capture is None:
                    self.store.audit("server", "capture_missed", round_id=round_id)
            _log.info("round %d: stage %s closed (%d present, dropouts: %s)", round_id, stage,
                      len(present), sorted(missing) or "none")
        if last:
            if captured and result is not None:
                self._captured(round_id)
            self._forget(round_id)
            self.store.checkpoint_soon()  # the round's megabytes leave the log between rounds
        self._notify()

    def _captured(self, round_id: int) -> None:
        """Hand an ended round (finished or failed) recorded as captured to the capture
        worker. With capture mode off now (the server restarted without it) the round is not
        captured: a warning, and a ``capture_missed`` audit record (counted in ``/metrics``)
        that the commit above made durable. It is not written into ``capture.dir`` anyway:
        with the mode off that directory is only a default path, not served to the auditor,
        not pruned, and the operator's setting says the server keeps no members' messages;
        keeping fewer than announced breaks no member's policy, keeping more would."""
        if self.capture is not None:
            self.capture.round_ended(round_id)
            return
        _log.warning("round %d was announced as captured but capture mode is off now: "
                     "it is not in the capture (capture_missed)", round_id)

    def fail(self, round_id: int, reason: str) -> None:
        """End the round as failed; a captured one is captured with what it received (the
        marker made durable before the failure, as for a finish)."""
        reason = self._status.failure_text(round_id, reason)
        row = self.store.round_row(round_id)
        captured = row is not None and row.captured
        if captured and self.capture is not None:
            self.capture.reserve(round_id)
        with self.store.transaction():
            self.store.update_round(round_id, status="failed", error=reason,
                                    finished_at=time.time())
            self.store.audit("server", "round_failed", round_id=round_id, reason=reason)
            if captured and self.capture is None:
                self.store.audit("server", "capture_missed", round_id=round_id)
        _log.warning("round %d failed: %s", round_id, reason)
        if captured:
            self._captured(round_id)
        self._forget(round_id)
        self.store.checkpoint_soon()
        self._notify()

    def _forget(self, round_id: int) -> None:
        self._rounds.forget(round_id)  # an ended round: its closures stay in the store
        self.records.forget(round_id)
