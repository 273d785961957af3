"""Round lifecycle, the one facade the routes call: create rounds, admit and persist stage
messages, hand out stage inputs, close stages at completion or deadline (``_closing``), answer
status (``_status``), and rebuild open rounds from the store after a restart (by replay)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from sdk.rounds import ROUND_KINDS, RoundFailed, ServerRound
from sdk.serving import NotFoundError
from sdk.wire import (
    PayloadError,
    RoundCreate,
    RoundInfo,
    RoundSpec,
    StageAck,
    StageBroadcast,
    StagePayload,
)
from server_app._rounds._closing import RoundCapture, StageCloser
from server_app._rounds._state import RoundLookup, RoundRecords, RoundStatus, started
from server_app._router._config import RouterLineages
from server_app._store import ConflictError, RoundRow, Store, payload_record

__all__ = ["RoundManager"]


# How long a group commit waits for queued messages to join it: far below one fsync, so a lone
# message loses little, while a stage's burst shares one commit.
_GATHER_S = 0.002


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
        self._status = RoundStatus(store, self._rounds, self.records)
        self._closer = StageCloser(store, self._rounds, self.records, self._status,
                                   capture=capture, notify=self._notify)
        self.recovered: list[int] = []  # open rounds resumed at start, for ``/v1/health``
        self._recover()

    # -- creation and recovery -----------------------------------------------------------------
    def create(self, req: RoundCreate, actor: str = "admin") -> RoundInfo:
        """Open a round over ``req.participants`` (default: every enrolled client); ``actor``
        (who asked) goes into the audit record."""
        kind = ROUND_KINDS.get(req.kind)
        if kind is None:
            raise PayloadError(f"unknown round kind {req.kind!r}")
        clients = {c.client_id: c for c in self.store.clients()}
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
            public_keys=[clients[p].public_key for p in participants],
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
                self._closer.fail(round_id, f"could not resume after restart: {exc}")

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
        if client_id not in self._closer.expected(round_id, server, row.stage_index):
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
                if self._closer.expected(round_id, server, index) <= self.store.submitted(round_id,
                                                                                   stage):
                    self._closer.close(round_id)  # its transaction commits the messages too
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
            if server is None:  # the round is over: there is no opening to give
                return out
            return out.model_copy(update={"ready": True,
                                          "payload": server.first_broadcast(client_id)})
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
                if self._closer.expected(round_id, server, index) <= self.store.submitted(
                        round_id, server.stages[index]):
                    self._closer.close(round_id)
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
            self._closer.fail(round_id, f"cancelled by {actor}" + (f": {reason}" if reason else ""))
        return self.info(round_id)

    # -- deadlines and work ----------------------------------------------------------------------
    def tick(self, now: float | None = None) -> None:
        """Close every stage whose deadline passed (called lazily and by a background task)."""
        current = time.time() if now is None else now
        with self._lock:
            for row in self.store.round_rows("open"):
                if not started(row):
                    continue
                spec = self._rounds.spec(row.round_id, row)
                if current - row.stage_opened_at >= spec.stage_deadline_s:
                    self._closer.close(row.round_id)

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
                if client_id in self._closer.expected(round_id, server, index):
                    out.append(round_id)
        return out

    # -- status --------------------------------------------------------------------------------
    def info(self, round_id: int) -> RoundInfo:
        """Status of one round. Reads the store without the round lock, so status polls never
        queue behind a stage message being committed (one stage close is one transaction)."""
        return self._status.info(round_id)

    def list(self, status: str | None = None) -> list[RoundInfo]:
        """All rounds (that started), oldest first."""
        return self._status.list(status)
