"""Finding 1: no single caller can stall the server. Long polls wait without a thread, each
identity has its own caps (429 beyond, after its signature checked out), callers without
credentials share one cap (the connection deadlines: ``test_bounded_deadlines.py``).

Every test drives a real server process on 127.0.0.1 with raw signed requests, and waits on
responses, never on the clock: an honest request must be answered while the hostile requests
are still open.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from concurrent.futures import Future

import httpx
import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from client_app._round_walk import MemberRound, UpdateSource
from fedmor_local import LocalConsortium
from fedmor_local._local import ADMIN_TOKEN
from sdk.rounds import ROUND_KINDS
from sdk.wire import (
    RoundInfo,
    SignedClient,
    StageAck,
    StageBroadcast,
)
from tests.security._bounded import HELD_S, Caller, enroll_all


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[Caller]]]:
    """A server with default limits and 20 enrolled members."""
    with LocalConsortium(tmp_path_factory.mktemp("bounded"), 20) as c:
        c.start_server()
        yield c.server_url, enroll_all(c)


async def _first_done(tasks: list[asyncio.Task[httpx.Response]], count: int
                      ) -> list[httpx.Response]:
    """The first ``count`` responses of ``tasks``, in the order they arrive."""
    done: list[httpx.Response] = []
    pending = set(tasks)
    while len(done) < count:
        finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        done.extend(t.result() for t in finished)
    return done


async def _cancel(tasks: list[asyncio.Task[httpx.Response]]) -> None:
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _honest_calls(http: httpx.AsyncClient, honest: Caller) -> None:
    """Health, a thread-bound member endpoint, and a member's own (empty) work check."""
    assert (await http.get("/v1/health")).status_code == 200
    rounds = await honest.get(http, "/v1/rounds")
    assert rounds.status_code == 200, rounds.text
    work = await honest.get(http, "/v1/work?wait_s=0")
    assert work.status_code == 200 and work.json() == {"rounds": [], "queries": []}, work.text


def test_one_member_with_120_long_polls_stalls_nobody(served: tuple[str, list[Caller]]
                                                      ) -> None:
    url, callers = served
    hostile, honest = callers[0], callers[1]
    path = f"/v1/work?wait_s={HELD_S}"

    async def attack() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=120,
                                     limits=httpx.Limits(max_connections=200)) as http:
            polls = [asyncio.create_task(hostile.get(http, path)) for _ in range(120)]
            # All but its long-poll cap are refused at once, with Retry-After.
            refused = await _first_done(polls, 120 - 4)
            assert {r.status_code for r in refused} == {429}, refused[0].text
            assert all(r.headers.get("retry-after") for r in refused)
            assert all(hostile.client_id in r.json()["detail"] for r in refused)
            held = [t for t in polls if not t.done()]
            assert len(held) == 4
            await _honest_calls(http, honest)
            assert not any(t.done() for t in held)  # answered while the hostile polls wait
            await _cancel(held)

    asyncio.run(attack())


def test_long_polls_beyond_the_thread_pool_hold_no_thread(served: tuple[str, list[Caller]]
                                                         ) -> None:
    """17 members x 4 long polls = 68 held requests, more than the 64 worker threads: a
    thread-bound wait would leave none for anyone else."""
    url, callers = served
    pollers, honest = callers[2:19], callers[19]
    path = f"/v1/work?wait_s={HELD_S}"

    async def crowd() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=120,
                                     limits=httpx.Limits(max_connections=200)) as http:
            # Five polls each: the fifth is refused (only once the other four are counted).
            polls = [asyncio.create_task(p.get(http, path)) for p in pollers for _ in range(5)]
            refused = await _first_done(polls, len(pollers))
            assert {r.status_code for r in refused} == {429}, refused[0].text
            held = [t for t in polls if not t.done()]
            assert len(held) == 4 * len(pollers)
            await _honest_calls(http, honest)
            assert not any(t.done() for t in held)
            await _cancel(held)

    asyncio.run(crowd())


def _slow_upload(port: int) -> socket.socket:
    """An unsigned POST /v1/enroll whose body never finishes arriving."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(b"POST /v1/enroll HTTP/1.1\r\nhost: 127.0.0.1\r\n"
                 b"content-type: application/json\r\ncontent-length: 1000\r\n\r\n{")
    return sock


def test_an_unauthenticated_flood_is_capped(served: tuple[str, list[Caller]]) -> None:
    url, callers = served
    port = int(url.rsplit(":", 1)[1])
    # The anonymous cap (32) in open uploads; the server answers each 429 at once beyond it.
    uploads = [_slow_upload(port) for _ in range(32)]
    try:
        with httpx.Client(base_url=url, timeout=60) as http:
            seen = []
            for _ in range(40):  # the uploads reach the app in their own time: ask until full
                seen.append(http.get("/v1/ready"))
                if seen[-1].status_code == 429:
                    break
            assert seen[-1].status_code == 429, [r.status_code for r in seen]
            assert "limits.anonymous" in seen[-1].json()["detail"]
            assert seen[-1].headers["retry-after"]
            # Members and the liveness probe are not in that pool.
            assert http.get("/v1/health").status_code == 200
            path = "/v1/rounds"
            resp = http.get(path, headers=callers[1].headers("GET", path))
            assert resp.status_code == 200, resp.text
    finally:
        for sock in uploads:
            sock.close()


def test_a_forged_signature_spends_no_quota_of_the_named_member(
        served: tuple[str, list[Caller]]) -> None:
    """20 requests (bodies that never finish) that claim a member's id but carry another
    key's signature are each answered 403 from their headers, before their body, and count
    against that member not at all: its own requests and its four long polls get through."""
    url, callers = served
    victim = callers[1]
    forger = Caller(victim.client_id, Ed25519PrivateKey.generate(), url)
    port = int(url.rsplit(":", 1)[1])
    path, body = "/v1/reward/answers/1", b'{"scores": [0.5]}'
    head = "".join(f"{k}: {v}\r\n" for k, v in forger.headers("POST", path, body).items())
    forged = []
    for _ in range(20):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: "
                     f"application/json\r\ncontent-length: 1000\r\n{head}\r\n".encode()
                     + body[:5])
        forged.append(sock)
    poll = f"/v1/work?wait_s={HELD_S}"

    async def own_quota() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=120) as http:
            assert (await victim.get(http, "/v1/rounds")).status_code == 200
            # Of five polls, four are held and only the fifth is refused: its cap is intact.
            own = [asyncio.create_task(victim.get(http, poll)) for _ in range(5)]
            refused = await _first_done(own, 1)
            assert refused[0].status_code == 429, refused[0].text
            assert sum(not t.done() for t in own) == 4
            await _cancel(own)

    try:
        for sock in forged:  # each answered while 995 of its 1000 body bytes never came
            sock.settimeout(60)
            assert sock.recv(12) == b"HTTP/1.1 403"
        asyncio.run(own_quota())
    finally:
        for sock in forged:
            sock.close()


def test_a_member_at_its_long_poll_cap_still_gets_its_stage_message_acked(
        served: tuple[str, list[Caller]]) -> None:
    """The cap on held requests never refuses a committed stage message: a member holding its
    four long polls sends SecAgg+'s first message with ``wait_next_s`` and gets its ack (200,
    without the next stage's input, which it then fetches), not a 429 for a stored message."""
    url, callers = served
    member, other = callers[17], callers[18]
    with httpx.Client(base_url=url, timeout=60,
                      headers={"authorization": f"Bearer {ADMIN_TOKEN}"}) as admin:
        created = admin.post("/v1/rounds", json={
            "kind": "router_secagg", "vector_length": 4, "min_clients": 2,
            "participants": [member.client_id, other.client_id]})
        assert created.status_code == 200, created.text
    info = RoundInfo.model_validate(created.json())
    update: UpdateSource = Future()
    update.set_result((np.zeros(4, np.float32), 1))
    half = MemberRound.join(ROUND_KINDS[info.kind].terms(info), client_id=member.client_id,
                            key=member.key, update=update, state=None)
    stage = info.stages[0]
    path = f"/v1/rounds/{info.round_id}/stages/{stage}"
    poll = f"/v1/work?wait_s={HELD_S}&rounds=false"

    async def submit_at_the_cap() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=120) as http:
            first = StageBroadcast.model_validate((await member.get(http, path)).json())
            body = json.dumps({"payload": half.message(stage, first.payload or {})}).encode()
            polls = [asyncio.create_task(member.get(http, poll)) for _ in range(5)]
            refused = await _first_done(polls, 1)  # four held: the cap is reached
            assert refused[0].status_code == 429, refused[0].text
            sent = f"{path}?wait_next_s=20"
            ack = await http.post(sent, content=body, headers=member.headers(
                "POST", sent, body) | {"content-type": "application/json"})
            assert ack.status_code == 200, ack.text
            assert StageAck.model_validate(ack.json()).next is None
            await _cancel(polls)

    asyncio.run(submit_at_the_cap())


def _signature_checks(http: httpx.Client) -> float:
    """The server's ``fedmor_server_signature_checks``, summed over results."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in http.get("/metrics").text.splitlines()
               if line.startswith("fedmor_server_signature_checks{"))


def test_each_signed_request_is_verified_once(served: tuple[str, list[Caller]]) -> None:
    """The header check, the per-identity caps and the route share one Ed25519 verification:
    a request's signature is checked once, whatever layers read its sender."""
    url, callers = served
    member = callers[19]
    body = b'{"clip_bound": 3}'
    with httpx.Client(base_url=url, timeout=60) as http:
        before = _signature_checks(http)
        for path in ("/v1/rounds", "/v1/work?wait_s=0"):
            resp = http.get(path, headers=member.headers("GET", path))
            assert resp.status_code == 200, resp.text
        path = "/v1/identity/clip-bound"
        resp = http.post(path, content=body, headers=member.headers("POST", path, body)
                         | {"content-type": "application/json"})
        assert resp.status_code == 200, resp.text
        assert _signature_checks(http) - before == 3


def test_a_percent_encoded_path_is_signed_as_sent(served: tuple[str, list[Caller]]) -> None:
    """The signature covers the path as it travels (percent-encoded), on both sides: a stage
    name with a space, a non-ASCII letter and an encoded ``?`` passes the signature check (the
    route then refuses the name, 422), and a signature made for ``/v1/rounds?status=open``
    does not let the same bytes travel as one path, ``/v1/rounds%3Fstatus=open``."""
    url, callers = served
    member = callers[19]
    with SignedClient(url, key=member.key, sender=member.client_id) as signed:
        resp = signed.request("GET", "/v1/rounds/1/stages/zürich st%3Fx")
        assert resp.request.url.raw_path == b"/v1/rounds/1/stages/z%C3%BCrich%20st%3Fx"
        assert resp.status_code == 422, resp.text
        assert "path.stage" in resp.json()["detail"]
    headers = member.headers("GET", "/v1/rounds?status=open")
    with httpx.Client(base_url=url, timeout=60) as http:
        assert http.get("/v1/rounds?status=open", headers=headers).status_code == 200
        moved = http.get("/v1/rounds%3Fstatus=open", headers=member.headers(
            "GET", "/v1/rounds?status=open"))
        assert moved.status_code == 403, moved.text


def test_each_route_limits_its_own_body(served: tuple[str, list[Caller]]) -> None:
    """A JSON control route takes ``max_control_bytes`` (256 KiB), an upload route (a stage
    message) ``max_request_bytes`` (64 MiB): 300 KB to the first is refused 413 naming its
    limit, whether its length is declared or it streams in chunks; the second reads them."""
    url, callers = served
    member = callers[19]
    body = b'{"clip_bound": 3, "pad": "' + b"x" * 300_000 + b'"}'
    control = "/v1/identity/clip-bound"
    upload = "/v1/rounds/999/stages/advertise"

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(body), 16_384):
            yield body[start:start + 16_384]

    with httpx.Client(base_url=url, timeout=60) as http:
        for content in (body, chunks()):  # a declared length, then chunks of unknown total
            resp = http.post(control, content=content, headers=member.headers(
                "POST", control, body) | {"content-type": "application/json"})
            assert resp.status_code == 413, resp.text
            assert "max_control_bytes" in resp.json()["detail"]
        resp = http.post(upload, content=chunks(), headers=member.headers(
            "POST", upload, body) | {"content-type": "application/json"})
        assert resp.status_code == 422, resp.text  # read whole, then parsed: no payload
        assert "payload: Field required" in resp.json()["detail"]


