"""Finding 3: a member SIGKILLed mid-round and restarted after the round ended deletes that
round's secrets (X25519 keys, self-mask seed, shares held for others) from ``client.db``."""

from __future__ import annotations

import time

from fedmor_local import LocalConsortium
from tests.security.conftest import PUSH2, client_db


def _secrets(c: LocalConsortium, round_id: int) -> list[object]:
    return client_db(c, PUSH2, "SELECT round_id FROM round_state WHERE round_id=? UNION "
                     "SELECT round_id FROM sent WHERE round_id=?", (round_id, round_id))


def test_secrets_of_a_round_that_ended_while_down_are_deleted_after_restart(
        hostile: LocalConsortium) -> None:
    # The members' (demo) update takes 3 s: each waits at the masked-input stage with its round
    # keys stored, and that is when one of them is killed.
    rid = hostile.create_round(kind="router_secagg", vector_length=8, min_clients=2,
                               stage_deadline_s=4, params={"threshold": 2,
                                                           "demo_train_s": 3})["round_id"]
    deadline = time.monotonic() + 30
    while not _secrets(hostile, rid):
        assert time.monotonic() < deadline, "the member stored no round state"
        time.sleep(0.05)
    hostile.kill(PUSH2)
    assert hostile.wait_round(rid)["status"] in ("finished", "failed")
    assert _secrets(hostile, rid)  # still there: nobody told the dead member
    hostile.start_client(PUSH2)
    deadline = time.monotonic() + 30
    while _secrets(hostile, rid):
        assert time.monotonic() < deadline, "the restarted member kept the round's secrets"
        time.sleep(0.1)
    status = client_db(hostile, PUSH2, "SELECT status, detail FROM rounds WHERE round_id=?",
                       (rid,))
    assert status and status[0][0] == "ended", status
