"""Round lifecycle: create, accept stage messages, close stages at completion or deadline,
persist every input, and rebuild open rounds from the store after a restart (by replay)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

import numpy as np

from sdk.rounds import ROUND_KINDS, RoundFailed, ServerRound, from_delta
from sdk.serving import NotFoundError
from sdk.wire import (
    PayloadError,
    Refusal,
    RoundCreate,
    RoundInfo,
    RoundSpec,
    StageAck,
    StageBroadcast,
    StagePayload,
)
from server_app._rounds._lookup import RoundLookup, started
from server_app._rounds._records import RoundRecords, StageWalk
from server_app._router._config import RouterLineages
from server_app._store import ConflictError, RoundRow, Store, payload_record

__all__ = ["RoundManager"]

_log = logging.getLogger("fedmor.server")

# How long a group commit waits for queued messages to join it: far below one fsync, so a lone
# message loses little, while a stage's burst shares one commit.
_GATHER_S = 0.002


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


class RoundManager:
    """Drives the server half of every open round; all methods are thread-safe. ``capture``
    (capture mode) is told of every captured round."""

    def __init__(self, store: Store, *, default_deadline_s: float,
                 on_change: Callable[[], None] | None = None,
                 capture: RoundCapture | None = None) -> None:
        self.store = store
        self.default_deadline_s = default_deadline_s
        self.on_change = on_change  # also called when a round opens, a stage closes or ends
        self._lock = threading.RLock()
        # Durability, not long polling (the routes' ``wait_broadcast`` waits on the event
        # loop): the group commit waits here for the submissions still storing their message.
        self._arrivals = threading.Condition()
        self._storing = 0  # admitted submissions still parsing or storing their message
        self._rounds = RoundLookup(store)
        self.records = RoundRecords(store)
        self.lineages = RouterLineages(store)
        self.capture = capture
        self.recovered: list[int] = []  # open rounds resumed at start, for ``/v1/health``
        self._recover()

    # -- creation and recovery -----------------------------------------------------------------
    def create(self, req: RoundCreate, actor: str = "admin") -> RoundInfo:
        """Open a round over ``req.participants`` (default: every enrolled client); ``actor``
        (who asked) goes into the audit record."""
        kind = ROUND_KINDS.get(req.kind)
        if kind is None:
            raise PayloadError(f"unknown round kind {req.kind!r}")
        clients = {c["client_id"]: c for c in self.store.clients()}
        participants = req.participants if req.participants is not None else list(clients)
        unknown = [p for p in participants if p not in clients]
        if unknown:
            raise PayloadError(f"unknown participant(s): {', '.join(unknown)}")
        if len(set(participants)) != len(participants):
            raise PayloadError("participants contain duplicates")
        if len(participants) < req.min_clients:
            raise PayloadError(f"{len(participants)} participant(s) < min_clients "
                               f"{req.min_clients}")
        length, router_config, base = self.lineages.round_terms(req.vector_length)
        # The round as it will be announced; its id comes from the store, under the lock.
        draft = RoundSpec(
            round_id=0, kind=req.kind, participants=participants,
            public_keys=[clients[p]["public_key"] for p in participants],
            vector_length=length, min_clients=req.min_clients,
            stage_deadline_s=req.stage_deadline_s or self.default_deadline_s,
            base_version=None if base is None else base.version,
            params=kind.prepare(req.params), router_config=router_config)
        # Parsed once, outside the lock: bad params are refused before the store is touched,
        # and the DP terms come from the same parsed object as the server half.
        try:
            parsed = kind.terms(draft)
        except ValueError as exc:
            raise PayloadError(f"cannot start round: {exc}") from exc
        dp = self.records.dp_terms(parsed)
        with self._lock:
            # One commit (one fsync) for the new round; a refused one rolls back: no row.
            with self.store.transaction():
                round_id = self.store.create_round(req.kind, {},
                                                   captured=self.capture is not None)
                terms = parsed.numbered(round_id)
                try:
                    server = kind.server(terms)
                except (ValueError, RoundFailed) as exc:
                    raise PayloadError(f"cannot start round: {exc}") from exc
                self.store.update_round(round_id, spec=terms.spec.model_dump_json(),
                                        stage_opened_at=time.time())
                self.store.audit(actor, "round_created", round_id=round_id,
                                 kind=req.kind, participants=participants)
                if dp is not None:
                    self.store.put_round_dp(round_id, *dp)
            self._rounds.live[round_id] = server
            self._notify()  # idle clients long-polling ``/v1/work`` learn of it at once
        return self.info(round_id)

    def _recover(self) -> None:
        """Rebuild every open round by replaying its stored messages and closures in order;
        a round that cannot be rebuilt is failed cleanly (its clients move on)."""
        for row in self.store.round_rows("open"):
            round_id = row.round_id
            try:
                spec = self._rounds.spec(round_id, row)
                kind = ROUND_KINDS[spec.kind]
                server = kind.server(kind.terms(spec))
                for index in range(row.stage_index + 1):
                    stage = server.stages[index]
                    for client_id, payload in self.store.messages(round_id, stage).items():
                        server.accept(stage, client_id, server.parse(stage, client_id, payload))
                    if self.store.closure(round_id, stage) is not None:
                        server.close(stage)
                self._rounds.live[round_id] = server
                # A fresh deadline: clients could not reach us while we were down; the note
                # tells the operator why the round took longer.
                note = (f"resumed after a server restart at stage "
                        f"{server.stages[row.stage_index]} "
                        f"({time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())})")
                self.store.update_round(round_id, stage_opened_at=time.time(), resumed="; ".join(
                    n for n in (row.resumed, note) if n))
                self.recovered.append(round_id)
                self.store.audit("server", "round_resumed", round_id=round_id)
            except Exception as exc:  # any replay failure ends the round, never the server
                self._fail(round_id, f"could not resume after restart: {exc}")

    # -- client traffic ------------------------------------------------------------------------
    def _participant(self, round_id: int,
                     client_id: str) -> tuple[RoundRow, ServerRound | None, RoundSpec]:
        """The round's row, live server and spec; refuses a client outside the round."""
        row, server = self._rounds.server(round_id)
        spec = self._rounds.spec(round_id, row)
        if client_id not in spec.participants:
            raise PermissionError(f"client {client_id} is not a participant of round {round_id}")
        return row, server, spec

    def _admit(self, round_id: int, stage: str, client_id: str,
               record: tuple[str | bytes, str]) -> ServerRound | StageAck:
        """Under the lock: the live round if ``client_id`` may send ``stage`` now, or the
        original ack of an identical retry; otherwise a typed error (404 / 409)."""
        self.tick()
        row, server, _ = self._participant(round_id, client_id)
        if self.store.has_message(round_id, stage, client_id):  # a retry: same ack or 409
            digest, at, _ = self.store.put_message(round_id, stage, client_id, record)
            return StageAck(round_id=round_id, stage=stage, client_id=client_id, digest=digest,
                            stored_at=at)
        if row.status != "open" or server is None:
            raise ConflictError(f"round {round_id} is {row.status}")
        current = server.stages[row.stage_index]
        if stage not in server.stages:
            raise NotFoundError(f"round {round_id} has no stage {stage!r}; stages: "
                                f"{', '.join(server.stages)}")
        if stage != current:
            raise ConflictError(f"round {round_id} is at stage {current}, not {stage}")
        if client_id not in self._expected(round_id, server, row.stage_index):
            raise ConflictError(f"client {client_id} dropped out of round {round_id}")
        return server

    def submit(self, round_id: int, stage: str, client_id: str, payload: StagePayload, *,
               body_sha256: str | None = None) -> StageAck:
        """Accept and commit one stage message; identical retries return the same ack.
        ``body_sha256``: the hex sha256 of a binary payload, when the caller already hashed it.

        Hashing and parsing (megabytes for a masked vector) run outside the lock, so uploads
        are decoded concurrently; only the state update and the durable insert are serialized.
        """
        ack = self._submit(round_id, stage, client_id, payload_record(
            payload, body_sha256=body_sha256), payload)
        self._durable()  # only now may the message be acknowledged
        return ack

    def _submit(self, round_id: int, stage: str, client_id: str, record: tuple[str | bytes, str],
                payload: StagePayload) -> StageAck:
        with self._lock:
            admitted = self._admit(round_id, stage, client_id, record)
        if isinstance(admitted, StageAck):
            return admitted
        with self._arrivals:
            self._storing += 1
        try:
            parsed = admitted.parse(stage, client_id, payload)
            with self._lock:  # re-check: the stage may have closed (or a twin arrived) meanwhile
                server = self._admit(round_id, stage, client_id, record)
                if isinstance(server, StageAck):
                    return server
                server.accept(stage, client_id, parsed)
                # Stored before the stage can close (a replay after a crash sees exactly the
                # messages the live round absorbed), committed before the ack (``_durable``).
                digest, at, _ = self.store.put_message(round_id, stage, client_id, record,
                                                       defer_commit=True)
                index = server.stages.index(stage)  # _admit checked it is the current stage
                if self._expected(round_id, server, index) <= self.store.submitted(round_id,
                                                                                   stage):
                    self._close(round_id)  # its transaction commits the messages too
        finally:
            with self._arrivals:
                self._storing -= 1
                self._arrivals.notify_all()
        return StageAck(round_id=round_id, stage=stage, client_id=client_id, digest=digest,
                        stored_at=at)

    def _durable(self) -> None:
        """Group commit: make every stored stage message durable with one fsync. Messages of
        one stage arrive together; the first thread here waits (``_GATHER_S`` at most) for the
        others already queued to store theirs, then one commit acknowledges them all."""
        if not self.store.pending:
            return  # another thread's commit covered this message
        deadline = time.monotonic() + _GATHER_S
        with self._arrivals:
            while self._storing and (left := deadline - time.monotonic()) > 0:
                self._arrivals.wait(left)
        self.store.flush()

    def broadcast(self, round_id: int, stage: str, client_id: str) -> StageBroadcast:
        """The server's input for ``client_id``'s ``stage`` now (ready once the previous stage
        closed); a held request waits for it on the event loop (``_work.wait_broadcast``)."""
        with self._lock:
            return self._broadcast(round_id, stage, client_id)

    def next_stage(self, round_id: int, stage: str) -> str | None:
        """The stage after ``stage`` in this round, or None after the last one."""
        row, _ = self._rounds.server(round_id)
        stages = self._rounds.stages(round_id, row)
        index = stages.index(stage) if stage in stages else len(stages)
        return stages[index + 1] if index + 1 < len(stages) else None

    def _broadcast(self, round_id: int, stage: str, client_id: str) -> StageBroadcast:
        self.tick()
        row, server, _ = self._participant(round_id, client_id)
        stages = self._rounds.stages(round_id, row)
        if stage not in stages:
            raise NotFoundError(f"round {round_id} has no stage {stage!r}")
        index = stages.index(stage)
        out = StageBroadcast(round_id=round_id, stage=stage, ready=False,
                             round_status=row.status)
        if index == 0:
            payload = server.first_broadcast(client_id) if server else {}
            return out.model_copy(update={"ready": True, "payload": payload})
        closed = self._rounds.closure(round_id, stages[index - 1])
        if closed is None:
            return out
        if client_id not in closed:
            raise ConflictError(f"client {client_id} dropped out of round {round_id} "
                                f"before stage {stage}")
        return out.model_copy(update={"ready": True, "payload": closed[client_id]})

    def refuse(self, round_id: int, client_id: str, reason: str, detail: str) -> RoundInfo:
        """Record that ``client_id``'s site policy refused the round: it is expected in no
        later stage, so a stage that waits only for it closes now instead of at its deadline."""
        with self._lock:
            row, server, _ = self._participant(round_id, client_id)
            self.records.refuse(round_id, client_id, reason, detail)
            if row.status == "open" and server is not None:
                index = row.stage_index
                if self._expected(round_id, server, index) <= self.store.submitted(
                        round_id, server.stages[index]):
                    self._close(round_id)
                self._notify()
        return self.info(round_id)

    def cancel(self, round_id: int, actor: str, reason: str = "") -> RoundInfo:
        """End an open round as failed now (the operator's decision, audited): its members
        stop at their next request and its secrets are forgotten as after any failure."""
        with self._lock:
            row = self.store.round_row(round_id)
            if row is None:
                raise NotFoundError(f"round {round_id} does not exist")
            if row.status != "open":
                raise ConflictError(f"round {round_id} is {row.status}: only an open round "
                                    f"can be cancelled")
            self.store.audit(actor, "round_cancelled", round_id=round_id, reason=reason)
            self._fail(round_id, f"cancelled by {actor}" + (f": {reason}" if reason else ""))
        return self.info(round_id)

    # -- stage closing -------------------------------------------------------------------------
    def _expected(self, round_id: int, server: ServerRound, index: int) -> set[str]:
        if index == 0:
            expected = set(self._rounds.spec(round_id).participants)
        else:
            closed = self._rounds.closure(round_id, server.stages[index - 1]) or {}
            expected = set(closed) if closed else self.store.submitted(
                round_id, server.stages[index - 1])
        return expected - self.records.refusers(round_id)

    def tick(self, now: float | None = None) -> None:
        """Close every stage whose deadline passed (called lazily and by a background task)."""
        current = time.time() if now is None else now
        with self._lock:
            for row in self.store.round_rows("open"):
                if not started(row):
                    continue
                spec = self._rounds.spec(row.round_id, row)
                if current - row.stage_opened_at >= spec.stage_deadline_s:
                    self._close(row.round_id)

    def _published(self, round_id: int, mean_delta: np.ndarray) -> np.ndarray:
        """The next router version: the round's base plus the weighted mean of the deltas."""
        base_version = self._rounds.spec(round_id).base_version
        row = None if base_version is None else self.store.version(base_version)
        base = None if row is None else np.frombuffer(row.blob, dtype="<f4")
        return np.ascontiguousarray(from_delta(mean_delta, base), dtype="<f4")

    def _close(self, round_id: int) -> None:
        row, server = self._rounds.server(round_id)
        if server is None:
            return
        index = row.stage_index
        stage = server.stages[index]
        captured = row.captured  # as announced when it opened, whatever the setting now
        present = self.store.submitted(round_id, stage)
        missing = self._expected(round_id, server, index) - present
        try:
            broadcast = server.close(stage)
        except (RoundFailed, ValueError, RuntimeError) as exc:
            self._fail(round_id, f"stage {stage}: {exc}")
            return
        last = index + 1 == len(server.stages)
        result = None
        if last:
            # The kind's bound holds the mean delta; base + delta is what gets published.
            mean = np.ascontiguousarray(server.result(), dtype="<f4")
            problem = _aggregate_problem(mean, server.aggregate_bound)
            if problem is not None:  # publish nothing: a poisoned router never goes out
                self._fail(round_id, f"stage {stage}: the aggregate {problem}")
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

    def _fail(self, round_id: int, reason: str) -> None:
        """End the round as failed; a captured one is captured with what it received (the
        marker made durable before the failure, as for a finish)."""
        reason = self._failure_text(round_id, reason)
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

    def _notify(self) -> None:
        """Tell ``on_change`` (the routes' long polls: stage inputs and ``/v1/work``)."""
        if self.on_change is not None:
            self.on_change()

    def awaiting(self, client_id: str) -> list[int]:
        """Open rounds whose current stage still waits for ``client_id``'s message: a new
        round, or one a restarted client must resume. A client that sent the current stage,
        or dropped out, is not listed (it has nothing to do until the stage closes)."""
        out = []
        with self._lock:
            for row in self.store.round_rows("open"):
                round_id = row.round_id
                server = self._rounds.live.get(round_id)
                if not started(row) or server is None:
                    continue
                if client_id not in self._rounds.spec(round_id, row).participants:
                    continue
                index = row.stage_index
                if self.store.has_message(round_id, server.stages[index], client_id):
                    continue
                if client_id in self._expected(round_id, server, index):
                    out.append(round_id)
        return out

    # -- status --------------------------------------------------------------------------------
    def info(self, round_id: int) -> RoundInfo:
        """Status of one round. Reads the store without the round lock, so status polls never
        queue behind a stage message being committed (one stage close is one transaction)."""
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

    def _failure_text(self, round_id: int, cause: str) -> str:
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

    def list(self, status: str | None = None) -> list[RoundInfo]:
        """All rounds (that started), oldest first."""
        return [self.info(r.round_id) for r in self.store.round_rows(status)
                if started(r)]
