"""One refusal type for every outbound call: a request the server refuses for load reaches the
command line, the member's runner and the aligner as the same ``RequestRefused``, with its
status and ``Retry-After`` (the broker's side, a member app's 429: the deadline test of
tests/security/test_broker_member_cap.py).

The server is the real app, served on 127.0.0.1, with a cap of one request in progress per
identity: a long poll the member holds fills its cap, and the aligner may send one request a
minute. Every wait is on a condition, never a clock.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from PIL import Image

from client_app import ClientRunner, ClientSettings, ClientStore
from client_app._demo import demo_update
from fedmor_local import free_port
from sdk.alignment import RestRewardFunction
from sdk.cli import main
from sdk.ops import Connection, OperatorClient
from sdk.wire import AsyncSignedClient, RequestRefused, Work
from sdk.wire._auth import write_private_key
from tests._serve import served
from tests.apps.conftest import Member, enrolled_team

RETRY_S = 7  # the server's limits.retry_after_s
RATE_RETRY_S = 60  # the Retry-After of a rate refusal (its window is a minute)
_WAIT_S = 60.0  # a bound on the wait for the held poll (a failure, never a measurement)


@dataclass
class Busy:
    url: str
    member: Member
    member_pem: Path
    aligner: Member
    work: Path


@pytest.fixture
def busy(tmp_path: Path) -> Iterator[Busy]:
    port = free_port()  # the settings name it: each signature names the address it was for
    team = enrolled_team(
        tmp_path, {"m": "member", "al": "aligner"}, base_url=f"http://127.0.0.1:{port}",
        limits={"per_identity": 1, "long_polls_per_identity": 1, "retry_after_s": RETRY_S},
        alignment={"max_requests_per_minute": 1})
    pem = tmp_path / "m.pem"
    write_private_key(team["m"].key, pem)
    with served(team["m"].tc.app, port) as url:
        yield Busy(url, team["m"], pem, team["al"], tmp_path)


async def _long_polls(url: str) -> float:
    """The server's gauge of long polls held now."""
    async with httpx.AsyncClient(base_url=url, timeout=30,
                                 headers={"authorization": "Bearer adm"}) as http:
        text = (await http.get("/metrics")).text
    line = next(x for x in text.splitlines()
                if x.startswith('fedmor_server_requests_in_progress{pool="long_polls"}'))
    return float(line.rsplit(" ", 1)[1])


def _cli_refusal(busy: Busy, capsys: pytest.CaptureFixture[str]) -> RequestRefused:
    """The operator commands' connection, signing as the member, and the command's message."""
    conn = Connection(server=busy.url, key_file=busy.member_pem, sender=busy.member.client_id,
                      insecure_http=True)
    with pytest.raises(RequestRefused) as refused:
        OperatorClient(conn).rounds()
    capsys.readouterr()
    assert main(["rounds", "list", "--server", busy.url, "--insecure-http", "--key-file",
                 str(busy.member_pem), "--sender", busy.member.client_id]) == 1
    err = capsys.readouterr().err
    assert "refused by the server (429)" in err and f"retry after {RETRY_S} s" in err, err
    return refused.value


def _runner_refusal(busy: Busy) -> tuple[RequestRefused, list[float]]:
    """The member's runner, asking twice: the refusal it gives up with, and its waits."""
    settings = ClientSettings(name="m", db_path=busy.work / "m.db", server_url=busy.url,
                              scorer="client_app:HashScorer")
    store = ClientStore(settings.db_path)
    store.put("client_id", busy.member.client_id)
    runner = ClientRunner(settings, store=store, key=busy.member.key, update_fn=demo_update)
    waits: list[float] = []
    runner._backoff = waits.append  # type: ignore[method-assign]  # the waits, not slept
    try:
        with pytest.raises(RequestRefused) as refused:
            runner.request("GET", "/v1/rounds", attempts=2)
    finally:
        runner.close()
    return refused.value, waits


async def _aligner_refusal(busy: Busy) -> RequestRefused:
    """The aligner's reward function: its first request is answered (the image is missing),
    the resend is over its rate."""
    rewards = RestRewardFunction(busy.url, busy.aligner.key, busy.aligner.client_id)
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), "red").save(buf, format="PNG")
    with pytest.raises(RequestRefused) as refused:
        await rewards(prompts=["p"], completions=["c"], image=[Image.open(buf)])
    assert rewards.requests == 2
    return refused.value


def test_every_caller_gets_one_refusal_type_with_status_and_retry_after(
        busy: Busy, capsys: pytest.CaptureFixture[str]) -> None:
    async def scenario() -> tuple[RequestRefused, RequestRefused, list[float], RequestRefused]:
        async with AsyncSignedClient(busy.url, key=busy.member.key,
                                     sender=busy.member.client_id) as held:
            poll = asyncio.create_task(held.get("/v1/work?wait_s=30", Work))
            give_up = asyncio.get_running_loop().time() + _WAIT_S
            while await _long_polls(busy.url) < 1:
                assert not poll.done(), poll
                assert asyncio.get_running_loop().time() < give_up, "the poll was never held"
                await asyncio.sleep(0.01)
            try:
                cli = await asyncio.to_thread(_cli_refusal, busy, capsys)
                runner, waits = await asyncio.to_thread(_runner_refusal, busy)
            finally:
                poll.cancel()  # the server ends a held request whose client hung up
            return cli, runner, waits, await _aligner_refusal(busy)

    cli, runner, waits, aligner = asyncio.run(scenario())
    for refused in (cli, runner):
        assert (refused.status, refused.retry_after) == (429, RETRY_S)
        assert (refused.method, refused.path) == ("GET", "/v1/rounds")
        assert "limits.per_identity" in refused.reason
    assert waits == [RETRY_S]  # the runner waited what the server asked, not its backoff
    assert (aligner.status, aligner.retry_after) == (429, RATE_RETRY_S)
    assert (aligner.method, aligner.path) == ("POST", "/v1/rewards")
    assert "per minute" in aligner.reason
