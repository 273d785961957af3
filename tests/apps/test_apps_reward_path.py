"""Aligner batches above a member's item cap (``RewardRequest.MAX_ITEMS``): the broker splits
each member's share at the cap and puts the answers back in order, so ``POST /v1/rewards`` of
300 and 1024 items answers every item with the member's real score, in push and pull mode. A
score outside a bound (the member's announced one, the server's ``alignment.clip``) fails its
item, counted; nothing clips it on the way. The aligner's reward function stops when more than
its ``max_failed_fraction`` of a step's completions failed.

The server and two member apps (``site-0`` pushed to at its URL, ``site-1`` pulling its
queries) run in this process, each served by uvicorn on 127.0.0.1: the broker's requests and
the member's fetches and answers cross real HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import io
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from client_app import ClientSettings, HashScorer
from client_app._app import create_client_app
from fedmor_local import OPEN_POLICY, LocalConsortium
from sdk.alignment import RestRewardFunction
from sdk.alignment._errors import DEFAULT_MAX_FAILED_FRACTION
from sdk.alignment._rest_rewards import RestRewardError
from sdk.serving import RateLimited
from sdk.wire import AlignerRequest, ImageRef, RewardRequest, generate_key
from server_app import RewardBroker, ServerSettings, Store
from server_app._app import create_app
from server_app._rewards._service import AlignmentService
from server_app._settings import AlignmentSettings
from tests._images import png
from tests._serve import served

from ._wide_scorer import WideScorer
from .test_apps_aligner import Aligner

IMAGES = [ImageRef.of(png(16, seed)) for seed in range(3)]


@contextlib.contextmanager
def in_process(workdir: Path, *, alignment: dict[str, Any], scorers: dict[str, Any],
               clips: dict[str, float] | None = None
               ) -> Iterator[tuple[LocalConsortium, Aligner]]:
    """A local consortium's server and members (``site-0`` push, ``site-1`` pull) served in
    this process, each member with its scorer of ``scorers`` (and the bound it announces in
    ``clips``, else its scorer's), every member enrolled; and the enrolled aligner
    ``trainer``."""
    c = LocalConsortium(workdir, len(scorers), identities={"trainer": "aligner"},
                        server={"alignment": alignment, "reward_timeout_s": 60.0})
    with contextlib.ExitStack() as stack:
        stack.callback(c.close)
        stack.enter_context(served(create_app(ServerSettings(**c.server_cfg)), c.server_port))
        for i, name in enumerate(c.names):
            cfg = c.client_cfg[name] | {"policy": OPEN_POLICY, "run_rounds": False}
            if i % 2:  # pull mode: no URL the server could push to
                cfg["public_url"] = None
            if name in (clips or {}):
                cfg["clip"] = (clips or {})[name]
            app = create_client_app(ClientSettings(**cfg), scorers[name], start_runner=True)
            stack.enter_context(served(app, cfg["port"]))
        c.wait_enrolled()
        yield c, Aligner.enroll(c)


def batch(n: int) -> list[dict[str, Any]]:
    """``n`` items over the three images, each image's bytes with its first item only."""
    out = []
    for i in range(n):
        ref = IMAGES[i % len(IMAGES)]
        item = {"image_sha256": ref.sha256, "prompt": f"what is shown? {i}",
                "response": f"a picture of thing {i}"}
        if i < len(IMAGES):
            item["image_b64"] = ref.b64()
        out.append(item)
    return out


def _expected(items: list[dict[str, Any]]) -> list[float]:
    by_hash = {ref.sha256: Image.open(io.BytesIO(ref.data)).convert("RGB") for ref in IMAGES}
    return HashScorer().score([by_hash[i["image_sha256"]] for i in items],
                              [i["prompt"] for i in items], [i["response"] for i in items])


@pytest.fixture(scope="module")
def consortium(tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[tuple[LocalConsortium, Aligner]]:
    # avg_rm asks every member about every item: each member's share is the whole batch.
    with in_process(tmp_path_factory.mktemp("batches"),
                    alignment={"max_items": AlignerRequest.MAX_ITEMS, "reveal_judges": True},
                    scorers={"site-0": HashScorer(), "site-1": HashScorer()}) as found:
        yield found


@pytest.mark.parametrize("n", [300, AlignerRequest.MAX_ITEMS])
def test_a_batch_above_the_members_cap_gets_every_real_score(
        consortium: tuple[LocalConsortium, Aligner], n: int) -> None:
    assert n > RewardRequest.MAX_ITEMS  # the batch does not fit one member request
    _, aligner = consortium
    items = batch(n)
    resp = aligner.post("/v1/rewards", {"items": items, "method": "avg_rm"})
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert out["failed"] == 0
    # Both members score with the same hash scorer: their average is each one's score.
    assert out["rewards"] == pytest.approx(_expected(items))
    stats = aligner.get("/v1/rewards/stats").json()
    assert stats["failed"] == 0


def test_a_score_outside_a_bound_fails_its_item_never_clipped(tmp_path: Path) -> None:
    # Both members score 2.5 with a scorer whose own bound is 3. site-0 announces 3: the
    # broker takes its scores, the server's alignment.clip of 2 refuses them. site-1
    # announces 1: its answers are refused where they arrive (the pull answer route).
    failure = -2.0
    with in_process(tmp_path, alignment={"clip": 2.0, "failure_reward": failure,
                                         "empty_reward": failure,
                                         "reveal_judges": True,
                                         "selection_options": {"random": {"seed": 0}}},
                    scorers={"site-0": WideScorer(), "site-1": WideScorer()},
                    clips={"site-1": 1.0}) as (_, aligner):
        resp = aligner.post("/v1/rewards", {"items": batch(16), "method": "random"})
        assert resp.status_code == 200, resp.text
        out = resp.json()
        assert out["rewards"] == [failure] * 16 and out["failed"] == 16
        assert out["judges"] == [""] * 16
        assert aligner.get("/v1/rewards/stats").json()["failed"] == 16


def test_the_aligner_stops_when_too_many_of_a_steps_items_fail(tmp_path: Path) -> None:
    # The member announces 1 and scores 2.5: each of its answers is refused, each item fails.
    with in_process(tmp_path, alignment={}, scorers={"site-0": WideScorer()},
                    clips={"site-0": 1.0}) as (c, aligner):
        def rewards(fraction: float) -> list[float]:
            fn = RestRewardFunction(c.server_url, aligner.key, aligner.sender, method="random",
                                    verify=False, max_failed_fraction=fraction)
            return asyncio.run(fn(prompts=["p0", "p1"], completions=["r0", "r1"],
                                  image=[IMAGES[0]] * 2))

        with pytest.raises(RestRewardError, match=r"2 of 2 completions of step 0 .*"
                           r"max_failed_fraction = 0\.5.*fedmor align config"):
            rewards(DEFAULT_MAX_FAILED_FRACTION)
        failure = AlignmentSettings().failure_reward
        assert rewards(1.0) == [failure, failure]  # tolerated, as its setting says


def test_one_per_minute_limiter_serves_the_aligner_and_the_member(tmp_path: Path) -> None:
    # The server's per-aligner limit is the same limiter the member's service uses (its
    # [200, 200, 429] is tests/apps/test_apps_inprocess.py's).
    store = Store(tmp_path / "s.db")
    service = AlignmentService(store, RewardBroker(store, generate_key()),
                               AlignmentSettings(max_requests_per_minute=2))
    service.admit("c-a", 1)
    service.admit("c-a", 1)
    with pytest.raises(RateLimited, match="aligner c-a sent 2 requests in the last minute"):
        service.admit("c-a", 1)
    service.admit("c-b", 1)  # per aligner
    # Calls older than a minute leave the window.
    calls = deque([time.monotonic() - 61.0] * 5)
    RateLimited.per_minute(calls, 1, "caller")
    assert len(calls) == 1
    with pytest.raises(RateLimited) as refused:
        RateLimited.per_minute(calls, 1, "caller")
    assert refused.value.retry_after_s in (59, 60)  # the one call just made leaves in a minute
    # Retry-After is the wait until the oldest call leaves the window, not a whole minute.
    calls = deque([time.monotonic() - 50.0])
    with pytest.raises(RateLimited) as refused:
        RateLimited.per_minute(calls, 1, "caller")
    assert refused.value.retry_after_s in (9, 10)
