"""The server's capture mode and the auditor role, on real processes: a server and three demo
members (the open protocol-test policy) on 127.0.0.1, with capture on, and an auditor
identity. ``fedmor audit --capture`` attacks what the server wrote; ``fedmor audit --server``
queries a member through the server within the auditor's budget."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from attacks import AuditReport
from attacks._cli import register
from fedmor_local import OPEN_POLICY, LocalConsortium
from sdk.capture import CaptureFiles
from sdk.membership import add_to_roster
from sdk.wire import generate_key, load_private_key, public_key_b64, sign_headers
from sdk.wire._auth import authority_of
from server_app import ServerSettings
from server_app._app import create_app
from tests.apps._capture_update import MEMBERS, ROUTER

AUDITOR = "privacy-officer"
BUDGET = 40


class Signed:
    """Signed requests of one enrolled identity to the server."""

    def __init__(self, http: httpx.Client, key: Any, client_id: str) -> None:
        self.http, self.key, self.client_id = http, key, client_id

    def __call__(self, method: str, path: str, payload: Any = None) -> httpx.Response:
        body = b"" if payload is None else json.dumps(payload).encode()
        headers = sign_headers(self.key, sender=self.client_id, method=method, path=path,
                               body=body, authority=authority_of(str(self.http.base_url))) | {"content-type": "application/json"}
        return self.http.request(method, path, content=body, headers=headers)


@pytest.fixture(scope="module")
def consortium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalConsortium]:
    work = tmp_path_factory.mktemp("capture")
    with LocalConsortium(
        work, 3, demo=True, policy=OPEN_POLICY, identities={AUDITOR: "auditor"},
        capture=work / "capture",
        # site-0 trains for real: one gradient step on one sample (the others send random
        # demo updates).
        updates={"site-0": "tests.apps._capture_update:single_sample_update"},
        server={"stage_deadline_s": 20.0,
                # the capture names parameters after the alignment section's router
                "alignment": {"members": MEMBERS, "router": ROUTER},
                "audit": {"query_budget": BUDGET}},
    ) as c:
        c.start()
        c.wait_enrolled()
        yield c


@pytest.fixture(scope="module")
def auditor(consortium: LocalConsortium) -> Iterator[Signed]:
    cfg = consortium.identity_cfg[AUDITOR]
    key = load_private_key(Path(cfg["identity_key"]))
    with httpx.Client(base_url=consortium.server_url, timeout=60) as http:
        resp = http.post("/v1/enroll", json={"name": AUDITOR, "token": cfg["enrollment_token"],
                                             "public_key": public_key_b64(key)})
        assert resp.status_code == 200 and resp.json()["role"] == "auditor", resp.text
        yield Signed(http, key, resp.json()["client_id"])


def _router_length() -> tuple[int, np.ndarray]:
    from sdk.router import Router, RouterConfig

    router = Router(RouterConfig(**ROUTER), MEMBERS, "capture-test")
    return router.num_params(), router.get_flat_params()


def _wait_captured(auditor: Signed, n_rounds: int) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        resp = auditor("GET", "/v1/captures")
        assert resp.status_code == 200, resp.text
        if len(resp.json()["rounds"]) >= n_rounds:
            return dict(resp.json())
        time.sleep(0.2)
    raise TimeoutError("the capture never listed the round")


def _audit(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["audit", *argv])
    return int(args.handler(args))


def test_capture_is_off_by_default_and_says_so(tmp_path: Path) -> None:
    """In-process: default settings write no capture and announce none."""
    roster = tmp_path / "roster.json"
    key = generate_key()
    token = add_to_roster(roster, name="m0", public_key=public_key_b64(key))
    cfg = ServerSettings(db_path=tmp_path / "s.db", identity_key=tmp_path / "id.pem",
                         roster_file=roster, admin_token="adm")  # type: ignore[arg-type]
    assert not cfg.capture.enabled
    with TestClient(create_app(cfg)) as tc:
        assert tc.post("/v1/enroll", json={"name": "m0", "token": token,
                                           "public_key": public_key_b64(key)}).status_code == 200
        admin = {"authorization": "Bearer adm"}
        info = tc.post("/v1/rounds", json={"kind": "rm_fedavg", "vector_length": 4,
                                             "min_clients": 1},
                       headers=admin).json()
        assert info["captured"] is False
        off = tc.get("/v1/captures", headers=admin)
        assert off.status_code == 404 and "capture mode is off" in off.json()["detail"]
    assert not any(p.name == "capture" for p in tmp_path.rglob("*"))


def test_captured_rounds_are_announced_and_audited_from_the_capture_alone(
        consortium: LocalConsortium, auditor: Signed, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    length, initial = _router_length()
    consortium.publish_router(initial)
    secagg = consortium.run_round(kind="router_secagg", vector_length=length, min_clients=3)
    assert secagg["captured"] is True
    site0 = dict(zip(consortium.names, consortium.enrolled(), strict=True))["site-0"]
    plain = consortium.run_round(kind="rm_fedavg", vector_length=length, min_clients=1,
                                 participants=[site0])
    assert plain["captured"] is True
    manifest = _wait_captured(auditor, 2)
    r1, r2 = manifest["rounds"]
    assert r1["secure_aggregation"] and r1["router_version"] == secagg["router_version"]
    assert sorted(a["kind"] for a in r1["artefacts"]) == \
        ["aggregate"] + ["masked_input"] * 3 + ["unmasking_shares"] * 3
    assert [(a["kind"], a["member"]) for a in r2["artefacts"]] == \
        [("plain_update", "site-0"), ("aggregate", None)]
    # The auditor downloads the capture over REST, file by file, and checks every sha256.
    local = tmp_path / "capture"
    for name in ["manifest.json", *(a["file"] for r in (r1, r2) for a in r["artefacts"])]:
        resp = auditor("GET", f"/v1/captures/files/{name}")
        assert resp.status_code == 200, (name, resp.text)
        (local / name).parent.mkdir(parents=True, exist_ok=True)
        (local / name).write_bytes(resp.content)
    # A path out of the capture folder never reads the server's files: sent as it is (an
    # encoded dot or slash: no client normalizes it away), it reaches the capture route,
    # which serves only what the manifest names.
    for escape in ("%2e%2e/server/server.db", "..%2Fserver%2Fserver.db"):
        escaped = auditor("GET", f"/v1/captures/files/{escape}")
        assert escaped.status_code == 404, escaped.text
        assert "'../server/server.db' is not a file of the capture" in escaped.json()["detail"]
    files = CaptureFiles.open(local)  # every file matches the manifest's sha256
    first = next(a for a in files.manifest.rounds[0].artefacts if a.kind == "masked_input")
    assert files.masked(first).size == length + 1  # the ring element, weight last
    out = tmp_path / "audit"
    assert _audit(["capture", str(local), "--out", str(out)]) == 0
    report = AuditReport.model_validate(json.loads((out / "report.json").read_text()))
    checks = {c.setting: c for c in report.checks}
    agg = checks[f"round {r1['round_id']} aggregate"]
    assert "no measurable leak" in agg.verdict, agg.verdict
    for m in MEMBERS:
        assert "no measurable leak" in checks[f"round {r1['round_id']} masked input of {m}"].verdict
    leak = checks[f"round {r2['round_id']} plain update of site-0"]
    assert leak.value >= 0.99 and leak.verdict.startswith("leaks"), leak.verdict
    assert "site-0: router update, plaintext (no secure aggregation): LEAK" in \
        capsys.readouterr().out


def test_the_auditor_reads_captures_and_queries_within_its_budget_only(
        consortium: LocalConsortium, auditor: Signed, tmp_path: Path) -> None:
    # Refused: rounds, stages, work, and the aligner's reward endpoints.
    assert auditor("POST", "/v1/rounds", {"vector_length": 4}).status_code == 403
    assert auditor("GET", "/v1/work").status_code == 403
    refused = auditor("POST", "/v1/rewards", {"items": [{"image_sha256": "0" * 64,
                                                         "prompt": "p", "response": "r"}]})
    assert refused.status_code == 403 and "aligner" in refused.json()["detail"]
    assert auditor("GET", "/v1/captures").status_code == 200
    # A member may neither read captures nor query another member as an auditor.
    ids = dict(zip(consortium.names, consortium.enrolled(), strict=True))
    member = Signed(auditor.http, load_private_key(consortium.dir / "site-2" / "identity.pem"),
                    ids["site-2"])
    assert member("GET", "/v1/captures").status_code == 403
    assert member("GET", "/v1/audit/budget").status_code == 403
    fresh = auditor("GET", "/v1/audit/budget").json()
    assert (fresh["budget"], fresh["used"], fresh["left"]) == (BUDGET, 0, BUDGET)
    # A valid body, so only the role check can refuse it.
    relayed = member("POST", "/v1/audit/members/site-1/reward", {"items": [
        {"image_sha256": "0" * 64, "prompt": "p", "response": "r"}]})
    assert relayed.status_code == 403 and "auditor" in relayed.json()["detail"], relayed.text
    from sdk.data import SynthConfig, synthesize

    synthesize(SynthConfig(seed=1, image_size=32, clients=("detail",), heldout=("color",),
                           train_pairs=8, eval_pairs=8, heldout_pairs=1, warmup_queries=0,
                           policy_train_queries=0, policy_eval_queries=0), tmp_path / "data")
    pairs = tmp_path / "data" / "clients" / "detail"
    out = tmp_path / "live"
    cfg = consortium.identity_cfg[AUDITOR]
    assert _audit(["live", "--server", consortium.server_url, "--insecure-http", "--key-file", cfg["identity_key"],
                   "--sender", auditor.client_id, "--member", "site-1",
                   "--truth-pairs", str(pairs), "--max-pairs", "8", "--out", str(out)]) == 0
    report = AuditReport.model_validate(json.loads((out / "report.json").read_text()))
    (mia,) = report.memberships
    assert mia.members == ["site-1"] and "32 scored items" in mia.setting
    # The queries reached site-1 through the broker and were logged by the capture.
    log = _wait_queries(auditor, 32)
    assert {q["member"] for q in log} == {"site-1"}
    # 32 of 40 items spent: 8 more pass, the next are refused before site-1 is asked.
    import base64
    import hashlib
    import io

    from sdk.data import load_pairs

    buf = io.BytesIO()
    load_pairs(pairs / "train")[0].image.save(buf, format="PNG")
    image = buf.getvalue()
    digest = hashlib.sha256(image).hexdigest()
    item = {"image_sha256": digest, "image_b64": base64.b64encode(image).decode(),
            "prompt": "what is shown?", "response": "a square"}
    ok = auditor("POST", "/v1/audit/members/site-1/reward", {"items": [item] * 8})
    assert ok.status_code == 200 and len(ok.json()["scores"]) == 8, ok.text
    over = auditor("POST", "/v1/audit/members/site-1/reward", {"items": [item]})
    assert over.status_code == 429 and "40" in over.json()["detail"]
    spent = auditor("GET", "/v1/audit/budget").json()
    assert (spent["used"], spent["left"]) == (BUDGET, 0)
    assert auditor("POST", "/v1/audit/members/nobody/reward",
                   {"items": [item]}).status_code == 404


def _wait_queries(auditor: Signed, n: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        manifest = auditor("GET", "/v1/captures").json()
        if manifest["n_reward_queries"] >= n:
            text = auditor("GET", f"/v1/captures/files/{manifest['reward_queries']}").text
            return [json.loads(x) for x in text.splitlines() if x.strip()]
        time.sleep(0.2)
    raise TimeoutError(f"fewer than {n} reward queries captured")


def test_retention_keeps_the_newest_rounds(tmp_path: Path) -> None:
    """``prune_capture`` (the server's ``capture.retention_rounds``): the oldest rounds' folders
    and manifest entries go, the reward-query log stays, what remains still opens."""
    from sdk.capture import CaptureMeta, RewardQuery, RoundCapture, prune_capture, write_capture

    meta = CaptureMeta(setting="aggregate", router={}, client_ids=["a", "b"], encoder_id="e",
                       client_indices=[0, 1], samples_per_client=[1, 1], tokens=1)
    before = {"w": np.zeros((2, 3), dtype=np.float32)}
    for r in (1, 2, 3):
        write_capture(tmp_path, rounds=[RoundCapture(
            round_id=r, meta=meta, before=before, aggregate={"w": np.full((2, 3), r, "f4")},
            plain_updates={"a": {"w": np.ones((2, 3), "f4")}})],
            reward_queries=[RewardQuery(image_sha256="0" * 64, prompt="p", response="y",
                                        score=0.5, member="a")])
    assert prune_capture(tmp_path, 2) == [1]
    assert prune_capture(tmp_path, 2) == []
    files = CaptureFiles.open(tmp_path)
    assert [r.round_id for r in files.manifest.rounds] == [2, 3]
    assert not (tmp_path / "round-000001").exists() and (tmp_path / "round-000003").is_dir()
    assert len(files.reward_queries()) == 3
    meta3, arrays = files.update_arrays(files.manifest.rounds[1].artefacts[1])
    assert meta3.setting == "aggregate" and float(arrays["after.w"][0, 0]) == 3.0
