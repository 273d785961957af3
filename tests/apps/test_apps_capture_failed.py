"""A captured round that fails is captured too: what the server received before it failed, no
router, the reason. The round manager and the capture writer run for real on a SQLite store; a
member tampers its masked input so the aggregate is out of range (deterministic failure)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from attacks import audit_capture_dir
from client_app._round_walk import ready_update
from sdk.capture import CaptureFiles
from sdk.secagg._schema import MaskedInput
from server_app import Store
from server_app._capture import ServerCapture
from server_app._settings._audit import CaptureSettings
from tests.apps.conftest import in_process_secure_round


def _capture(store: Store, folder: Path) -> ServerCapture:
    return ServerCapture(store, CaptureSettings(enabled=True, dir=folder), router={},
                         encoder={}, members=None)


def test_a_failed_captured_round_keeps_what_was_received(tmp_path: Path) -> None:
    captures: list[ServerCapture] = []

    def attach(store: Store) -> ServerCapture:
        captures.append(_capture(store, tmp_path / "capture"))
        return captures[0]

    rounds, store, rid, halves = in_process_secure_round(
        tmp_path, 4, lambda _: ready_update(np.full(4, 0.25, dtype=np.float32), 1),
        capture=attach)
    (capture,) = captures
    assert rounds.info(rid).captured is True
    attacker = next(iter(halves))
    sent: dict[str, bytes] = {}
    for stage in rounds.info(rid).stages:
        for client, half in halves.items():
            payload = half.message(stage, rounds.broadcast(rid, stage, client).payload or {})
            if isinstance(payload, bytes):
                if client == attacker:  # shift element 0 far, masks intact
                    msg = MaskedInput.from_bytes(payload)
                    words = msg.vector().copy()
                    words[0] = (int(words[0]) + 2**30) % 2**32
                    payload = msg.model_copy(update={"masked": words.tobytes()}).to_bytes()
                sent[client] = MaskedInput.from_bytes(payload).masked
            rounds.submit(rid, stage, client, payload)
    info = rounds.info(rid)
    assert info.status == "failed" and "outside [-2, 2]" in (info.error or "")
    assert capture.wait_idle()
    assert not (tmp_path / "capture" / ".pending" / f"round-{rid:06d}").exists()

    cap = CaptureFiles.open(tmp_path / "capture")
    (rnd,) = cap.manifest.rounds
    assert rnd.round_id == rid and rnd.status == "failed" and rnd.failure == info.error
    assert rnd.router_version is None
    assert not any(a.kind == "aggregate" for a in rnd.artefacts)
    assert not (tmp_path / "capture" / f"round-{rid:06d}" / "aggregate.safetensors").exists()
    names = {f"c-m{i}": f"m{i}" for i in range(3)}
    # Exactly the bytes received, the tampered input included; unmasking ran before the sum.
    received = {a.member: cap.masked(a).tobytes() for a in rnd.artefacts
                if a.kind == "masked_input"}
    assert received == {names[c]: b for c, b in sent.items()} and len(received) == 3
    assert sorted(a.member for a in rnd.artefacts if a.kind == "unmasking_shares") == \
        sorted(names.values())

    report = audit_capture_dir(tmp_path / "capture", tmp_path / "audit")
    (note,) = [n for n in report.notes if n.startswith(f"Round {rid} ")]
    assert f"failed: {info.error}" in note and "no aggregate is attacked" in note
    masked = [c for c in report.checks if c.artefact == "masked input (secure aggregation)"]
    assert len(masked) == 3 and all(c.setting.startswith(f"round {rid} (failed)") for c in masked)
    assert any(c.artefact == "unmasking shares (secure aggregation)" for c in report.checks)
    assert not report.reconstructions  # no aggregate, no plain update: nothing to invert

    # A crash after the failure was committed leaves the marker: a restart captures the round.
    capture.close()
    again = tmp_path / "again"
    (again / ".pending").mkdir(parents=True)
    (again / ".pending" / f"round-{rid:06d}").touch()
    resumed = _capture(store, again)
    try:
        assert resumed.wait_idle()
        (rnd2,) = CaptureFiles.open(again).manifest.rounds
        assert rnd2.status == "failed" and rnd2.failure == info.error
        assert not (again / ".pending" / f"round-{rid:06d}").exists()
    finally:
        resumed.close()
        store.close()


def test_a_link_in_place_of_a_capture_marker_is_not_written_through(tmp_path: Path) -> None:
    capture = _capture(Store(tmp_path / "s.db"), tmp_path / "capture")
    elsewhere = tmp_path / "server-notes.txt"
    elsewhere.write_text("kept")
    marker = tmp_path / "capture" / ".pending" / "round-000007"
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.symlink_to(elsewhere)
    capture.reserve(7)
    assert elsewhere.read_text() == "kept"
    capture.reserve(8)  # a marker where none was: made as before
    assert (marker.parent / "round-000008").is_file()
