"""The broker against a member app's cap on one identity's requests (``limits.per_identity``):
the server is one identity to a member, so queries it pushes beyond that cap get 429 with
``Retry-After``; the broker sends them again after that wait (within the query's deadline),
and keeps its own in-flight queries per member below the cap so that the 429s stay rare.

The member is the real client app served by uvicorn on 127.0.0.1, its scorer a gate the test
opens once the queries it needs are held: every wait is on a condition, never a clock."""

from __future__ import annotations

import asyncio
import hashlib
import io
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from PIL import Image

from client_app import ClientSettings, ClientStore, HashScorer
from client_app._app import create_client_app
from fedmor_local import free_port
from sdk.wire import ImageRef, RequestRefused, generate_key, public_key_b64
from sdk.wire._client import _retry_after
from server_app import RewardBroker, Store
from tests._images import png
from tests._serve import served

MEMBER = "c-capped"
CAP = 2  # the member's limits.per_identity
QUERIES = 6  # pushed at once: more than the cap
_WAIT_S = 60.0  # a bound on each wait for a condition (a failure, never a measurement)


class GatedScorer(HashScorer):
    """The hash scorer behind a gate: each call waits until the test opens it, counting the
    calls inside (the requests that hold one of the member's slots)."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.inside = self.most = 0
        self._lock = threading.Lock()

    def score(self, images: list[Image.Image], prompts: list[str],
              responses: list[str]) -> list[float]:
        with self._lock:
            self.inside += 1
            self.most = max(self.most, self.inside)
        try:
            if not self.gate.wait(_WAIT_S):
                raise RuntimeError("the test never opened the gate")
            return super().score(images, prompts, responses)
        finally:
            with self._lock:
                self.inside -= 1


@dataclass
class Member:
    url: str
    scorer: GatedScorer
    store: Store  # the server's store, the member enrolled in push mode at ``url``
    key: Ed25519PrivateKey  # the server's

    def broker(self, timeout_s: float, per_member: int = 8) -> RewardBroker:
        return RewardBroker(self.store, self.key, mode="push", verify=False,
                            timeout_s=timeout_s, per_member=per_member,
                            allow_private=True)  # members on 127.0.0.1

    def metric(self, prefix: str, label: str) -> float:
        """The sum of the member's ``/metrics`` series starting with ``prefix`` whose labels
        include ``label``."""
        text = httpx.get(f"{self.url}/metrics", timeout=30).text
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(prefix + "{") and label in line)

    def refused_busy(self) -> float:
        """429s the member answered (its request counter, by status)."""
        return self.metric("fedmor_client_requests_total", 'status="429"')

    def scored_items(self) -> float:
        return self.metric("fedmor_client_reward_items", 'caller="server"')


@pytest.fixture
def member(tmp_path: Path) -> Iterator[Member]:
    """A push-mode member app capped at ``CAP`` requests per identity, on a free port."""
    server_key = generate_key()
    ClientStore(tmp_path / "c.db").put("client_id", MEMBER)
    scorer = GatedScorer()
    port = free_port()  # the settings name it: the broker's signature names the port it dials
    app = create_client_app(ClientSettings(
        db_path=tmp_path / "c.db", identity_key=tmp_path / "c.pem", port=port,
        server_public_key=public_key_b64(server_key),
        limits={"per_identity": CAP, "long_polls_per_identity": 1, "retry_after_s": 1}),
        scorer)
    store = Store(tmp_path / "s.db")
    with served(app, port) as url:
        member_key = public_key_b64(generate_key())
        store.upsert_roster("capped", member_key, hashlib.sha256(b"token-capped").hexdigest())
        store.enroll(name="capped", token="token-capped", public_key=member_key,
                     reward_url=url, new_id=MEMBER, clip_bound=HashScorer.clip)
        try:
            yield Member(url, scorer, store, server_key)
        finally:
            scorer.gate.set()  # no scorer thread outlives the test


IMAGE = ImageRef.of(png(16, 0))


def _ask(broker: RewardBroker, i: int) -> Awaitable[list[float]]:
    return broker.query(MEMBER, [IMAGE], [f"prompt {i}"], [f"response {i}"])


def _expected(i: int) -> float:
    image = Image.open(io.BytesIO(IMAGE.data)).convert("RGB")
    return HashScorer().score([image], [f"prompt {i}"], [f"response {i}"])[0]


async def _until(condition: Callable[[], bool], what: str) -> None:
    """Return once ``condition()`` holds (checked as the event loop turns)."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + _WAIT_S
    while not condition():
        assert loop.time() < give_up, f"never happened: {what}"
        await asyncio.sleep(0.01)


def _push_all(member: Member, broker: RewardBroker, ready: Callable[[], bool],
              what: str) -> list[list[float]]:
    """Push ``QUERIES`` queries at once, open the member's gate once ``ready()`` holds (or a
    query ended: its error is raised), and return every query's scores."""
    async def scenario() -> list[list[float]]:
        asked = [asyncio.create_task(_ask(broker, i)) for i in range(QUERIES)]
        await _until(lambda: ready() or any(t.done() for t in asked), what)
        member.scorer.gate.set()
        try:
            return await asyncio.gather(*asked)
        finally:
            await broker.aclose()

    return asyncio.run(scenario())


def test_queries_beyond_the_members_cap_are_resent_after_its_retry_after(
        member: Member) -> None:
    broker = member.broker(timeout_s=60)  # per_member 8: the broker alone exceeds the cap
    # Two queries hold the member's slots; the others were refused at least once.
    scores = _push_all(member, broker, lambda: member.scorer.inside == CAP
                       and broker.resends >= QUERIES - CAP, "the cap filled, 429s came back")
    assert scores == [[pytest.approx(_expected(i))] for i in range(QUERIES)]
    assert member.scored_items() == QUERIES  # every item scored by the member itself
    assert member.refused_busy() >= QUERIES - CAP  # the member did refuse: these were resends
    assert member.scorer.most == CAP


def test_the_broker_keeps_its_queries_to_one_member_below_its_cap(member: Member) -> None:
    broker = member.broker(timeout_s=60, per_member=CAP - 1)
    # Every query is inside the member or held back somewhere (here, or by a 429).
    scores = _push_all(member, broker, lambda: member.scorer.inside >= 1
                       and broker.slot_waits + broker.resends >= QUERIES - 1,
                       "every query sent or held back")
    assert scores == [[pytest.approx(_expected(i))] for i in range(QUERIES)]
    assert member.refused_busy() == 0 and broker.resends == 0  # held back here, not refused
    assert member.scorer.most == CAP - 1
    assert member.scored_items() == QUERIES


def test_a_429_whose_retry_after_passes_the_deadline_fails_the_query(member: Member) -> None:
    holder = member.broker(timeout_s=60)
    # Another server process's broker, whose deadline comes before the member's Retry-After.
    hasty = member.broker(timeout_s=0.5)

    async def scenario() -> None:
        held = [asyncio.create_task(_ask(holder, i)) for i in range(CAP)]
        await _until(lambda: member.scorer.inside == CAP, "the cap filled")
        with pytest.raises(RequestRefused) as refused:
            await _ask(hasty, CAP)
        assert (refused.value.status, refused.value.retry_after) == (429, 1.0)
        assert (refused.value.method, refused.value.path) == ("POST", "/v1/reward")
        assert f"refused by member {MEMBER} (429)" in str(refused.value)
        member.scorer.gate.set()
        try:
            await asyncio.gather(*held)
        finally:
            await holder.aclose()
            await hasty.aclose()

    asyncio.run(scenario())
    assert member.refused_busy() == 1 and hasty.resends == 0


def test_retry_after_is_read_once_and_waited_with_a_floor_and_a_default() -> None:
    assert _retry_after("3") == 3.0
    assert _retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date in the past
    assert _retry_after(None) is _retry_after("soon") is _retry_after("nan") is None

    def wait(retry_after: float | None) -> float:
        return RequestRefused("POST", "/v1/reward", 429, "busy", retry_after=retry_after).wait_s

    assert wait(3.0) == 3.0
    assert wait(0.0) == 0.1  # never a busy loop of resends
    assert wait(None) == 1.0
