"""What an auditor learns when the member behind a relayed membership query does not score it:
a member that rate-limits the server passes its 429 and ``Retry-After`` on (it is busy, not a
bad gateway), while a member that cannot be reached stays one generic 502, whatever the
reason, so the relay never tells whether a port answered.

The member is the real client app served by uvicorn on 127.0.0.1, allowing the server one
request per minute; the server is in process, its broker dialling the member over HTTP. A
pull-mode member is the real runner, fetching and answering its queries through the
in-process server; its refusal for load reaches the auditor as the push member's does."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from PIL import Image

from client_app import ClientSettings, ClientStore, HashScorer
from client_app._app import create_client_app, site_reward_service
from client_app._runner import ClientRunner
from fedmor_local import free_port
from sdk.membership import add_to_roster
from sdk.wire import SignedClient, Work, generate_key, load_or_create_key, public_key_b64
from server_app import ServerSettings
from server_app._app import create_app
from tests._serve import served
from tests.apps.conftest import Member

MEMBER = "capped"
_RELAY = f"/v1/audit/members/{MEMBER}/reward"


def _item() -> dict[str, Any]:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (9, 8, 7)).save(buf, format="PNG")
    data = buf.getvalue()
    return {"image_sha256": hashlib.sha256(data).hexdigest(), "prompt": "p", "response": "r",
            "image_b64": base64.b64encode(data).decode()}


@contextlib.contextmanager
def _relay(tmp_path: Path, *, pull: bool = False
           ) -> Iterator[tuple[Member, contextlib.ExitStack, str, ClientSettings]]:
    """An in-process server with an enrolled auditor and push member ``MEMBER``, a real
    client app on 127.0.0.1 that answers the server one request per minute (``pull``: a
    member without a reward URL, and no app); yields the auditor, the stack that holds the
    member app (closing it stops the member), the member's client id and its settings."""
    roster = tmp_path / "roster.json"
    auditor_key = generate_key()
    member_key = load_or_create_key(tmp_path / "member.pem")
    tokens = {"aud": add_to_roster(roster, name="aud", public_key=public_key_b64(auditor_key),
                                   role="auditor"),
              MEMBER: add_to_roster(roster, name=MEMBER, public_key=public_key_b64(member_key))}
    port = free_port()  # the member's settings name it: the server's queries are signed for it
    cfg = ServerSettings(db_path=tmp_path / "s.db", identity_key=tmp_path / "id.pem",
                         roster_file=roster, public_urls=["http://testserver"],
                         allow_private_reward_urls=True, allow_http_reward_urls=True,
                         reward_timeout_s=5.0)  # below the member's Retry-After: not resent
    with TestClient(create_app(cfg)) as tc, contextlib.ExitStack() as member:
        aud = tc.post("/v1/enroll", json={"name": "aud", "token": tokens["aud"],
                                          "public_key": public_key_b64(auditor_key)}).json()
        joined = tc.post("/v1/enroll", json={
            "name": MEMBER, "token": tokens[MEMBER], "public_key": public_key_b64(member_key),
            "clip_bound": HashScorer.clip,
            **({} if pull else {"reward_url": f"http://127.0.0.1:{port}"})})
        assert joined.status_code == 200, joined.text
        db = tmp_path / "member.db"
        ClientStore(db).put("client_id", joined.json()["client_id"])  # as enrollment leaves it
        settings = ClientSettings(
            db_path=db, identity_key=tmp_path / "member.pem", port=port,
            server_public_key=joined.json()["server_public_key"], rate_limit_per_minute=1)
        if not pull:
            member.enter_context(served(create_client_app(settings, HashScorer()), port))
        yield (Member(tc, auditor_key, aud["client_id"]), member, joined.json()["client_id"],
               settings)


def test_a_members_429_reaches_the_auditor_with_its_retry_after(tmp_path: Path) -> None:
    with _relay(tmp_path) as (auditor, _, _, _):
        first = auditor.call("POST", _RELAY, {"items": [_item()]})
        assert first.status_code == 200, first.text
        busy = auditor.call("POST", _RELAY, {"items": [_item()]})
        # The member's one request a minute is spent: its 429 and Retry-After, passed on.
        _assert_passed_on(busy)


def _assert_passed_on(busy: Any) -> None:
    assert busy.status_code == 429, busy.text
    assert 1 <= int(busy.headers["retry-after"]) <= 60  # the member's wait, within its minute
    assert f"member {MEMBER}" in busy.json()["detail"]


def test_a_pull_members_rate_limit_reaches_the_auditor_as_429(tmp_path: Path) -> None:
    with _relay(tmp_path, pull=True) as (auditor, _, _, site):
        settings = site.model_copy(update={"server_url": str(auditor.tc.base_url),
                                           "run_rounds": False})
        runner = ClientRunner(settings, service=site_reward_service(
            settings, ClientStore(settings.db_path), HashScorer()))
        runner.http = SignedClient(http=auditor.tc)  # the in-process server's transport

        def answer_once() -> None:  # the runner's work pass, for one query
            runner.answer_pending(runner.get("/v1/work?wait_s=20&rounds=false", Work).queries)

        for expected in (200, 429):  # the member's one scoring a minute, then its refusal
            thread = threading.Thread(target=answer_once)
            thread.start()
            relayed = auditor.call("POST", _RELAY, {"items": [_item()]})
            thread.join(timeout=30)
            assert relayed.status_code == expected, relayed.text
        _assert_passed_on(relayed)


def test_an_unreachable_member_is_one_generic_502(tmp_path: Path) -> None:
    with _relay(tmp_path) as (auditor, member, client_id, _):
        member.close()  # the member app stops: its port no longer answers
        gone = auditor.call("POST", _RELAY, {"items": [_item()]})
    assert gone.status_code == 502, gone.text
    # The text a refused address, a closed port, a timeout and a TLS failure all give.
    assert gone.json()["detail"] == (f"member {MEMBER} did not score the query: client "
                                     f"{client_id} could not be reached")
    assert "retry-after" not in gone.headers
