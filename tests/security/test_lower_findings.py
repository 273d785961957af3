"""Finding 8 (the lower ones): a non-finite round parameter is a 422, not a 500; reward URLs
are https (no ``file:``); enrollment and signature refusals do not tell a caller which names or
ids exist; the docs UI (CDN JavaScript) is off while ``/openapi.json`` stays."""

from __future__ import annotations

import hashlib
import json
import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from client_app import ClientSettings, HashScorer
from client_app._app import create_client_app
from fedmor_local import free_port
from fedmor_local._pki import make_pki
from sdk.cli import main
from sdk.membership import add_to_roster
from sdk.secagg import DPConfig
from sdk.serving import ConflictError
from sdk.wire import RewardAnswer, RewardItem, generate_key, public_key_b64, sign_headers
from sdk.wire._auth import authority_of
from server_app import Store
from tests._checkout import checkout_env
from tests.apps.conftest import Member, enrolled_team
from tests.security.conftest import enroll_new

ADMIN = {"authorization": "Bearer adm", "content-type": "application/json"}


@pytest.mark.parametrize("value", ["Infinity", "-Infinity", "NaN"])
def test_a_non_finite_round_parameter_is_422(server: tuple[TestClient, list[Member]],
                                             value: str) -> None:
    tc, _ = server
    for kind in ("router_secagg", "rm_fedavg"):
        body = f'{{"kind": "{kind}", "vector_length": 4, "params": {{"clip_range": {value}}}}}'
        r = tc.post("/v1/rounds", content=body, headers=ADMIN)
        assert r.status_code == 422, r.text
        assert "finite" in r.json()["detail"]
    assert tc.get("/v1/rounds", headers=ADMIN).json() == []  # nothing was created


@pytest.mark.parametrize("key", ["update", "dp"])
def test_deeply_nested_round_parameters_are_422(server: tuple[TestClient, list[Member]],
                                                key: str) -> None:
    """JSON nested a few hundred levels deep (a few kB) is a 422 naming the bound, not the
    parameter check's RecursionError (a 500); ``update`` is passed through unread by every
    kind, so the schema's check is the only one that walks it."""
    tc, _ = server
    value: object = 1.0
    for _ in range(400):
        value = {"a": value}
    r = tc.post("/v1/rounds", json={"vector_length": 4, "params": {key: value}}, headers=ADMIN)
    assert r.status_code == 422, r.text
    assert "nest at most" in r.json()["detail"]
    assert tc.get("/v1/rounds", headers=ADMIN).json() == []  # nothing was created


def test_a_noise_multiplier_past_the_accountants_range_is_422(
        server: tuple[TestClient, list[Member]]) -> None:
    """A noise multiplier so small the RDP accountant divides by zero is a 422 naming it, not
    the accountant's ZeroDivisionError (a 500)."""
    tc, _ = server
    r = tc.post("/v1/rounds", json={"vector_length": 4,
                                    "params": {"dp": {"noise_multiplier": 1e-200}}},
                headers=ADMIN)
    assert r.status_code == 422 and "noise_multiplier" in r.json()["detail"], r.text
    assert _rows(tc) == []


def test_a_target_epsilon_past_the_accountants_range_is_refused_where_it_is_read() -> None:
    """The noise search for a target epsilon of 1e20 never ends (a round request holding its
    thread and a core): the DP terms refuse it when they are parsed, before any search."""
    with pytest.raises(ValidationError, match="target_epsilon"):
        DPConfig(target_epsilon=1e20)


@pytest.mark.parametrize("url", ["file:///etc/passwd", "http://10.0.0.1:9443",
                                 "https://user:pw@host", "ftp://host/", "https://"])
def test_a_bad_reward_url_is_refused(server: tuple[TestClient, list[Member]], url: str) -> None:
    tc, _ = server
    resp, _ = enroll_new(tc, "pushy", reward_url=url)
    assert resp.status_code == 422 and "reward_url must be an https URL" in resp.json()["detail"]
    resp, _ = enroll_new(tc, "pushy", reward_url="https://member.example:9443")
    assert resp.status_code == 200, resp.text  # the token was not spent by the refusals


def test_enrollment_refusals_do_not_name_the_roster(server: tuple[TestClient, list[Member]],
                                                    caplog: pytest.LogCaptureFixture) -> None:
    tc, _ = server
    assert enroll_new(tc, "site-x")[0].status_code == 200
    answers = []
    with caplog.at_level(logging.WARNING, logger="fedmor.server"):
        for name, token in (("nobody", "token-nobody"), ("m0", "wrong-token"),
                            ("site-x", "token-site-x")):  # unknown, wrong token, key mismatch
            r = tc.post("/v1/enroll", json={"name": name, "token": token,
                                            "public_key": public_key_b64(generate_key())})
            answers.append((r.status_code, r.json()["detail"]))
    assert len(set(answers)) == 1 and answers[0][0] == 403
    assert "nobody" not in answers[0][1] and "m0" not in answers[0][1]
    assert "not in the roster" in caplog.text  # the operator still sees why


def test_unknown_sender_and_bad_signature_look_the_same(
        server: tuple[TestClient, list[Member]]) -> None:
    tc, (a, _) = server
    answers = []
    for sender in (a.client_id, "c-nobody"):
        for now in (None, 0.0):  # a stale timestamp must not tell the two apart either
            headers = sign_headers(generate_key(), sender=sender, method="GET",
                                   path="/v1/rounds", body=b"", now=now,
                                   authority=authority_of(str(tc.base_url)))
            r = tc.get("/v1/rounds", headers=headers)
            answers.append((r.status_code, r.json()["detail"]))
    assert set(answers) == {(403, "unknown sender or bad signature")}


def test_docs_ui_is_off_and_openapi_stays(server: tuple[TestClient, list[Member]],
                                          tmp_path: Path) -> None:
    tc, _ = server
    client = TestClient(create_client_app(ClientSettings(
        db_path=tmp_path / "c.db", identity_key=tmp_path / "c.pem"), HashScorer()))
    for app in (tc, client):
        assert app.get("/docs").status_code == 404 and app.get("/redoc").status_code == 404
        assert app.get("/openapi.json").status_code == 200
    on = TestClient(create_client_app(ClientSettings(
        db_path=tmp_path / "d.db", identity_key=tmp_path / "d.pem", docs_ui=True),
        HashScorer()))
    assert on.get("/docs").status_code == 200


# -- second review, finding 5 ----------------------------------------------------------------


def _rows(tc: TestClient) -> list[tuple[object, ...]]:
    return tc.app.state.store.read("SELECT round_id, status FROM rounds")  # type: ignore[attr-defined,no-any-return]


@pytest.mark.parametrize("params", [
    {"clip_range": 1e308}, {"degree": 2**63}, {"threshold": 2**63}, {"router_round": 2**63},
    {"router_round": -1}, {"update": [1]}])
def test_an_unusable_round_parameter_is_refused_at_creation(
        server: tuple[TestClient, list[Member]], params: dict[str, object]) -> None:
    tc, _ = server
    r = tc.post("/v1/rounds", json={"kind": "router_secagg", "vector_length": 4,
                                    "params": params}, headers=ADMIN)
    assert r.status_code == 422, r.text
    assert next(iter(params)) in r.json()["detail"]
    assert _rows(tc) == []  # no round, open or failed


def test_a_refused_round_creation_writes_no_row(server: tuple[TestClient, list[Member]]) -> None:
    tc, _ = server
    # Passes the schema, refused by the kind when it builds the round's server half.
    r = tc.post("/v1/rounds", json={"kind": "router_secagg", "vector_length": 4,
                                    "params": {"threshold": 5}}, headers=ADMIN)
    assert r.status_code == 422 and "cannot start round" in r.json()["detail"], r.text
    assert _rows(tc) == []


@pytest.mark.parametrize("url", [
    "https://169.254.169.254/latest/meta-data", "https://127.0.0.1:9443", "https://localhost",
    "https://10.1.2.3", "https://192.168.0.5:8443", "https://[::1]:9443", "https://[fe80::1]",
    "https://[::ffff:127.0.0.1]", "https://100.64.0.1", "https://0.0.0.0", "https://224.0.0.1"])
def test_a_push_url_into_the_servers_network_is_refused(
        server: tuple[TestClient, list[Member]], url: str) -> None:
    # Only the refusal is checked: nothing is sent to these addresses.
    tc, _ = server
    resp, _ = enroll_new(tc, "pushy", reward_url=url)
    assert resp.status_code == 422, resp.text
    assert "loopback, link-local, private or reserved" in resp.json()["detail"]


def test_the_setting_allows_a_private_push_url(tmp_path: Path) -> None:
    from server_app import ServerSettings
    from server_app._app import create_app

    cfg = ServerSettings(db_path=tmp_path / "s.db", identity_key=tmp_path / "id.pem",
                         allow_private_reward_urls=True)
    with TestClient(create_app(cfg)) as tc:
        resp, _ = enroll_new(tc, "pushy", reward_url="https://10.1.2.3:9443")
        assert resp.status_code == 200, resp.text


def test_a_refusal_text_cannot_forge_log_lines(server: tuple[TestClient, list[Member]],
                                               caplog: pytest.LogCaptureFixture) -> None:
    tc, (a, _) = server
    rid = tc.post("/v1/rounds", json={"kind": "rm_fedavg", "vector_length": 4},
                  headers=ADMIN).json()["round_id"]
    forged = "too few samples\n2026-01-01 INFO fedmor.server: round 9 finished\x1b[2J\x1b[31m"
    with caplog.at_level(logging.INFO):
        r = a.call("POST", f"/v1/rounds/{rid}/refusal",
                   {"reason": "local_samples", "detail": forged})
    assert r.status_code == 200, r.text
    lines = [rec.getMessage() for rec in caplog.records if "refused round" in rec.getMessage()]
    assert len(lines) == 1, lines
    assert "\n" not in lines[0] and "\x1b" not in lines[0], lines[0]
    assert "round 9 finished" in lines[0]  # kept, escaped, on the one line
    stored = r.json()["refusals"][0]["detail"]
    assert "\n" not in stored and "\x1b" not in stored


def test_a_cancel_reason_cannot_forge_log_lines(server: tuple[TestClient, list[Member]],
                                                caplog: pytest.LogCaptureFixture) -> None:
    """An operator's cancel reason becomes the round's failure, logged by the server and read
    by every participant: kept on one line like a member's refusal detail."""
    tc, _ = server
    rid = tc.post("/v1/rounds", json={"kind": "rm_fedavg", "vector_length": 4},
                  headers=ADMIN).json()["round_id"]
    forged = "operator\n2026-01-01 INFO fedmor.server: round 9 finished\x1b[2J"
    with caplog.at_level(logging.INFO):
        r = tc.post(f"/v1/rounds/{rid}/cancel", json={"reason": forged}, headers=ADMIN)
    assert r.status_code == 200, r.text
    lines = [rec.getMessage() for rec in caplog.records if "failed: cancelled" in rec.getMessage()]
    assert len(lines) == 1 and "round 9 finished" in lines[0], lines
    assert "\n" not in lines[0] and "\x1b" not in lines[0], lines[0]
    assert "\n" not in r.json()["error"] and "\x1b" not in r.json()["error"]


def test_a_one_line_texts_bound_holds_for_the_text_as_stored() -> None:
    """Escaping a control character takes up to ten characters: the bound counts them, so a
    reason kept on one line stays within its declared length."""
    from sdk.wire import RoundCancel, RoundRefusal

    assert RoundRefusal(reason="dp", detail="\x1b" * 250).detail == "\\x1b" * 250  # 1000
    with pytest.raises(ValueError, match="at most 1000"):
        RoundRefusal(reason="dp", detail="\x1b" * 251)
    assert len(RoundCancel(reason="\n" * 250).reason) == 500
    with pytest.raises(ValueError, match="at most 500"):
        RoundCancel(reason="\n" * 251)


@pytest.mark.parametrize(("score", "checked"), [("1e300", True), ("Infinity", False),
                                               ("NaN", False), ("-2.5", True)])
def test_a_refused_score_is_not_stored(server: tuple[TestClient, list[Member]],
                                       score: str, checked: bool) -> None:
    tc, (a, _) = server
    store = tc.app.state.store  # type: ignore[attr-defined]
    qid = store.queue_query(a.client_id, [RewardItem(image_sha256="0" * 64, prompt="p",
                                                     response="r")]).query_id
    body = f'{{"scores": [{score}]}}'.encode()  # a's announced clip bound is 1.0
    r = a.send(f"/v1/reward/answers/{qid}", body, media="application/json")
    assert r.status_code == 422, r.text
    row = store.query(qid)
    if not checked:  # not a finite number: refused by the request schema, nothing is kept
        assert row.answer is None, row
        return
    # Outside the clip bound: the refusal alone is kept, for the broker to read, no score.
    assert row.answer == RewardAnswer(error=r.json()["detail"]), row


def test_roster_names_differing_only_by_case_are_refused(
        server: tuple[TestClient, list[Member]], tmp_path: Path) -> None:
    roster = tmp_path / "roster.json"
    add_to_roster(roster, name="St-Mary", public_key=public_key_b64(generate_key()))
    with pytest.raises(ValueError, match="differ only by case"):
        add_to_roster(roster, name="st-mary", public_key=public_key_b64(generate_key()))
    tc, _ = server
    assert enroll_new(tc, "St-Mary")[0].status_code == 200
    with pytest.raises(ConflictError):
        enroll_new(tc, "st-mary")  # the operator's roster change is refused
    names = [r.name for r in tc.app.state.store.roster()]  # type: ignore[attr-defined]
    assert "st-mary" not in names and "St-Mary" in names


def test_one_public_key_cannot_enroll_under_two_names(
        server: tuple[TestClient, list[Member]], tmp_path: Path) -> None:
    key = public_key_b64(generate_key())
    roster = tmp_path / "roster.json"
    add_to_roster(roster, name="site-a", public_key=key)
    with pytest.raises(ValueError, match="same public key"):
        add_to_roster(roster, name="site-b", public_key=key)
    tc, (a, _) = server
    store = tc.app.state.store  # type: ignore[attr-defined]
    with pytest.raises(ConflictError):  # m0's enrolled key under a second name
        store.upsert_roster("twin", store.client(a.client_id).public_key, None)
    # A roster row written before this check existed: enrollment refuses the twin all the same.
    store._write("INSERT INTO roster(name, public_key, token_sha256, role) VALUES (?,?,?,?)",
                 ("twin", store.client(a.client_id).public_key,
                  hashlib.sha256(b"token-twin").hexdigest(), "member"))
    r = tc.post("/v1/enroll", json={"name": "twin", "token": "token-twin",
                                    "public_key": store.client(a.client_id).public_key})
    assert r.status_code == 403, r.text
    assert store.client_named("twin") is None


def test_a_server_without_tls_refuses_plain_http_unless_allowed(tmp_path: Path) -> None:
    config = tmp_path / "server.json"
    config.write_text(json.dumps({"db_path": str(tmp_path / "s.db"), "port": free_port(),
                                  "identity_key": str(tmp_path / "id.pem")}))
    proc = subprocess.run([sys.executable, "-m", "server_app", "--config", str(config)],
                          capture_output=True, text=True, timeout=120, env=checkout_env())
    assert proc.returncode == 2, proc.stderr
    assert "allow_plain_http = true" in proc.stderr and str(config) in proc.stderr
    assert not (tmp_path / "s.db").exists()  # refused before anything was opened


def test_a_member_and_the_aligner_refuse_a_plain_http_server_unless_allowed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    log = logging.getLogger("fedmor")  # `fedmor client` sets up its logging: undone after
    for attr in ("handlers", "propagate", "level"):
        monkeypatch.setattr(log, attr, list(log.handlers) if attr == "handlers" else
                            getattr(log, attr))
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens: a refusal sends nothing
    config = tmp_path / "client.toml"
    settings = (f'server_url = "{url}"\nenrollment_token = "t"\ndemo = true\n'
                f'identity_key = "{tmp_path / "id.pem"}"\ndb_path = "{tmp_path / "c.db"}"\n')
    config.write_text(settings)
    assert main(["client", "--config", str(config)]) == 2  # refused before serving
    err = capsys.readouterr().err
    assert f"server_url ({config}): {url} is plain http" in err, err
    assert "allow_plain_http = true" in err
    assert not (tmp_path / "c.db").exists() and not (tmp_path / "id.pem").exists()
    config.write_text(settings + "allow_plain_http = true\n")
    assert main(["client", "check", "--config", str(config)]) == 1  # now it dials: no answer
    out = capsys.readouterr().out
    assert "plain http" not in out and f"{url} cannot be reached" in out, out
    # fedmor align: the operator commands' refusal, before it enrolls or loads anything.
    job = ["align", "--server", url, "--identity", str(tmp_path / "a.pem"), "--token", "t",
           "--policy", str(tmp_path / "policy"), "--queries", str(tmp_path / "q"),
           "--out", str(tmp_path / "out")]
    assert main(job) == 1
    err = capsys.readouterr().err
    assert f"server {url} is plain http" in err and "--insecure-http" in err, err
    assert main([*job, "--insecure-http"]) == 1  # past the check: the missing queries
    err = capsys.readouterr().err
    assert "plain http" not in err and str(tmp_path / "q") in err, err


def _console_team(tmp_path: Path, **settings: Any) -> dict[str, Member]:
    team = enrolled_team(tmp_path, {"ops": "operator"}, **settings)
    return team


def test_the_console_cookie_is_secure_whenever_tls_is_on(tmp_path: Path) -> None:
    _, cert, key = make_pki(tmp_path / "pki")
    ops = _console_team(tmp_path, tls_cert=cert, tls_key=key)["ops"]
    link = ops.call("POST", "/v1/console/links").json()["path"]
    # the request names http (a proxy, a test client): the cookie is Secure all the same
    opened = ops.tc.get(link, follow_redirects=False)
    assert opened.status_code == 303
    assert "secure" in {a.strip().lower() for a in opened.headers["set-cookie"].split(";")}


def test_console_logout_refuses_a_foreign_origin(tmp_path: Path) -> None:
    ops = _console_team(tmp_path)["ops"]
    tc = ops.tc
    assert tc.get(ops.call("POST", "/v1/console/links").json()["path"]).status_code == 200
    foreign = tc.post("/console/logout", headers={"origin": "https://evil.example"})
    assert foreign.status_code == 403
    assert tc.get("/console").status_code == 200  # the session lives on
    own = tc.post("/console/logout", headers={"origin": "http://testserver"})
    assert own.status_code == 200
    assert tc.get("/console").status_code == 401


def test_one_members_signed_requests_leave_a_bounded_wal(tmp_path: Path) -> None:
    """Each signed request commits its nonce (at least one 64 KiB page in the log): after a
    checkpoint the -wal file is cut back to its limit however many came."""
    store = Store(tmp_path / "s.db")
    wal = tmp_path / "s.db-wal"
    for i in range(400):  # one member's many requests: ~25 MiB of log frames
        assert store.use_nonce("c-hostile", f"nonce-{i:04d}", time.time(), keep_s=600)
    grown = wal.stat().st_size
    store.checkpoints.request()
    assert store.checkpoints.wait_idle()
    store.use_nonce("c-hostile", "after", time.time(), keep_s=600)  # resets the log
    assert grown > 16 * 2**20 >= wal.stat().st_size, (grown, wal.stat().st_size)
