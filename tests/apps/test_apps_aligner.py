"""The aligner role against real processes: ``POST /v1/rewards`` routes each item to the member
the server's router chose, only an aligner may call it, feedback moves the online router once
per step and survives a restart, and a member that hangs gives the failure value."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from PIL import Image
from PIL.PngImagePlugin import PngInfo

from client_app import HashScorer
from fedmor_local import OPEN_POLICY, LocalConsortium
from sdk.alignment import RestRewardFunction, enroll_identity
from sdk.router import image_ref
from sdk.wire import ImageRef, load_private_key, sign_headers
from sdk.wire._auth import authority_of

ROUTER = {"d_model": 16, "num_layers": 1, "num_heads": 2, "dim_feedforward": 32}
FAILURE = -2.5
MAX_ITEMS, CLIP, EMPTY = 8, 3.0, -2.75


def _image(seed: int) -> Image.Image:
    pixels = np.random.default_rng(seed).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


IMAGES = [_image(0), _image(1)]
PROMPTS = [f"what is shown? {i}" for i in range(6)]
RESPONSES = [f"a picture of thing {i}" for i in range(6)]


class Aligner:
    """Signed calls as the enrolled aligner (or anyone else's key and id)."""

    def __init__(self, c: LocalConsortium, key_path: str, sender: str) -> None:
        self.http = httpx.Client(base_url=c.server_url, verify=c.verify, timeout=60)
        self.key, self.sender = load_private_key(Path(key_path)), sender

    @classmethod
    def enroll(cls, c: LocalConsortium, name: str = "trainer") -> Aligner:
        """Enroll ``c``'s identity ``name`` (an aligner) and call as it."""
        cfg = c.identity_cfg[name]
        enrolled = enroll_identity(c.server_url, load_private_key(Path(cfg["identity_key"])),
                                   name=name, token=cfg["enrollment_token"], verify=c.verify)
        assert enrolled.role == "aligner"
        return cls(c, cfg["identity_key"], enrolled.client_id)

    def post(self, path: str, payload: Any) -> httpx.Response:
        body = json.dumps(payload).encode()
        headers = sign_headers(self.key, sender=self.sender, method="POST", path=path,
                               body=body, authority=authority_of(str(self.http.base_url))) | {"content-type": "application/json"}
        return self.http.post(path, content=body, headers=headers)

    def get(self, path: str) -> httpx.Response:
        return self.http.get(path, headers=sign_headers(self.key, sender=self.sender,
                                                        method="GET", path=path, body=b"",
                                                        authority=authority_of(
                                                            str(self.http.base_url))))


@pytest.fixture(scope="module")
def consortium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalConsortium]:
    alignment = {"router": ROUTER, "reveal_judges": True, "failure_reward": FAILURE,
                 "selection_options": {"best_single": {"client": 1}},
                 "max_items": MAX_ITEMS, "clip": CLIP, "empty_reward": EMPTY}
    with LocalConsortium(tmp_path_factory.mktemp("aligner"), 2, demo=True, policy=OPEN_POLICY,
                         identities={"trainer": "aligner"},
                         server={"alignment": alignment, "reward_timeout_s": 3.0}) as c:
        c.start()
        c.wait_enrolled()
        c.publish_router_round(ROUTER)
        yield c


@pytest.fixture(scope="module")
def aligner(consortium: LocalConsortium) -> Aligner:
    return Aligner.enroll(consortium)


def _items(with_bytes: bool) -> tuple[list[dict[str, Any]], list[str]]:
    pngs = [image_ref(IMAGES[i % 2]).data for i in range(6)]
    digests = [hashlib.sha256(p).hexdigest() for p in pngs]
    items = [{"image_sha256": d, "prompt": p, "response": r}
             | ({"image_b64": base64.b64encode(png).decode()} if with_bytes
                else {})
             for d, p, r, png in zip(digests, PROMPTS, RESPONSES, pngs, strict=True)]
    return items, digests


def _audited(c: LocalConsortium, name: str) -> set[str]:
    with sqlite3.connect(c.client_cfg[name]["db_path"]) as db:
        rows = db.execute("SELECT item_hashes FROM query_audit WHERE caller='server'").fetchall()
    return {h for (hashes,) in rows for h in json.loads(hashes)}


def test_rewards_come_from_the_member_the_router_chose(consortium: LocalConsortium,
                                                       aligner: Aligner) -> None:
    items, digests = _items(with_bytes=False)
    first = aligner.post("/v1/rewards", {"items": items, "step": 0})
    assert first.status_code == 200, first.text
    assert first.json()["rewards"] == [] and sorted(first.json()["missing"]) == sorted(
        set(digests))  # the server asks for the bytes once
    items, _ = _items(with_bytes=True)
    resp = aligner.post("/v1/rewards", {"items": items, "step": 0})
    assert resp.status_code == 200, resp.text
    out = resp.json()
    members = dict(zip(consortium.enrolled(), consortium.names, strict=True))
    assert set(out["judges"]) <= set(members) and out["failed"] == 0
    assert out["router_version"] == 1
    reference = HashScorer().score([IMAGES[i % 2] for i in range(6)], PROMPTS, RESPONSES)
    assert out["rewards"] == pytest.approx(reference, abs=1e-6)
    # Each item reached exactly the member the server named: its own audit log shows it.
    for item, judge in zip(items, out["judges"], strict=True):
        key = hashlib.sha256(json.dumps([item["image_sha256"], item["prompt"],
                                         item["response"]]).encode()).hexdigest()
        audited = {name: key in _audited(consortium, name) for name in consortium.names}
        assert audited == {name: name == members[judge] for name in consortium.names}
    # Hashes only, now that the server holds the images.
    again = aligner.post("/v1/rewards", {"items": _items(False)[0], "step": 0})
    assert again.status_code == 200 and len(again.json()["rewards"]) == 6
    # The operator's member listing counts the items each member was asked (its
    # reward_budget's measure): this test's two scored batches, judge by judge.
    asked = {name: 0 for name in consortium.names}
    for judge in [*out["judges"], *again.json()["judges"]]:
        asked[members[judge]] += 1
    listed = {m["name"]: m for m in consortium.admin.get("/v1/members").json()}
    assert {name: listed[name]["reward_items_24h"] for name in consortium.names} == asked


def test_only_the_aligner_may_ask(consortium: LocalConsortium, aligner: Aligner) -> None:
    items, _ = _items(with_bytes=False)
    name = consortium.names[0]
    member = Aligner(consortium, consortium.client_cfg[name]["identity_key"],
                     consortium.enrolled()[0])
    for path, body in (("/v1/rewards", {"items": items}),
                       ("/v1/rewards/feedback", {"step": 1, "loss": 0.5})):
        refused = member.post(path, body)
        assert refused.status_code == 403 and "aligner role" in refused.json()["detail"]
        admin = consortium.admin.post(path, json=body)
        assert admin.status_code == 403 and "admin bearer token" in admin.json()["detail"]
    # ... and the aligner is no member: the member endpoints refuse it.
    assert aligner.get("/v1/work").status_code == 403
    assert consortium.admin.get("/v1/rewards/stats").status_code == 200
    bad = aligner.post("/v1/rewards", {"items": items, "method": "no_such_method"})
    assert bad.status_code == 422 and "no_such_method" in bad.json()["detail"]
    items[0]["image_b64"] = "aGVsbG8="  # bytes that do not hash to image_sha256
    assert aligner.post("/v1/rewards", {"items": items}).status_code == 422


def test_rest_reward_function_resends_images_only_when_asked(consortium: LocalConsortium,
                                                             aligner: Aligner) -> None:
    fn = RestRewardFunction(consortium.server_url, aligner.key, aligner.sender,
                            verify=consortium.verify)
    images = [_image(7)] * 4
    prompts = [[{"role": "user", "content": [{"type": "image"},
                                             {"type": "text", "text": p}]}]
               for p in PROMPTS[:4]]
    rewards = asyncio.run(fn(prompts=prompts, completions=RESPONSES[:4], image=images))
    assert len(rewards) == 4 and fn.requests == 2  # the new image: asked for, then sent
    again = asyncio.run(fn(prompts=prompts, completions=RESPONSES[:4], image=images))
    assert fn.requests == 3 and len(again) == 4


def test_the_batch_is_checked_and_an_empty_completion_asks_no_member(
        consortium: LocalConsortium, aligner: Aligner) -> None:
    items, _ = _items(with_bytes=True)
    over = aligner.post("/v1/rewards", {"items": (items * 2)[:MAX_ITEMS + 1]})
    assert over.status_code == 422 and f"limit of {MAX_ITEMS}" in over.json()["detail"]
    empty = aligner.post("/v1/rewards", {"items": [items[0] | {"response": " "}],
                                         "method": "random"})
    assert empty.status_code == 200 and empty.json()["rewards"] == [EMPTY]
    assert empty.json()["judges"] == [""]


def _member_image(c: LocalConsortium, name: str, digest: str) -> bytes | None:
    with sqlite3.connect(c.client_cfg[name]["db_path"]) as db:
        row = db.execute("SELECT data FROM images WHERE sha256=?", (digest,)).fetchone()
    return None if row is None else bytes(row[0])


def test_the_member_receives_exactly_the_bytes_the_aligner_sent(consortium: LocalConsortium,
                                                                aligner: Aligner) -> None:
    # A PNG with a text chunk: a decode and re-encode anywhere on the way would drop the chunk
    # and change the hash the member stores it under.
    info = PngInfo()
    info.add_text("Comment", "made by the aligner, kept byte for byte")
    buf = io.BytesIO()
    _image(11).save(buf, format="PNG", pnginfo=info, compress_level=1)
    ref = ImageRef.of(buf.getvalue())
    fn = RestRewardFunction(consortium.server_url, aligner.key, aligner.sender,
                            method="best_single", verify=consortium.verify)
    rewards = asyncio.run(fn(prompts=PROMPTS[:2], completions=RESPONSES[:2], image=[ref] * 2))
    assert len(rewards) == 2 and fn.failed == 0
    # best_single asks one member (the fixture's client 1): it holds the image under the
    # aligner's hash, byte for byte.
    held = [_member_image(consortium, name, ref.sha256) for name in consortium.names]
    assert [data for data in held if data is not None] == [ref.data]


def test_the_server_decodes_no_image_for_a_selection_without_a_router(
        consortium: LocalConsortium, aligner: Aligner) -> None:
    # Bytes that are no image: only a decode can tell. Without a router the server passes
    # them on and the member, which decodes, refuses them (the failure value); MoR's encoder
    # decodes them, and the server answers 422.
    junk = ImageRef.of(b"\x89PNG\r\n\x1a\n no pixels follow " + bytes(range(32)))
    items = [{"image_sha256": junk.sha256, "image_b64": junk.b64(), "prompt": "p",
              "response": f"r{i}"} for i in range(2)]
    for method in ("random", "best_single"):
        resp = aligner.post("/v1/rewards", {"items": items, "method": method})
        assert resp.status_code == 200, resp.text
        assert resp.json()["rewards"] == [FAILURE, FAILURE] and resp.json()["failed"] == 2
    resp = aligner.post("/v1/rewards", {"items": items, "method": "mor_no_online"})
    assert resp.status_code == 422 and junk.sha256[:12] in resp.json()["detail"]


def test_feedback_applies_once_per_step_and_survives_a_restart(consortium: LocalConsortium,
                                                               aligner: Aligner) -> None:
    items, _ = _items(with_bytes=False)
    first = aligner.post("/v1/rewards/feedback", {"step": 1, "loss": 0.5, "reward": -0.25,
                                                  "kl": 0.0}).json()
    assert first["applied"] and first["feedback"] is None  # no previous loss yet
    assert aligner.post("/v1/rewards", {"items": items, "step": 1}).status_code == 200
    second = aligner.post("/v1/rewards/feedback", {"step": 2, "loss": 0.4}).json()
    assert second == {"step": 2, "applied": True, "feedback": 1.0, "pairs": 6}
    repeat = aligner.post("/v1/rewards/feedback", {"step": 2, "loss": 0.9}).json()
    assert repeat["applied"] is False  # the other rank's copy of step 2
    before = aligner.get("/v1/rewards/stats").json()
    assert before["step"] == 2 and before["last_loss"] == 0.4 and before["router_updates"] == 1

    consortium.stop("server")
    consortium.start_server()
    after = aligner.get("/v1/rewards/stats").json()
    assert after["online_state_sha256"] == before["online_state_sha256"]
    assert (after["step"], after["last_loss"]) == (2, 0.4)
    assert aligner.post("/v1/rewards/feedback", {"step": 2, "loss": 0.1}).json()["applied"] \
        is False
    third = aligner.post("/v1/rewards/feedback", {"step": 3, "loss": 0.45}).json()
    assert third["applied"] and third["feedback"] == 0.0  # compared with the reloaded loss
    # A later training run counts its steps from 1 again: not a repeat, no previous loss.
    later = aligner.post("/v1/rewards/feedback", {"step": 1, "loss": 0.3, "run": "b"}).json()
    assert later["applied"] and later["feedback"] is None
    # A newly published router (another federated round) starts a fresh online phase on it.
    consortium.publish_router_round(ROUTER)
    out = aligner.post("/v1/rewards", {"items": _items(with_bytes=True)[0], "step": 1}).json()
    assert out["router_version"] == 2  # (the restarted server's image cache started empty)
    fresh = aligner.get("/v1/rewards/stats").json()
    assert fresh["router_version"] == 1  # nothing saved on version 2 before its first feedback
    assert aligner.post("/v1/rewards/feedback", {"step": 2, "loss": 0.3, "run": "b"}).json()[
        "feedback"] is None  # version 2's online phase has no previous loss
    assert aligner.get("/v1/rewards/stats").json()["router_version"] == 2
    # Every applied step, once, with what the trainer logged (the operator console's curve).
    progress = consortium.admin.get("/v1/rewards/progress").json()
    assert [(p["run"], p["step"], p["loss"], p["feedback"]) for p in progress][:3] == [
        ("", 1, 0.5, None), ("", 2, 0.4, 1.0), ("", 3, 0.45, 0.0)]
    assert (progress[0]["reward"], progress[0]["kl"]) == (-0.25, 0.0)
    assert progress[1]["reward"] is None  # not logged: not invented
    assert [(p["run"], p["step"]) for p in progress[3:]] == [("b", 1), ("b", 2)]


def test_a_member_that_hangs_gives_the_failure_value(consortium: LocalConsortium,
                                                    aligner: Aligner) -> None:
    items, _ = _items(with_bytes=True)
    # best_single asks one member for everything: both hang, whichever it is.
    pids = [consortium.procs[name].pid for name in consortium.names]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        start = time.monotonic()
        resp = aligner.post("/v1/rewards", {"items": items, "method": "best_single"})
        took = time.monotonic() - start
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert out["rewards"] == [FAILURE] * 6 and out["failed"] == 6 and out["judges"] == [""] * 6
    assert took < 30  # the broker's timeout (3 s here), not a hung request
    assert aligner.get("/v1/rewards/stats").json()["failed"] >= 6
