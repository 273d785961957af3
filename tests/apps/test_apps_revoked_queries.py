"""A member revoked while its pull-mode reward queries wait in the server's queue: the queries
are withdrawn at once, and the aligner's step gets the failure value for those items (counted)
instead of sitting out the reward timeout."""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from fedmor_local import OPEN_POLICY, LocalConsortium
from fedmor_local._local import wait_healthy
from sdk.router import HashingEncoder, HashingEncoderConfig, Router, RouterConfig

from .test_apps_aligner import FAILURE, ROUTER, Aligner, _items

TIMEOUT_S = 60.0  # the broker's reward timeout: the step must end far sooner


def _pending(c: LocalConsortium) -> list[str]:
    with sqlite3.connect(c.server_cfg["db_path"]) as db:
        return [str(r[0]) for r in db.execute(
            "SELECT client_id FROM reward_queries WHERE status='pending'")]


def test_revoking_a_member_fails_its_queued_queries_at_once(tmp_path: Path) -> None:
    alignment = {"router": ROUTER, "reveal_judges": True, "failure_reward": FAILURE}
    with LocalConsortium(tmp_path, 2, demo=True, policy=OPEN_POLICY,
                         identities={"trainer": "aligner"},
                         server={"alignment": alignment, "reward_timeout_s": TIMEOUT_S}) as c:
        urls = {}
        for name in c.names:  # pull mode: no public URL, the members fetch their queries
            urls[name] = c.client_cfg[name]["public_url"]
            c.client_cfg[name]["public_url"] = None
        c.start_server()
        for name in c.names:
            c.start_client(name, wait=False)
        for name in c.names:
            wait_healthy(urls[name], verify=c.verify, proc=c.procs[name])
        ids = dict(zip(c.wait_enrolled(), c.names, strict=True))
        length = Router(RouterConfig(**ROUTER), ["a", "b"],
                        HashingEncoder(HashingEncoderConfig()).encoder_id).num_params()
        c.run_round(kind="router_secagg", vector_length=length, min_clients=2,
                    params={"clip_range": 8.0})
        aligner = Aligner.enroll(c)

        # best_single asks one member for every item; both are stopped, so its query waits.
        pids = [c.procs[name].pid for name in c.names]
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        out: dict[str, Any] = {}

        def step() -> None:
            start = time.monotonic()
            out["resp"] = aligner.post("/v1/rewards", {"items": _items(with_bytes=True)[0],
                                                       "method": "best_single"})
            out["took"] = time.monotonic() - start

        try:
            worker = threading.Thread(target=step)
            worker.start()
            deadline = time.monotonic() + 30
            while not (waiting := _pending(c)):
                assert time.monotonic() < deadline and worker.is_alive(), out
                time.sleep(0.1)
            revoked = c.admin.post(f"/v1/members/{ids[waiting[0]]}/revoke",
                                   json={"reason": "left while queried"})
            assert revoked.status_code == 200, revoked.text
            worker.join(timeout=TIMEOUT_S + 30)
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        assert "resp" in out, "the step never returned: it waited for the revoked member"
        resp: httpx.Response = out["resp"]
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert body["rewards"] == [FAILURE] * 6 and body["failed"] == 6
        assert out["took"] < TIMEOUT_S / 2, out["took"]
        assert _pending(c) == []
        assert aligner.get("/v1/rewards/stats").json()["failed"] >= 6
