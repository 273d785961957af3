"""Finding 5: every signed message names its recipient. A push-mode member that received a
server-signed reward query cannot replay it to another member (scores and budget safe)."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import httpx

from fedmor_local import LocalConsortium
from sdk.wire import load_private_key, sign_headers
from sdk.wire._auth import HEADER_AUTHORITY, HEADER_RECIPIENT, authority_of
from tests._images import png
from tests.security.conftest import PUSH, PUSH2, client_db, client_id


def test_a_query_signed_for_one_member_is_refused_by_another(hostile: LocalConsortium) -> None:
    data = png(seed=5)
    body = json.dumps({"items": [{"image_sha256": hashlib.sha256(data).hexdigest(),
                                  "prompt": "p", "response": "r",
                                  "image_b64": base64.b64encode(data).decode()}]}).encode()
    server_key = load_private_key(Path(hostile.server_cfg["identity_key"]))
    # What the broker sends site-0 (and what site-0, turned hostile, replays to site-2).
    captured = sign_headers(server_key, sender="server", method="POST", path="/v1/reward",
                            body=body, recipient=client_id(hostile, PUSH),
                            authority=authority_of(hostile.client_cfg[PUSH]["public_url"])) | {
        "content-type": "application/json"}
    victim = hostile.client_cfg[PUSH2]["public_url"]
    audited = client_db(hostile, PUSH2, "SELECT COUNT(*) FROM query_audit")
    replay = httpx.post(victim + "/v1/reward", content=body, headers=captured,
                        verify=hostile.verify, timeout=30)
    assert replay.status_code == 403, replay.text
    assert client_db(hostile, PUSH2, "SELECT COUNT(*) FROM query_audit") == audited
    assert client_db(hostile, PUSH2, "SELECT sha256 FROM images WHERE sha256=?",
                     (hashlib.sha256(data).hexdigest(),)) == []
    # Readdressed, it still names the first member's address: refused, saying so.
    readdressed = captured | {HEADER_RECIPIENT: client_id(hostile, PUSH2)}
    moved = httpx.post(victim + "/v1/reward", content=body, headers=readdressed,
                       verify=hostile.verify, timeout=30)
    assert moved.status_code == 401 and "signed for" in moved.json()["detail"], moved.text
    # Changing both headers breaks the signature; leaving one out is a missing header.
    forged = readdressed | {HEADER_AUTHORITY: authority_of(victim)}
    assert httpx.post(victim + "/v1/reward", content=body, headers=forged,
                      verify=hostile.verify, timeout=30).status_code == 403
    bare = {k: v for k, v in captured.items() if k != HEADER_RECIPIENT}
    assert httpx.post(victim + "/v1/reward", content=body, headers=bare,
                      verify=hostile.verify, timeout=30).status_code == 401
    # The intended recipient accepts it (once).
    sent = httpx.post(hostile.client_cfg[PUSH]["public_url"] + "/v1/reward", content=body,
                      headers=captured, verify=hostile.verify, timeout=30)
    assert sent.status_code == 200, sent.text


def test_a_member_request_names_the_server(hostile: LocalConsortium) -> None:
    key = load_private_key(Path(hostile.client_cfg[PUSH]["identity_key"]))
    path = "/v1/rounds"
    for recipient, status in ((client_id(hostile, PUSH2), 403), ("server", 200)):
        headers = sign_headers(key, sender=client_id(hostile, PUSH), method="GET", path=path,
                               body=b"", recipient=recipient,
                               authority=authority_of(hostile.server_url))
        assert httpx.get(hostile.server_url + path, headers=headers, verify=hostile.verify,
                         timeout=30).status_code == status
