"""Finding 8 (rounds): a member reads only the rounds it takes part in, and of those nothing of
what other members did (their refusals, dropouts, ids in a failure reason); the operator still
reads everything, and normal SecAgg rounds still complete."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from fedmor_local import LocalConsortium
from sdk.wire import Refusal, RoundInfo, load_private_key, sign_headers
from sdk.wire._auth import authority_of
from server_app._routes._rounds import member_view
from tests.security.conftest import PULL, PUSH, PUSH2, client_id


def _as(c: LocalConsortium, name: str, method: str, path: str,
        payload: object | None = None) -> httpx.Response:
    """A request signed with member ``name``'s own identity key, as its app would send it."""
    body = b"" if payload is None else json.dumps(payload).encode()
    key = load_private_key(Path(c.client_cfg[name]["identity_key"]))
    headers = sign_headers(key, sender=client_id(c, name), method=method, path=path, body=body,
                           authority=authority_of(c.server_url))
    return httpx.request(method, c.server_url + path, content=body, verify=c.verify, timeout=30,
                         headers=headers | {"content-type": "application/json"})


def _secagg(c: LocalConsortium, names: list[str]) -> int:
    return int(c.create_round(kind="router_secagg", vector_length=8, min_clients=2,
                              participants=[client_id(c, n) for n in names],
                              params={"threshold": 2})["round_id"])


def test_a_member_outside_a_round_reads_nothing_of_it(hostile: LocalConsortium) -> None:
    rid = _secagg(hostile, [PUSH, PULL])
    done = hostile.wait_round(rid)
    assert done["status"] == "finished", done  # the two participants ran it as before
    outsider = _as(hostile, PUSH2, "GET", f"/v1/rounds/{rid}")
    assert outsider.status_code == 403, outsider.text
    assert "not a participant" in outsider.json()["detail"]
    for stage in done["stages"]:
        assert _as(hostile, PUSH2, "GET", f"/v1/rounds/{rid}/stages/{stage}").status_code == 403
    listed = _as(hostile, PUSH2, "GET", "/v1/rounds")
    assert listed.status_code == 200 and rid not in [r["round_id"] for r in listed.json()]
    insider = _as(hostile, PUSH, "GET", f"/v1/rounds/{rid}")
    assert insider.status_code == 200 and insider.json()["router_version"] is not None
    assert rid in [r["round_id"] for r in _as(hostile, PULL, "GET", "/v1/rounds").json()]
    assert _as(hostile, PUSH2, "GET", "/v1/rounds/999999").status_code == 404


def test_a_member_does_not_read_another_members_refusal(hostile: LocalConsortium) -> None:
    rid = _secagg(hostile, [PUSH, PULL, PUSH2])
    secret = "site policy of site-2: no rounds during the audit (private detail)"
    refused = _as(hostile, PUSH2, "POST", f"/v1/rounds/{rid}/refusal",
                  {"reason": "kind_not_allowed", "detail": secret})
    assert refused.status_code == 200, refused.text
    done = hostile.wait_round(rid)
    assert done["status"] == "finished", done  # two of three, above the threshold
    full = json.dumps(done)
    assert secret in full  # the operator sees who refused and why
    for name in (PUSH, PULL):
        seen: dict[str, Any] = _as(hostile, name, "GET", f"/v1/rounds/{rid}").json()
        text = json.dumps(seen)
        assert secret not in text and seen["refusals"] == [], seen
        assert client_id(hostile, PUSH2) not in seen["dropouts"]
        assert seen["public_keys"] == done["public_keys"]  # what SecAgg+ needs stays
        listed = [r for r in _as(hostile, name, "GET", "/v1/rounds").json()
                  if r["round_id"] == rid]
        assert listed == [seen]
    own = _as(hostile, PUSH2, "GET", f"/v1/rounds/{rid}").json()
    assert [r["detail"] for r in own["refusals"]] == [secret]  # its own refusal it sees


def test_a_failure_reason_names_no_other_member() -> None:
    info = RoundInfo(
        round_id=1, kind="router_secagg", status="failed", stage=None, stages=["a"],
        participants=["c-me", "c-them"], public_keys=["k1", "k2"], dropouts=["c-me", "c-them"],
        vector_length=4, stage_deadline_s=1.0, params={}, min_clients=2, base_version=None,
        router_version=None, error="stage a: c-them sent a share that fails its check",
        created_at=0.0, finished_at=1.0,
        refusals=[Refusal(client_id="c-them", reason="dp_required", detail="x", at=0.0)])
    seen = member_view(info, "c-me")
    assert seen.error == "stage a: another member sent a share that fails its check"
    assert seen.dropouts == ["c-me"] and seen.refusals == []
    assert info.error is not None and "c-them" in info.error  # the original is untouched
