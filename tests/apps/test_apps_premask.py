"""Masking ahead of the request (``SecAggClient.prepare_masked_input``, run by the client app in
a background thread) sends the very bytes masking on request would, dropouts included; and the
stores' write-ahead logs are checkpointed in the background, not inside a commit."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np

from client_app._store import ClientStore
from sdk.secagg import SecAggClient, SecAggConfig, SecAggServer, Stage
from sdk.secagg._crypto import Roster, generate_identities
from sdk.secagg._schema import MaskedInput
from server_app._store import Store

N, LENGTH, DROPPED = 5, 4_000, 4  # client 4 advertises keys, then never shares


def _clients_at_masking() -> tuple[dict, dict, SecAggServer, dict, Roster, np.ndarray]:
    """Clients 0..N-1 and the server after the share-keys stage closed without DROPPED.
    Returns (clients, their masked-input requests, server, identity keys, roster, updates)."""
    ids = list(range(N))
    keys, roster = generate_identities(ids)
    updates = np.random.default_rng(1).uniform(-0.5, 0.5, (N, LENGTH))
    clients = {c: SecAggClient(c, keys[c], roster, updates[c], c + 1,
                               rng=np.random.default_rng(100 + c)) for c in ids}
    server = SecAggServer(SecAggConfig().round_params(ids, LENGTH, round_id="premask"), roster)
    outbox = server.start()
    for c, msg in outbox.items():  # advertise keys: everyone
        server.receive(clients[c].receive(msg))
    outbox = server.close_stage()
    for c, msg in outbox.items():  # share keys: all but DROPPED
        if c != DROPPED:
            server.receive(clients[c].receive(msg))
    return clients, server.close_stage(), server, keys, roster, updates


def test_prepared_masked_input_is_identical_and_undoes_dropped_neighbours() -> None:
    clients, requests, server, keys, roster, updates = _clients_at_masking()
    client = clients[0]
    assert DROPPED in {k.sender for k in client.export_state().keys}  # it masked with 4 first
    # A twin of client 0 at the same point, with the same (untouched) rng: it masks on request.
    twin = SecAggClient.restore(client.export_state(), keys[0], roster, updates[0], 1,
                                rng=np.random.default_rng(100))
    client.prepare_masked_input()
    prepared = client.receive(requests[0])
    on_request = twin.receive(requests[0])
    assert isinstance(prepared, MaskedInput) and isinstance(on_request, MaskedInput)
    assert prepared.to_bytes() == on_request.to_bytes()

    # Every survivor prepared ahead: the round still decodes to the weighted mean.
    server.receive(prepared)
    for c in range(1, N):
        if c != DROPPED:
            clients[c].prepare_masked_input()
            server.receive(clients[c].receive(requests[c]))
    outbox = server.close_stage()
    while server.result is None:
        for c, msg in outbox.items():
            server.receive(clients[c].receive(msg))
        outbox = server.close_stage()
    live = [c for c in range(N) if c != DROPPED]
    weights = np.array([c + 1 for c in live], dtype=np.float64)
    expected = (weights[:, None] * updates[live]).sum(0) / weights.sum()
    assert server.result.survivors == live
    # Each survivor's weighted update is rounded to one step of the fixed-point encoding
    # (max_weight / 2**scale_bits): the mean is off by at most that sum over the weights.
    q = server.params.quantization
    step = q.max_weight / q.scale
    np.testing.assert_allclose(server.result.mean, expected, rtol=0,
                               atol=len(live) * step / weights.sum())


def test_prepare_is_a_no_op_before_the_round_parameters_arrive() -> None:
    keys, roster = generate_identities([0, 1])
    client = SecAggClient(0, keys[0], roster, np.zeros(8), 1)
    client.prepare_masked_input()  # nothing known yet: must not raise or change the stage
    assert client.stage is Stage.ADVERTISE_KEYS


def _wal_frames(path: Path) -> int:
    """Frames in the log not yet copied into the database file (a no-op checkpoint's report)."""
    with sqlite3.connect(path) as db:
        _, log, copied = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return int(log - copied)


def test_server_store_commits_leave_the_checkpoint_to_the_background(tmp_path: Path) -> None:
    store = Store(tmp_path / "server.db")
    # SQLite's own checkpoint would run inside a commit (under the store lock) once the log
    # passes its threshold (1000 pages = 64 MB here): it must be off.
    assert tuple(store._db.execute("PRAGMA wal_autocheckpoint").fetchone()) == (0,)
    store.checkpoints.every_commits = 10**9  # only explicit requests
    empty = (tmp_path / "server.db").stat().st_size
    store.add_version(None, bytes(2_000_000), 500_000)
    # Committed to the log only: no checkpoint ran inside the commit.
    assert (tmp_path / "server.db").stat().st_size - empty < 1_000_000
    store.checkpoint_soon()
    assert store.checkpoints.wait_idle(30)
    assert store.checkpoints.done >= 1
    assert (tmp_path / "server.db").stat().st_size - empty >= 2_000_000  # now in the file
    latest = store.version()
    assert latest is not None and len(latest.blob) == 2_000_000
    store.close()


def test_client_store_checkpoints_when_a_round_is_forgotten(tmp_path: Path) -> None:
    store = ClientStore(tmp_path / "client.db")
    assert tuple(store._db.execute("PRAGMA wal_autocheckpoint").fetchone()) == (0,)
    empty = (tmp_path / "client.db").stat().st_size
    store.put_sent(7, "masked_input_collection", bytes(3_000_000), {"stage": "x"})
    assert (tmp_path / "client.db").stat().st_size - empty < 1_000_000  # in the log only
    store.forget_round(7)  # the round is over: its megabytes and secrets leave the log now
    # scrubbed before forget_round returns: the log is copied into the file and truncated
    assert (tmp_path / "client.db-wal").stat().st_size == 0
    assert store.sent(7) == {} and store.round_state(7) is None
    store.close()
    assert _wal_frames(tmp_path / "client.db") == 0

