"""In-process checks of the apps (ASGI, no sockets): idempotent acks, budgets, settings, CLI,
and the exported names."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fastapi.testclient import TestClient

from client_app import ClientSettings, HashScorer
from client_app._app import create_client_app
from sdk.reward import DEFAULT_CLIP
from sdk.wire import generate_key, public_key_b64, sign_headers
from sdk.wire._auth import authority_of
from sdk.wire._rounds import encode_vector
from server_app._settings import load_settings
from tests._images import png

from .conftest import Member


def test_token_is_one_time_for_another_key(server: tuple[TestClient, list[Member]],
                                           tmp_path: Path) -> None:
    tc, _ = server
    body = {"name": "m0", "token": "x" * 10, "public_key": public_key_b64(generate_key())}
    assert tc.post("/v1/enroll", json=body).status_code == 403


def test_stage_acks_are_idempotent_and_conflicts_409(
        server: tuple[TestClient, list[Member]]) -> None:
    import numpy as np

    tc, (a, b) = server
    r = tc.post("/v1/rounds", json={"kind": "rm_fedavg", "vector_length": 3, "min_clients": 2},
                headers={"authorization": "Bearer adm"})
    assert r.status_code == 200, r.text
    path = f"/v1/rounds/{r.json()['round_id']}/stages/update"
    msg = {"payload": {"weight": 2, "vector": encode_vector(np.ones(3, np.float32))}}
    first = a.call("POST", path, msg)
    retry = a.call("POST", path, msg)
    assert first.status_code == retry.status_code == 200
    assert first.json() == retry.json()
    other = {"payload": {"weight": 3, "vector": encode_vector(np.ones(3, np.float32))}}
    conflict = a.call("POST", path, other)
    assert conflict.status_code == 409 and "different message" in conflict.json()["detail"]
    bad = b.call("POST", path, {"payload": {"weight": 1, "vector": "AAAA"}})
    assert bad.status_code == 422 and "float32" in bad.json()["detail"]
    ok = b.call("POST", path, {"payload": {"weight": 2, "vector": encode_vector(
        np.full(3, 3.0, np.float32))}})
    assert ok.status_code == 200
    info = a.call("GET", path.rsplit("/stages", 1)[0]).json()
    assert info["status"] == "finished"
    blob = a.call("GET", f"/v1/router/{info['router_version']}").content
    assert np.frombuffer(blob, "<f4").tolist() == [2.0, 2.0, 2.0]


def test_round_refused_for_unknown_participant(server: tuple[TestClient, list[Member]]) -> None:
    tc, _ = server
    r = tc.post("/v1/rounds", json={"kind": "rm_fedavg", "participants": ["c-ghost"]},
                headers={"authorization": "Bearer adm"})
    assert r.status_code == 422 and "c-ghost" in r.json()["detail"]


def _reward_call(tc: TestClient, key: Ed25519PrivateKey,
                 items: list[dict[str, Any]]) -> Any:
    body = json.dumps({"items": items}).encode()
    headers = sign_headers(key, sender="server", method="POST", path="/v1/reward", body=body,
                           recipient="c-me", authority=authority_of(str(tc.base_url)))
    return tc.post("/v1/reward", content=body, headers=headers | {
        "content-type": "application/json"})


class _Wild:
    def score(self, images: list[object], prompts: list[str], responses: list[str]) -> list[float]:
        return [100.0, float("nan")][: len(images)]


def _client_app(tmp_path: Path, key: Ed25519PrivateKey, scorer: object, **kw: object) -> TestClient:
    cfg = ClientSettings(db_path=tmp_path / "c.db", identity_key=tmp_path / "c.pem",
                         server_public_key=public_key_b64(key),  # type: ignore[arg-type]
                         public_urls=["http://testserver"], **kw)  # the test client's address
    app = create_client_app(cfg, scorer)  # type: ignore[arg-type]
    app.state.store.put("client_id", "c-me")  # as enrollment leaves it: the recipient's id
    return TestClient(app)


def test_reward_budget_rate_limit_scores_and_image_cache(tmp_path: Path) -> None:
    key = generate_key()
    image = png(8)
    digest = hashlib.sha256(image).hexdigest()
    item: dict[str, Any] = {"image_sha256": digest, "prompt": "p", "response": "r"}
    with _client_app(tmp_path, key, _Wild(), policy={"reward_budget": 3},
                     rate_limit_per_minute=100,
                     clip=2.0) as tc:
        missing = _reward_call(tc, key, [item])
        assert missing.status_code == 409 and missing.json()["missing"] == [digest]
        full = dict(item, image_b64=base64.b64encode(image).decode())
        ok = _reward_call(tc, key, [full, item])
        # Sent as scored, NaN as 0, never clipped again: the server fails the 100 (outside
        # the announced bound of 2) instead of taking it as a 2.
        assert ok.status_code == 200 and ok.json()["scores"] == [100.0, 0.0]
        lying = dict(item, image_b64=base64.b64encode(b"other").decode())
        assert _reward_call(tc, key, [lying]).status_code == 422
        # The 409 and the 422 gave their items back: 2 used, so one more fits the budget of 3.
        assert _reward_call(tc, key, [item]).status_code == 200
        over = _reward_call(tc, key, [item, item])
        assert over.status_code == 429 and "budget" in over.json()["detail"]
    with _client_app(tmp_path / "b", key, HashScorer(), rate_limit_per_minute=2) as tc:
        full = dict(item, image_b64=base64.b64encode(image).decode())
        assert [_reward_call(tc, key, [full]).status_code for _ in range(3)] == [200, 200, 429]


def test_reward_policy_windowed_budget_and_request_limits(tmp_path: Path) -> None:
    import sqlite3
    import time

    from client_app import ClientStore

    key = generate_key()
    encoded = base64.b64encode(png(8)).decode()
    digest = hashlib.sha256(png(8)).hexdigest()

    def items(*prompts: str) -> list[dict[str, Any]]:
        return [{"image_sha256": digest, "image_b64": encoded, "prompt": p, "response": f"r{i}"}
                for i, p in enumerate(prompts)]

    ClientStore(tmp_path / "c.db").close()  # the schema; then an old and a recent query
    with sqlite3.connect(tmp_path / "c.db") as db:
        db.executemany("INSERT INTO query_audit(ts, caller, query_sha256, items, item_hashes) "
                       "VALUES (?, 'server', 'q', ?, '[]')",
                       [(time.time() - 7200, 100), (time.time() - 60, 1)])
    policy = {"reward_budget": 3, "reward_window": "hour", "max_items_per_prompt": 2,
              "max_items_per_request": 4}
    with _client_app(tmp_path, key, HashScorer(), policy=policy) as tc:
        same = _reward_call(tc, key, items("p", "p", "p"))
        assert same.status_code == 403 and "max_items_per_prompt" in same.json()["detail"]
        many = _reward_call(tc, key, items("a", "b", "c", "d", "e"))
        assert many.status_code == 403 and "max_items_per_request" in many.json()["detail"]
        # 100 items two hours ago are out of the window, 1 a minute ago is in: 2 more fit.
        assert _reward_call(tc, key, items("a", "b")).status_code == 200
        over = _reward_call(tc, key, items("c"))
        assert over.status_code == 429 and "3 of 3 items used in the last hour" in \
            over.json()["detail"]
    with _client_app(tmp_path / "off", key, None, policy={"serve_rewards": False}) as tc:
        off = _reward_call(tc, key, items("a"))
        assert off.status_code == 403 and "does not serve reward queries" in off.json()["detail"]


class _WildBounded(_Wild):
    clip = 1.5  # as a trained scorer's normalizer declares its bound c


def test_the_clip_bound_comes_from_the_scorer_unless_set(tmp_path: Path) -> None:
    key = generate_key()
    full = {"image_sha256": hashlib.sha256(png(8)).hexdigest(), "prompt": "p", "response": "r",
            "image_b64": base64.b64encode(png(8)).decode()}
    for name, scorer, clip, expected in [("own", _WildBounded(), None, 1.5),
                                         ("override", _WildBounded(), 2.5, 2.5),
                                         ("none", _Wild(), None, DEFAULT_CLIP)]:
        with _client_app(tmp_path / name, key, scorer, clip=clip) as tc:
            assert tc.app.state.service.clip == expected  # type: ignore[attr-defined]
            assert _reward_call(tc, key, [full]).json()["scores"] == [100.0]  # not clipped


def test_settings_file_with_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "client.toml"
    path.write_text('name = "hospital-a"\nport = 9500\n[policy]\nreward_budget = 10\n')
    monkeypatch.setenv("FEDMOR_CLIENT_PORT", "9600")
    cfg = load_settings(ClientSettings, path)
    assert (cfg.name, cfg.port, cfg.policy.reward_budget) == ("hospital-a", 9600, 10)
    with pytest.raises(ValueError, match="typo"):
        ClientSettings(typo=1)  # type: ignore[call-arg]


def test_cli_keys_and_roster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sdk.cli import build_parser

    parser = build_parser()
    key = tmp_path / "k.pem"
    args = parser.parse_args(["keys", "new", "--out", str(key)])
    assert args.handler(args) == 0
    public = capsys.readouterr().out.strip()
    roster = tmp_path / "roster.json"
    # The operator takes the member's public key, never its identity file.
    args = parser.parse_args(["roster", "add", "--roster", str(roster), "--name", "h1",
                              "--public-key-file", str(key)])
    with pytest.raises(ValueError, match="holds a private key"):
        args.handler(args)
    (tmp_path / "h1.pub").write_text(public + "\n")
    args = parser.parse_args(["roster", "add", "--roster", str(roster), "--name", "h1",
                              "--public-key-file", str(tmp_path / "h1.pub")])
    assert args.handler(args) == 0
    assert "enrollment token" in capsys.readouterr().out
    # one key is one identity: the same public key under a second name is refused
    args = parser.parse_args(["roster", "add", "--roster", str(roster), "--name", "job",
                              "--public-key", public, "--role", "aligner"])
    with pytest.raises(ValueError, match="same public key"):
        args.handler(args)
    args = parser.parse_args(["keys", "new", "--out", str(tmp_path / "job.pem")])
    assert args.handler(args) == 0
    job_public = capsys.readouterr().out.strip()
    args = parser.parse_args(["roster", "add", "--roster", str(roster), "--name", "job",
                              "--public-key", job_public, "--role", "aligner"])
    assert args.handler(args) == 0
    assert "job (aligner)" in capsys.readouterr().out
    args = parser.parse_args(["roster", "list", "--roster", str(roster), "--json"])
    args.handler(args)
    listed = json.loads(capsys.readouterr().out)
    assert [(e["name"], e["role"], e["public_key"]) for e in listed] == [
        ("h1", "member", public), ("job", "aligner", job_public)]
    # an existing name is refused unless --replace (which a running server treats as a new
    # identity): never a silent re-key
    args = parser.parse_args(["roster", "add", "--roster", str(roster), "--name", "h1",
                              "--public-key", public])
    with pytest.raises(ValueError, match="--replace"):
        args.handler(args)
    with pytest.raises(ValueError, match="exists"):
        args = parser.parse_args(["keys", "new", "--out", str(key)])
        args.handler(args)




def test_reward_input_the_model_refuses_is_a_422(tmp_path: Path) -> None:
    from sdk.models import build_tiny_vlm
    from sdk.reward import ClientScorer, RewardModel, ScoreNormalizer

    model = RewardModel.from_backbone(
        build_tiny_vlm("qwen2_vl", tmp_path / "vlm", corpus=["a red square", "p", "r"]))
    scorer = ClientScorer(model, ScoreNormalizer.fit([0.0, 1.0, 2.0]))
    key = generate_key()
    image = png(8)
    item = {"image_sha256": hashlib.sha256(image).hexdigest(), "prompt": "p",
            "image_b64": base64.b64encode(image).decode()}
    with _client_app(tmp_path, key, scorer) as tc:
        assert _reward_call(tc, key, [dict(item, response="a red square")]).status_code == 200
        empty = _reward_call(tc, key, [dict(item, response="")])
        assert empty.status_code == 422
        assert "response" in empty.json()["detail"]
