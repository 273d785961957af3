"""The server's opt-in capture mode: exactly what it received and published, for an auditor.

With ``capture.enabled`` every round opened says ``captured: true`` in its info (no member is
captured silently). A round's capture is fixed when it opens (the store's ``rounds.captured``):
a restart that turns the mode on or off changes only the rounds opened after it. After each
captured round ends a worker thread writes, into ``capture.dir`` in the
``sdk.capture`` format, the messages the round stored as they arrived (masked inputs and
unmasking responses of ``router_secagg``; plain updates of ``rm_fedavg``), the round's base and
its published router. A round that fails (too few survivors, an aggregate out of range) is
captured too, as ``failed`` with the reason: the messages of the stages that ran, no router.
Every reward query the broker answers is logged as (image hash, prompt, response, score,
member), written before the aligner gets its reward. Only the newest ``retention_rounds``
rounds are kept.

A crash loses no captured round: before a captured round's finish or failure is committed
(and so before its last upload is acknowledged), the round manager calls
:meth:`ServerCapture.reserve`, which leaves a durable marker ``.pending/round-NNNNNN`` in the
capture directory; the marker goes once the round is in the manifest. A server that restarts
captures every round still marked (the messages are in its store), and a capture that failed is
tried again there.

Parameters are named as ``sdk.router.Router.named_parameters()`` of the router in ``capture``
(default: ``alignment``'s router and encoder; its outputs are the enrolled members, or
``alignment.members``): the attacks read layers by name. A vector of another length is kept
whole, as one ``flat`` tensor.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sdk.capture import (
    CaptureFiles,
    CaptureManifest,
    CaptureMeta,
    RewardQuery,
    RoundCapture,
    prune_capture,
    write_capture,
)
from sdk.rounds import ROUND_KINDS, FedAvgUpdate, from_delta, protocol_ids
from sdk.wire import RewardItem, RoundSpec
from server_app._settings._audit import CaptureSettings
from server_app._store import Store

__all__ = ["ServerCapture"]

_log = logging.getLogger("fedmor.server.capture")
_PENDING = ".pending"  # markers of ended rounds not yet in the manifest (never served)


def _named(flat: np.ndarray, shapes: Sequence[tuple[str, tuple[int, ...]]]) -> dict[str, Any]:
    """A flat (P,) vector split into named parameters, or kept whole as ``flat``."""
    if sum(int(np.prod(s)) for _, s in shapes) != flat.size:
        return {"flat": flat}
    out, offset = {}, 0
    for name, shape in shapes:
        n = int(np.prod(shape))
        out[name] = flat[offset: offset + n].reshape(shape)
        offset += n
    return out


class ServerCapture:
    """Writes ended rounds and brokered queries into the capture directory (one worker
    thread: the round lock is never held while files are written)."""

    def __init__(self, store: Store, cfg: CaptureSettings, *, router: dict[str, Any],
                 encoder: dict[str, Any], members: list[str] | None) -> None:
        self.store, self.cfg = store, cfg
        self._router_cfg = cfg.router if cfg.router is not None else router
        self._encoder_cfg = cfg.encoder if cfg.encoder is not None else encoder
        self._members = members
        # Plain updates of unmasked rounds and who scored what: readable by the server only.
        cfg.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._lock = threading.Lock()  # one writer of the manifest at a time
        self._jobs: queue.Queue[int | None] = queue.Queue()
        self._idle = threading.Condition()
        self._busy = 0
        self._pending = cfg.dir / _PENDING
        self._pending.mkdir(exist_ok=True, mode=0o700)
        self._worker = threading.Thread(target=self._run, name="fedmor-capture", daemon=True)
        self._worker.start()
        for round_id in self._resume():
            self.round_ended(round_id)

    def _marker(self, round_id: int) -> Path:
        return self._pending / f"round-{round_id:06d}"

    def _resume(self) -> list[int]:
        """Rounds marked before a crash (or whose capture failed) that ended, finished or
        failed: to capture now. An open round keeps its marker (it is marked again when it
        ends); one the store lacks loses it."""
        todo = []
        for marker in sorted(self._pending.glob("round-*")):
            round_id = int(marker.name.removeprefix("round-"))
            row = self.store.round_row(round_id)
            status = None if row is None else row.status
            if status in ("finished", "failed"):
                todo.append(round_id)
            elif status != "open":
                marker.unlink(missing_ok=True)
        if todo:
            _log.info("capturing round(s) %s, ended before the last shutdown", todo)
        return todo

    # -- hooks ---------------------------------------------------------------------------------
    def reserve(self, round_id: int) -> None:
        """Mark ``round_id`` durably as to be captured; called before its end is committed,
        so a crash at any point after leaves the marker for :meth:`_resume`."""
        path = self._marker(round_id)
        try:
            # An empty marker, opened without truncating or following a link: a link planted
            # in its place never gets another file written through it.
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            dirfd = os.open(self._pending, os.O_RDONLY)
            try:
                os.fsync(dirfd)  # the new directory entry, too
            finally:
                os.close(dirfd)
        except OSError:  # the round still finishes; only its capture is at risk
            _log.exception("could not mark round %d for capture", round_id)

    def round_ended(self, round_id: int) -> None:
        """Queue an ended (finished or failed) round for capture (called by the round
        manager)."""
        with self._idle:
            self._busy += 1
        self._jobs.put(round_id)

    def reward_query(self, client_id: str, items: Sequence[RewardItem],
                     scores: Sequence[float]) -> None:
        """Log one answered query (the broker's ``on_scored``, passed to it at construction)."""
        if not self.cfg.reward_queries or not items:
            return
        member = self._name(client_id)
        rows = [RewardQuery(image_sha256=i.image_sha256, prompt=i.prompt, response=i.response,
                            score=float(s), member=member)
                for i, s in zip(items, scores, strict=True)]
        try:
            with self._lock:
                write_capture(self.cfg.dir, reward_queries=rows)
        except (OSError, ValueError):  # the member's answer still reaches the aligner
            _log.exception("capture of a reward query from %s failed", member)

    def wait_idle(self, timeout_s: float = 30.0) -> bool:
        """Block until every queued round is written (tests, shutdown)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._busy == 0, timeout_s)

    def close(self) -> None:
        """Finish the queued rounds and stop the worker."""
        self._jobs.put(None)
        self._worker.join(timeout=30)

    def manifest(self) -> CaptureManifest:
        """The current manifest (an empty one before anything was captured)."""
        with self._lock:
            if not (self.cfg.dir / "manifest.json").is_file():
                return CaptureManifest()
            # The server wrote every file itself: no need to hash them all on each listing.
            return CaptureFiles.open(self.cfg.dir, verify=False).manifest

    # -- the worker ----------------------------------------------------------------------------
    def _run(self) -> None:
        while (round_id := self._jobs.get()) is not None:
            try:
                self._capture(round_id)
            except Exception:  # a capture failure must not stop the next rounds' captures
                _log.exception("capture of round %d failed", round_id)
            finally:
                with self._idle:
                    self._busy -= 1
                    self._idle.notify_all()

    def _name(self, client_id: str) -> str:
        row = self.store.client(client_id)
        return client_id if row is None else row.name

    def _layout(self) -> tuple[list[str], str, list[tuple[str, tuple[int, ...]]]]:
        """The router's output names, its encoder id and its parameters' names and shapes."""
        from sdk.router import HashingEncoder, HashingEncoderConfig, Router, RouterConfig

        names = self._members or [m.name for m in self.store.clients("member")]
        encoder_id = HashingEncoder(HashingEncoderConfig.model_validate(
            self._encoder_cfg)).encoder_id
        router = Router(RouterConfig.model_validate(self._router_cfg), names, encoder_id)
        shapes = [(n, tuple(p.shape)) for n, p in router.named_parameters()]
        return names, encoder_id, shapes

    def _vector(self, version: int | None, length: int) -> np.ndarray:
        row = None if version is None else self.store.version(version)
        if row is None:  # a federation's first round: members sent their parameters
            return np.zeros(length, dtype=np.float32)
        return np.frombuffer(row.blob, dtype="<f4").copy()

    def _capture(self, round_id: int) -> None:
        row = self.store.round_row(round_id)
        # Only rounds recorded as captured when they opened: what their members agreed to.
        if row is None or row.status not in ("finished", "failed") or not row.captured:
            self._marker(round_id).unlink(missing_ok=True)
            return
        if round_id in {r.round_id for r in self.manifest().rounds}:  # written before a crash
            self._marker(round_id).unlink(missing_ok=True)
            return
        spec = RoundSpec.model_validate_json(row.spec)
        names, encoder_id, shapes = self._layout()
        members = [self._name(c) for c in spec.participants]
        for m in members:
            if m not in names:
                names.append(m)  # an output the layout lacks: named, never attacked by index
        base_version = spec.base_version
        before = self._vector(base_version, spec.vector_length)
        failed = row.status == "failed"
        plain: dict[str, Any] = {}
        weights: dict[str, float] = dict.fromkeys(members, 1.0)
        messages: list[Any] = []
        kind = ROUND_KINDS[spec.kind]
        terms = kind.terms(spec)
        server = kind.server(terms)  # parses each stored message as the live round did
        for stage in server.stages:
            for client_id, payload in self.store.messages(round_id, stage).items():
                msg = server.parse(stage, client_id, payload)
                if isinstance(msg, FedAvgUpdate):
                    member = self._name(client_id)
                    weights[member] = msg.weight
                    plain[member] = _named(from_delta(msg.vector, None if base_version is None
                                                      else before), shapes)
                else:
                    messages.append(msg)
        secagg = spec.kind != "rm_fedavg"
        meta = CaptureMeta(
            setting="aggregate", router=dict(self._router_cfg), client_ids=names,
            encoder_id=encoder_id, client_indices=[names.index(m) for m in members],
            samples_per_client=[int(max(1, round(weights[m]))) for m in members],
            update="parameters", local_optimizer="unknown to the server (local training)",
            tokens=1,
            description=f"round {round_id} ({spec.kind}) as the server received it"
            + ("; samples per member are masked: 1 stands for unknown" if secagg else ""))
        rc = RoundCapture(
            round_id=round_id, meta=meta, before=_named(before, shapes),
            aggregate=None if failed else _named(
                self._vector(row.router_version, spec.vector_length), shapes),
            plain_updates=plain, router_version=None if failed else row.router_version,
            status="failed" if failed else "finished",
            failure=str(row.error or "unknown") if failed else None, round_kind=spec.kind,
            threshold=terms.privacy.min_survivors if secagg else None,
            secagg_ids={self._name(c): i for c, i in protocol_ids(spec).items()} if secagg
            else {})
        for msg in messages:
            rc.record(msg)  # keeps the masked inputs and unmasking shares
        with self._lock:
            write_capture(self.cfg.dir, rounds=[rc],
                          description="captured by the fedmor consortium server")
            dropped = prune_capture(self.cfg.dir, self.cfg.retention_rounds)
        self._marker(round_id).unlink(missing_ok=True)  # in the manifest now
        _log.info("round %d captured in %s%s", round_id, self.cfg.dir,
                  f" (retention dropped rounds {dropped})" if dropped else "")

