"""What an auditor learns when the member behind a relayed membership query does not score it:
a member that rate-limits the server passes its 429 and ``Retry-After`` on (it is busy, not a
bad gateway), while a member that cannot be reached stays one generic 502, whatever the
reason, so the relay never tells whether a port answered.

The member is the real client app served by uvicorn on 127.0.0.1, allowing the server one
request per minute; the server is in process, its broker dialling the member over HTTP."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from PIL import Image

from client_app import ClientSettings, ClientStore, HashScorer
from client_app._app import create_client_app
from fedmor_local import free_port
from sdk.membership import add_to_roster
from sdk.wire import generate_key, public_key_b64
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
def _relay(tmp_path: Path) -> Iterator[tuple[Member, contextlib.ExitStack, str]]:
    """An in-process server with an enrolled auditor and push member ``MEMBER``, a real
    client app on 127.0.0.1 that answers the server one request per minute; yields the
    auditor, the stack that holds the member app (closing it stops the member) and the
    member's client id."""
    roster = tmp_path / "roster.json"
    auditor_key, member_key = generate_key(), generate_key()
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
            "reward_url": f"http://127.0.0.1:{port}", "clip_bound": HashScorer.clip})
        assert joined.status_code == 200, joined.text
        db = tmp_path / "member.db"
        ClientStore(db).put("client_id", joined.json()["client_id"])  # as enrollment leaves it
        app = create_client_app(ClientSettings(
            db_path=db, identity_key=tmp_path / "member.pem", port=port,
            server_public_key=joined.json()["server_public_key"], rate_limit_per_minute=1),
            HashScorer())
        member.enter_context(served(app, port))
        yield Member(tc, auditor_key, aud["client_id"]), member, joined.json()["client_id"]


def test_a_members_429_reaches_the_auditor_with_its_retry_after(tmp_path: Path) -> None:
    with _relay(tmp_path) as (auditor, _, _):
        first = auditor.call("POST", _RELAY, {"items": [_item()]})
        assert first.status_code == 200, first.text
        busy = auditor.call("POST", _RELAY, {"items": [_item()]})
        # The member's one request a minute is spent: its 429 and Retry-After, passed on.
        assert busy.status_code == 429, busy.text
        assert busy.headers["retry-after"] == "60"
        assert f"member {MEMBER}" in busy.json()["detail"]


def test_an_unreachable_member_is_one_generic_502(tmp_path: Path) -> None:
    with _relay(tmp_path) as (auditor, member, client_id):
        member.close()  # the member app stops: its port no longer answers
        gone = auditor.call("POST", _RELAY, {"items": [_item()]})
    assert gone.status_code == 502, gone.text
    # The text a refused address, a closed port, a timeout and a TLS failure all give.
    assert gone.json()["detail"] == (f"member {MEMBER} did not score the query: client "
                                     f"{client_id} could not be reached")
    assert "retry-after" not in gone.headers
