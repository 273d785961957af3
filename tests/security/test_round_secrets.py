"""Finding 2 (second review): once a secure round is over for a member, no copy of its round
secrets (X25519 keys, self-mask seed, shares held for others, share keys) is left in any file of
its database folder (database, write-ahead log, shared memory, journals), whether the round
finished, failed, or ended while the member was killed and it was restarted after."""

from __future__ import annotations

import base64
import json
import signal
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from client_app._demo import demo_params
from fedmor_local import LocalConsortium
from tests.security.conftest import PULL, PUSH, PUSH2, client_db, client_id

_SECRET_FIELDS = ("enc_sk", "mask_sk", "seed")


def _secrets_in(state: dict[str, Any]) -> set[bytes]:
    """The raw bytes of every secret in a ``round_state`` row (urlsafe base64 in JSON)."""
    texts = [state[f] for f in _SECRET_FIELDS]
    texts += [share for pair in state.get("held", {}).values() for share in pair]
    texts += list(state.get("share_keys", {}).values())
    return {base64.urlsafe_b64decode(t) for t in texts}


def _encodings(secret: bytes) -> list[bytes]:
    """Every spelling of ``secret`` a file could hold it in."""
    b64 = base64.b64encode(secret).rstrip(b"=")
    url = base64.urlsafe_b64encode(secret).rstrip(b"=")
    return [secret, b64, url, secret.hex().encode(), secret.hex().upper().encode(),
            json.dumps(url.decode()).encode()]


class _Collector:
    """Every round secret a member's ``round_state`` row held at any moment we looked."""

    def __init__(self, c: LocalConsortium, round_id: int) -> None:
        self.c, self.round_id = c, round_id
        self.secrets: dict[str, set[bytes]] = {n: set() for n in c.names}

    def look(self, names: list[str]) -> None:
        for name in names:
            try:
                rows = client_db(self.c, name, "SELECT state FROM round_state WHERE round_id=?",
                                 (self.round_id,))
            except sqlite3.OperationalError:  # the member is writing: look again next time
                continue
            for (state,) in rows:
                self.secrets[name] |= _secrets_in(json.loads(state))

    def watch(self, names: list[str]) -> str:
        """Look at ``names`` until the round ends; returns its status."""
        def ended() -> bool:
            self.look(names)
            return bool(self.c.round(self.round_id)["status"] != "open")
        _until(ended, lambda: f"round {self.round_id} still open", timeout_s=120)
        return str(self.c.round(self.round_id)["status"])


def _leaks(c: LocalConsortium, name: str, secrets: set[bytes]) -> list[str]:
    """The files of ``name``'s database folder holding a secret, in any encoding."""
    folder = Path(c.client_cfg[name]["db_path"]).parent
    found = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if any(e in data for s in secrets for e in _encodings(s)):
            found.append(path.name)
    return found


def _until(condition: Callable[[], bool], what: Callable[[], str],
           timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s  # a guard against a hang, not a timing check
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(what())
        time.sleep(0.05)


def _round_over(c: LocalConsortium, name: str, round_id: int) -> bool:
    """The member recorded the round's end and dropped its rows."""
    status = client_db(c, name, "SELECT status FROM rounds WHERE round_id=?", (round_id,))
    kept = client_db(c, name, "SELECT 1 FROM round_state WHERE round_id=? UNION "
                     "SELECT 1 FROM sent WHERE round_id=?", (round_id, round_id))
    return bool(status) and status[0][0] != "running" and not kept


def _no_copy_left(c: LocalConsortium, name: str, round_id: int, secrets: set[bytes]) -> None:
    assert secrets, f"{name} stored no round secrets to look for"
    _until(lambda: _round_over(c, name, round_id), lambda: f"{name} kept round {round_id}'s rows")
    _until(lambda: not _leaks(c, name, secrets),
           lambda: f"{name}'s folder still holds round secrets: {_leaks(c, name, secrets)}")


def test_no_copy_of_a_finished_rounds_secrets_is_left(hostile: LocalConsortium) -> None:
    rid = hostile.create_round(kind="router_secagg", vector_length=8, min_clients=3,
                               params={"threshold": 3, **demo_params(train_s=1)})["round_id"]
    seen = _Collector(hostile, rid)
    assert seen.watch(hostile.names) == "finished"
    for name in hostile.names:
        _no_copy_left(hostile, name, rid, seen.secrets[name])


def test_no_copy_is_left_after_a_failed_round_and_a_crash(hostile: LocalConsortium) -> None:
    # The round is held at its first stage by a real hang: site-1 is stopped (SIGSTOP) before
    # the round opens, so it never advertises keys, and the stage deadline is far off. The
    # round can then only end when the operator cancels it, whatever the machine's load:
    # site-2 is killed once its round secrets are on disk, then the round is cancelled.
    participants = [client_id(hostile, name) for name in hostile.names]
    hostile.procs[PULL].send_signal(signal.SIGSTOP)
    try:
        rid = hostile.create_round(kind="router_secagg", vector_length=8, min_clients=3,
                                   participants=participants, stage_deadline_s=3600,
                                   params={"threshold": 3})["round_id"]
        seen = _Collector(hostile, rid)
        _until(lambda: (seen.look([PUSH, PUSH2]), bool(seen.secrets[PUSH2]))[1],
               lambda: "site-2 stored no round state", timeout_s=120)
        hostile.kill(PUSH2)
        assert hostile.round(rid)["status"] == "open"  # held: nothing could end it yet
        cancelled = hostile.admin.post(f"/v1/rounds/{rid}/cancel",
                                       json={"reason": "site-2 died"})
        assert cancelled.status_code == 200, cancelled.text
        assert seen.watch([PUSH]) == "failed"
    finally:
        hostile.procs[PULL].send_signal(signal.SIGCONT)
    _no_copy_left(hostile, PUSH, rid, seen.secrets[PUSH])  # the round failed while it ran
    assert _leaks(hostile, PUSH2, seen.secrets[PUSH2])  # nobody told the dead member
    hostile.start_client(PUSH2)  # it learns the round ended and forgets it
    _no_copy_left(hostile, PUSH2, rid, seen.secrets[PUSH2])
    status = client_db(hostile, PUSH2, "SELECT status, detail FROM rounds WHERE round_id=?",
                       (rid,))
    assert status and status[0][0] == "ended", status
