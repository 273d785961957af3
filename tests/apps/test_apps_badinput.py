"""Unauthenticated, forged, replayed, stale, oversized and malformed requests against the real
server and client processes: always a 4xx with a ``detail`` message, never a 5xx."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from fedmor_local import LocalConsortium
from sdk.wire import generate_key, load_private_key, sign_headers
from sdk.wire._auth import authority_of


def _signed(c: LocalConsortium, index: int, method: str, path: str, body: bytes = b"",
            *, key_override: object = None, now: float | None = None) -> dict[str, str]:
    key = key_override or load_private_key(Path(c.client_cfg[c.names[index]]["identity_key"]))
    headers = sign_headers(key, sender=c.enrolled()[index], method=method, path=path,  # type: ignore[arg-type]
                           body=body, now=now, authority=authority_of(c.server_url))
    return headers | {"content-type": "application/json"}


def _detail(resp: httpx.Response, status: int, needle: str) -> None:
    assert resp.status_code == status, resp.text
    assert needle in resp.json()["detail"]


@pytest.fixture(scope="module")
def http(consortium: LocalConsortium) -> httpx.Client:
    return httpx.Client(base_url=consortium.server_url, verify=consortium.verify, timeout=30)


def test_unauthenticated_is_401(http: httpx.Client) -> None:
    _detail(http.get("/v1/rounds"), 401, "missing authentication header")
    _detail(http.get("/v1/router/latest"), 401, "missing authentication header")


def test_signed_request_is_accepted(consortium: LocalConsortium, http: httpx.Client) -> None:
    resp = http.get("/v1/rounds", headers=_signed(consortium, 0, "GET", "/v1/rounds"))
    assert resp.status_code == 200
    assert isinstance(resp.json(), list)


def test_forged_signature_is_403(consortium: LocalConsortium, http: httpx.Client) -> None:
    headers = _signed(consortium, 0, "GET", "/v1/rounds", key_override=generate_key())
    _detail(http.get("/v1/rounds", headers=headers), 403, "bad signature")


def test_signature_bound_to_path(consortium: LocalConsortium, http: httpx.Client) -> None:
    headers = _signed(consortium, 0, "GET", "/v1/rounds")
    _detail(http.get("/v1/router/latest", headers=headers), 403, "bad signature")


def test_replayed_request_is_401(consortium: LocalConsortium, http: httpx.Client) -> None:
    headers = _signed(consortium, 1, "GET", "/v1/rounds")
    assert http.get("/v1/rounds", headers=headers).status_code == 200
    _detail(http.get("/v1/rounds", headers=headers), 401, "replayed")


def test_stale_timestamp_is_401(consortium: LocalConsortium, http: httpx.Client) -> None:
    headers = _signed(consortium, 0, "GET", "/v1/rounds", now=time.time() - 3600)
    _detail(http.get("/v1/rounds", headers=headers), 401, "timestamp")


def test_unknown_sender_is_403_like_a_bad_signature(http: httpx.Client) -> None:
    headers = sign_headers(generate_key(), sender="c-nobody", method="GET", path="/v1/rounds",
                           body=b"", authority=authority_of(str(http.base_url)))
    _detail(http.get("/v1/rounds", headers=headers), 403, "unknown sender or bad signature")


def test_garbled_auth_headers_are_401(http: httpx.Client) -> None:
    headers = {"x-fedmor-sender": "x", "x-fedmor-timestamp": "soon", "x-fedmor-nonce": "abc",
               "x-fedmor-signature": "!!", "x-fedmor-recipient": "server",
               "x-fedmor-content-sha256": "0" * 64, "x-fedmor-authority": "x:1"}
    _detail(http.get("/v1/rounds", headers=headers), 401, "not an integer")


def test_oversized_body_is_413(consortium: LocalConsortium, http: httpx.Client) -> None:
    body = b"{" + b" " * (3 * 2**20) + b"}"
    path = "/v1/rounds/1/stages/advertise_keys"
    resp = http.post(path, content=body, headers=_signed(consortium, 0, "POST", path, body))
    _detail(resp, 413, "exceeds")


def test_malformed_json_is_422(consortium: LocalConsortium, http: httpx.Client) -> None:
    path = "/v1/rounds/1/stages/advertise_keys"
    for body in (b"{not json", b'{"payload": 3}', b"[]"):
        resp = http.post(path, content=body, headers=_signed(consortium, 0, "POST", path, body))
        _detail(resp, 422, "invalid request")


def test_unknown_round_is_404(consortium: LocalConsortium, http: httpx.Client) -> None:
    path = "/v1/rounds/999999"
    _detail(http.get(path, headers=_signed(consortium, 0, "GET", path)), 404, "does not exist")


def test_bad_message_in_open_round_is_422(consortium: LocalConsortium,
                                          http: httpx.Client) -> None:
    info = consortium.create_round(kind="rm_fedavg", vector_length=64, min_clients=1,
                                   participants=[consortium.enrolled()[0]],
                                   stage_deadline_s=30.0)
    path = f"/v1/rounds/{info['round_id']}/stages/update"
    body = json.dumps({"payload": {"weight": -1, "vector": "AAAA"}}).encode()
    _detail(http.post(path, content=body, headers=_signed(consortium, 1, "POST", path, body)),
            403, "not a participant")
    # The round was already taken by the participant's own runner or is still open: a wrong
    # message is refused either way, never stored.
    resp = http.post(path, content=body, headers=_signed(consortium, 0, "POST", path, body))
    assert resp.status_code in (409, 422), resp.text
    assert resp.json()["detail"]


def test_enrollment_refusals(consortium: LocalConsortium, http: httpx.Client) -> None:
    name = consortium.names[0]
    from sdk.wire import public_key_b64

    body = {"name": name, "token": "wrong-token-123", "public_key": public_key_b64(generate_key())}
    _detail(http.post("/v1/enroll", json=body), 403, "enrollment refused")
    body["name"] = "stranger"
    _detail(http.post("/v1/enroll", json=body), 403, "enrollment refused")
    _detail(http.post("/v1/enroll", json={"name": name}), 422, "invalid request")


def test_admin_needs_token(consortium: LocalConsortium) -> None:
    plain = httpx.post(f"{consortium.server_url}/v1/rounds", json={}, verify=consortium.verify,
                       headers={"authorization": "Bearer nope"})
    _detail(plain, 401, "admin bearer token")


def test_client_app_refuses_non_server_callers(consortium: LocalConsortium) -> None:
    url = consortium.client_cfg[consortium.names[0]]["public_url"]
    with httpx.Client(base_url=url, verify=consortium.verify, timeout=30) as client:
        _detail(client.post("/v1/reward", json={"items": []}), 401, "missing authentication")
        body = b'{"items": []}'
        # A member signing as "server" with its own key: the pinned server key rejects it.
        key = load_private_key(Path(consortium.client_cfg[consortium.names[1]]["identity_key"]))
        me = consortium.enrolled()[0]  # the recipient (roster names sort as the sites do)
        headers = sign_headers(key, sender="server", method="POST", path="/v1/reward", body=body,
                               recipient=me, authority=authority_of(url))
        _detail(client.post("/v1/reward", content=body, headers=headers), 403, "bad signature")
        headers = sign_headers(key, sender="c-peer", method="POST", path="/v1/reward", body=body,
                               recipient=me, authority=authority_of(url))
        _detail(client.post("/v1/reward", content=body, headers=headers), 403, "unknown sender or bad signature")
        big = b"x" * (3 * 2**20)  # anonymous: refused from its headers, before its size
        _detail(client.post("/v1/reward", content=big), 401, "missing authentication")
