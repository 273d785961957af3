"""A member swaps its scorer for one with a wider clip bound: at its restart the client app
re-announces the bound (signed), and the server accepts the new scores from then on, also
after its own restart. Only the caller's own bound changes, never above the consortium's
maximum, and never unsigned."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fedmor_local import OPEN_POLICY, LocalConsortium
from sdk.wire import load_private_key, sign_headers
from sdk.wire._auth import authority_of

from ._wide_scorer import SCORE
from .test_apps_aligner import Aligner, _items

FAILURE = -2.75
MAX_BOUND = 5.0
PATH = "/v1/identity/clip-bound"


def _bound(c: LocalConsortium, name: str) -> float | None:
    with sqlite3.connect(c.server_cfg["db_path"]) as db:
        (bound,) = db.execute("SELECT clip_bound FROM clients WHERE name=?", (name,)).fetchone()
    return None if bound is None else float(bound)


def _wait_bound(c: LocalConsortium, name: str, expected: float, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while _bound(c, name) != expected:
        assert time.monotonic() < deadline, f"{name}'s bound stayed {_bound(c, name)}"
        time.sleep(0.1)


def _signed_post(c: LocalConsortium, key_path: str, sender: str, payload: Any) -> httpx.Response:
    body = json.dumps(payload).encode()
    headers = sign_headers(load_private_key(Path(key_path)), sender=sender, method="POST",
                           path=PATH, body=body, authority=authority_of(c.server_url))
    return httpx.post(c.server_url + PATH, content=body, verify=c.verify, timeout=30,
                      headers=headers | {"content-type": "application/json"})


@pytest.fixture(scope="module")
def consortium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalConsortium]:
    alignment = {"members": ["site-0", "site-1"], "failure_reward": FAILURE}
    with LocalConsortium(tmp_path_factory.mktemp("reannounce"), 2, policy=OPEN_POLICY,
                         identities={"trainer": "aligner"},
                         server={"alignment": alignment, "reward_timeout_s": 10.0,
                                 "max_clip_bound": MAX_BOUND},
                         # the c = 3 model, with the bound pinned to the old model's c = 1
                         clients={"scorer": "tests.apps._wide_scorer:WideScorer", "clip": 1.0,
                                  "run_rounds": False}) as c:
        c.start()
        c.wait_enrolled()
        yield c


@pytest.fixture(scope="module")
def aligner(consortium: LocalConsortium) -> Aligner:
    return Aligner.enroll(consortium)


def _site0_rewards(aligner: Aligner) -> dict[str, Any]:
    resp = aligner.post("/v1/rewards", {"items": _items(with_bytes=True)[0],
                                        "method": "best_single"})
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def test_a_member_that_widens_its_bound_is_heard_after_its_restart(
        consortium: LocalConsortium, aligner: Aligner) -> None:
    c = consortium
    assert _bound(c, "site-0") == 1.0
    before = _site0_rewards(aligner)
    # 2.5 is outside the bound it announced: every item fails, none is clipped to 1.
    assert before["failed"] == 6 and set(before["rewards"]) == {FAILURE}

    c.stop("site-0")
    c.start_client("site-0", clip=None)  # its own bound now: the model's c = 3
    _wait_bound(c, "site-0", 3.0)
    after = _site0_rewards(aligner)
    assert after["failed"] == 0 and set(after["rewards"]) == {SCORE}, after
    log = (c.dir / "site-0.log").read_text()
    assert "announced clip bound 3 to the server (it held 1)" in log
    with sqlite3.connect(c.server_cfg["db_path"]) as db:
        audited = [json.loads(d) for (d,) in db.execute(
            "SELECT detail FROM audit WHERE action='clip_bound'")]
    assert audited == [{"clip_bound": 3.0, "previous": 1.0}]

    c.stop("server")  # the bound lives in the server's store, not in its memory
    c.start_server()
    assert _site0_rewards(aligner)["rewards"] == after["rewards"]

    # The server restored from a backup that predates the change: the member's next start
    # announces its bound again.
    c.stop("server")
    c.stop("site-0")
    with sqlite3.connect(c.server_cfg["db_path"]) as db:
        db.execute("UPDATE clients SET clip_bound=1.0 WHERE name='site-0'")
    c.start_server()
    c.start_client("site-0", clip=None)
    _wait_bound(c, "site-0", 3.0)
    assert _site0_rewards(aligner)["failed"] == 0
    c.stop("site-0")  # unchanged: the server writes nothing, the member logs nothing
    c.start_client("site-0", clip=None)
    assert _site0_rewards(aligner)["failed"] == 0
    assert (c.dir / "site-0.log").read_text().count("announced clip bound") == 2
    with sqlite3.connect(c.server_cfg["db_path"]) as db:
        assert db.execute("SELECT count(*) FROM audit WHERE action='clip_bound'").fetchone()[0] == 2


def test_an_announcement_changes_only_the_callers_own_bound(
        consortium: LocalConsortium, aligner: Aligner) -> None:
    c = consortium
    site0, site1 = c.enrolled()
    site0_bound = _bound(c, "site-0")
    key1 = c.client_cfg["site-1"]["identity_key"]
    resp = _signed_post(c, key1, site1, {"clip_bound": 2.0})
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"client_id": site1, "clip_bound": 2.0, "previous": 1.0}
    assert _bound(c, "site-1") == 2.0 and _bound(c, "site-0") == site0_bound
    # site-1's key, site-0's id: a bad signature, and nothing changes
    assert _signed_post(c, key1, site0, {"clip_bound": 4.0}).status_code in (401, 403)
    assert _bound(c, "site-0") == site0_bound
    # A request names no one else: an id in the body is refused as unknown.
    foreign = _signed_post(c, key1, site1, {"clip_bound": 4.0, "client_id": site0})
    assert foreign.status_code == 422 and _bound(c, "site-0") == site0_bound
    # The aligner is no member: it has no bound to announce.
    assert aligner.post(PATH, {"clip_bound": 4.0}).status_code == 403
    unsigned = httpx.post(c.server_url + PATH, json={"clip_bound": 4.0}, verify=c.verify)
    assert unsigned.status_code in (401, 403), unsigned.text


def test_a_bound_above_the_consortium_maximum_is_refused(consortium: LocalConsortium) -> None:
    c = consortium
    site1 = c.enrolled()[1]
    before = _bound(c, "site-1")
    key1 = c.client_cfg["site-1"]["identity_key"]
    for bad in (MAX_BOUND + 0.5, 1e6):
        resp = _signed_post(c, key1, site1, {"clip_bound": bad})
        assert resp.status_code == 422, resp.text
        assert f"above this consortium's maximum {MAX_BOUND:g}" in resp.json()["detail"]
    assert _signed_post(c, key1, site1, {"clip_bound": 0}).status_code == 422
    assert _bound(c, "site-1") == before
