"""The operator console in headless Chromium, against a real server on 127.0.0.1: ``fedmor
console`` (the CLI, signed by the operator's identity) prints a login link, Chromium opens it
(the redirect and the session cookie as a browser handles them), and every section of the
page holds the values the REST API gives the same operator. The link works once; an aligner's
identity gets no link. A screenshot of the page is kept in the test's folder (and in
``$FEDMOR_TEST_ARTEFACTS`` when set)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import uvicorn
from PIL import Image

from fedmor_local import free_port
from sdk.curves import moving_average
from sdk.membership import add_to_roster
from sdk.wire import generate_key, public_key_b64, sign_headers
from sdk.wire._auth import authority_of
from server_app import ServerSettings
from server_app._app import create_app
from tests._checkout import checkout_env
from tests._chromium import FLAGS, ensure_chromium

ROLES = {"m0": "member", "m1": "member", "ops": "operator", "job": "aligner",
         "audit": "auditor"}
ROUTER = {"d_model": 16, "num_layers": 1, "num_heads": 2, "dim_feedforward": 32}
STEPS = 24


@dataclass
class Caller:
    """Signed requests as one enrolled identity."""

    http: httpx.Client
    key: Any
    client_id: str
    key_file: Path

    def call(self, method: str, path: str, payload: Any = None, *,
             raw: bytes | None = None) -> httpx.Response:
        body = raw if raw is not None else b"" if payload is None else json.dumps(
            payload).encode()
        headers = sign_headers(self.key, sender=self.client_id, method=method, path=path,
                               body=body, authority=authority_of(str(self.http.base_url)))
        headers["content-type"] = "application/octet-stream" if raw is not None \
            else "application/json"
        return self.http.request(method, path, content=body, headers=headers)

    def get(self, path: str) -> Any:
        resp = self.call("GET", path)
        assert resp.status_code == 200, resp.text
        return resp.json()


@dataclass
class Live:
    url: str
    who: dict[str, Caller]
    admin: httpx.Client


def _serve(app: Any, port: int) -> tuple[uvicorn.Server, threading.Thread]:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:  # set once the socket listens
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    return server, thread


def _router_length(members: list[str]) -> int:
    from sdk.router import HashingEncoder, Router, RouterConfig

    return Router(RouterConfig(**ROUTER), members, HashingEncoder().encoder_id).num_params()


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """A server with two members, an operator, an aligner and an auditor, two router
    versions (a publication and a rollback), a round one member refused, capture mode on and
    STEPS feedback steps from the aligner, each with its mean reward and KL."""
    tmp = tmp_path_factory.mktemp("console")
    roster = tmp / "roster.json"
    keys = {name: generate_key() for name in ROLES}
    tokens = {n: add_to_roster(roster, name=n, public_key=public_key_b64(k),
                               role=ROLES[n])  # type: ignore[arg-type]
              for n, k in keys.items()}
    cfg = ServerSettings(db_path=tmp / "s.db", identity_key=tmp / "id.pem", roster_file=roster,
                         admin_token="adm",  # type: ignore[arg-type]
                         alignment={"router": ROUTER},  # type: ignore[arg-type]
                         capture={"enabled": True, "dir": tmp / "capture"},  # type: ignore[arg-type]
                         preload_dp_accountant=False, port=(port := free_port()))
    server, thread = _serve(create_app(cfg), port)
    url = f"http://127.0.0.1:{port}"
    http = httpx.Client(base_url=url, timeout=120)
    who = {}
    for name, key in keys.items():
        body: dict[str, Any] = {"name": name, "token": tokens[name],
                                "public_key": public_key_b64(key)}
        if ROLES[name] == "member":
            body["clip_bound"] = {"m0": 2.5, "m1": 4.0}[name]
        resp = http.post("/v1/enroll", json=body)
        assert resp.status_code == 200, resp.text
        key_file = tmp / f"{name}.pem"
        from sdk.wire._auth import write_private_key

        write_private_key(key, key_file)
        who[name] = Caller(http, key, resp.json()["client_id"], key_file)
    ops, length = who["ops"], _router_length(["m0", "m1"])
    start = np.random.default_rng(0).normal(0, 0.02, length).astype("<f4")
    assert ops.call("POST", "/v1/router", raw=start.tobytes()).status_code == 200
    assert ops.call("POST", "/v1/router/rollback", {"version": 1}).status_code == 200
    opened = ops.call("POST", "/v1/rounds", {"kind": "rm_fedavg", "vector_length": length,
                                             "min_clients": 2, "stage_deadline_s": 3600})
    assert opened.status_code == 200, opened.text
    refused = who["m1"].call("POST", f"/v1/rounds/{opened.json()['round_id']}/refusal",
                             {"reason": "kind", "detail": "this site sends masked updates only"})
    assert refused.status_code == 200, refused.text
    rng = np.random.default_rng(1)
    for step in range(1, STEPS + 1):  # a rising, noisy reward; KL growing from 0
        fb = {"step": step, "loss": float(0.5 - 0.01 * step + rng.normal(0, 0.02)),
              "run": "run-a", "reward": float(-1 + 0.06 * step + rng.normal(0, 0.3)),
              "kl": float(0.002 * step + abs(rng.normal(0, 0.001)))}
        ack = who["job"].call("POST", "/v1/rewards/feedback", fb)
        assert ack.status_code == 200 and ack.json()["applied"], ack.text
    admin = httpx.Client(base_url=url, timeout=60, headers={"authorization": "Bearer adm"})
    yield Live(url, who, admin)
    server.should_exit = True
    thread.join(timeout=60)
    http.close()
    admin.close()


def _console_link(live: Live, name: str) -> subprocess.CompletedProcess[str]:
    """``fedmor console --json`` as identity ``name``."""
    caller = live.who[name]
    return subprocess.run(
        [sys.executable, "-m", "sdk.cli", "console", "--server", live.url, "--insecure-http", "--key-file",
         str(caller.key_file), "--sender", caller.client_id, "--json"],
        capture_output=True, text=True, timeout=300, env=checkout_env())


class _Cells(HTMLParser):
    """Rows (``tr`` with a class) as {field: data-value JSON}, and attributes of a few tags."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[str, dict[str, Any]]] = []
        self.sections: list[str] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "section" and a.get("id"):
            self.sections.append(str(a["id"]))
        if tag == "tr" and a.get("class"):
            self.rows.append((str(a["class"]), {}))
        if tag == "td" and a.get("data-field") and self.rows:
            self.rows[-1][1][str(a["data-field"])] = json.loads(str(a["data-value"]))
        if tag in ("polyline", "p", "meta", "link", "script", "img"):
            self.tags.append((tag, a))

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [fields for cls, fields in self.rows if cls == kind]


def _chromium(chromium: str, url: str, profile: Path, *extra: str) -> str:
    done = subprocess.run([chromium, *FLAGS, f"--user-data-dir={profile}", *extra, url],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.fixture(scope="module")
def chromium() -> str:
    return ensure_chromium()


def _shows_router_versions(page: _Cells, listed: list[dict[str, Any]]) -> None:
    """Router versions, newest first, as GET /v1/router/versions lists them."""
    versions = listed[::-1]
    assert len(versions) == 2
    def origin(v: dict[str, Any]) -> str:  # the words for the REST fields of its origin
        if v["round_id"] is not None:
            return f"round {v['round_id']}"
        if v.get("restored") is not None:
            return f"restored version {v['restored']}"
        if v.get("carried_from") is not None:
            return f"carried over from version {v['carried_from']}"
        return "published"

    assert page.of("version") == [{"origin": origin(v)} | {
        k: v[k] for k in ("version", "length", "size_bytes", "sha256")} for v in versions]
    assert [row["origin"] for row in page.of("version")] == ["restored version 1", "published"]


def _shows_alignment(page: _Cells, ops: Caller) -> None:
    """The newest steps as GET /v1/rewards/progress has them, moving averages of the raw
    trace, and a chart of both curves over every step."""
    progress = ops.get("/v1/rewards/progress")
    assert [p["step"] for p in progress] == list(range(1, STEPS + 1))
    reward_avg = moving_average([p["reward"] for p in progress])
    rows = page.of("step")
    assert [r["step"] for r in rows] == list(range(STEPS, STEPS - len(rows), -1))
    for row in rows:
        p = progress[row["step"] - 1]
        assert (row["reward"], row["kl"], row["loss"], row["feedback"]) == (
            p["reward"], p["kl"], p["loss"], p["feedback"])
        assert row["reward_avg"] == pytest.approx(reward_avg[row["step"] - 1], rel=1e-12)
    lines = [a for t, a in page.tags if t == "polyline"]
    assert [a["class"] for a in lines] == ["raw", "average", "raw", "average"]
    assert all(len(str(a["points"]).split()) == STEPS for a in lines)
    stats = ops.get("/v1/rewards/stats")
    assert [json.loads(str(a["data-step"])) for t, a in page.tags
            if t == "p" and a.get("class") == "stats"] == [stats["step"]]


def test_the_console_in_chromium_shows_what_the_rest_api_says(
        live: Live, chromium: str, tmp_path: Path) -> None:
    made = _console_link(live, "ops")
    assert made.returncode == 0, made.stderr
    link = json.loads(made.stdout.strip().splitlines()[-1])
    assert link["url"].startswith(f"{live.url}/console/login/")
    dom = _chromium(chromium, link["url"], tmp_path / "profile", "--dump-dom")
    page = _Cells()
    page.feed(dom)
    assert page.sections == ["members", "rounds", "router", "alignment", "capture"]
    assert not [t for t, _ in page.tags if t in ("script", "img")]
    assert [a["href"] for t, a in page.tags if t == "link"] == ["/console/assets/console.css"]
    ops = live.who["ops"]

    # Members: every field as GET /v1/members has it (members make no requests meanwhile).
    rest = {m["name"]: m for m in ops.get("/v1/members")}
    shown = {row["name"]: row for row in page.of("member")}
    assert set(shown) == {"m0", "m1"}
    for name, row in shown.items():
        for field in ("role", "state", "last_seen", "clip_bound", "reward_items_24h",
                      "epsilon_spent", "rounds"):
            assert row[field] == rest[name][field], (name, field)
    assert (shown["m0"]["clip_bound"], shown["m1"]["clip_bound"]) == (2.5, 4.0)
    assert (shown["m0"]["refusals"], shown["m1"]["refusals"]) == (0, 1)
    others = {row["name"]: row["role"] for row in page.of("identity")}
    assert others == {n: rest[n]["role"] for n in ("ops", "job", "audit")}
    assert "this site sends masked updates only" in dom  # the refusal's rule, in words

    # Rounds, as GET /v1/rounds gives them to the operator.
    rounds = {r["round_id"]: r for r in ops.get("/v1/rounds")}
    shown_rounds = page.of("round")
    assert [r["round_id"] for r in shown_rounds] == sorted(rounds, reverse=True)
    for row in shown_rounds:
        r = rounds[row["round_id"]]
        for field in ("kind", "status", "stage", "participants", "dropouts", "router_version"):
            assert row[field] == r[field], field
        assert row["refusals"] == [f["client_id"] for f in r["refusals"]]
        assert row["epsilon"] == (r["dp"]["epsilon"] if r["dp"] else None)
    assert shown_rounds[0]["refusals"] == [live.who["m1"].client_id]
    assert {row["name"]: row["epsilon_spent"] for row in page.of("epsilon")} == {
        n: rest[n]["epsilon_spent"] for n in ("m0", "m1")}

    _shows_router_versions(page, ops.get("/v1/router/versions"))
    _shows_alignment(page, ops)

    # Capture: on, with what GET /v1/captures (the auditor's or the admin's) lists.
    manifest = live.admin.get("/v1/captures").json()
    state = [a for t, a in page.tags if t == "p" and a.get("class") == "capture-state"]
    assert [(s["data-enabled"], json.loads(str(s["data-rounds"])),
             json.loads(str(s["data-queries"]))) for s in state] == [
        ("true", len(manifest["rounds"]), manifest["n_reward_queries"])]

    # The link was spent by that visit: opened again, it shows the refusal, not the console.
    again = _chromium(chromium, link["url"], tmp_path / "profile-2", "--dump-dom")
    assert "used already" in again and 'id="members"' not in again


# Colours only the console itself paints (console.css, _console/_chart.py): the green of an
# enrolled member's or a finished round's tag, and the reward chart's average line. The message
# page (a spent or unknown link) shares the stylesheet but has neither.
_ENROLLED_TAG = (0xda, 0xfb, 0xe1)
_CHART_AVERAGE = (0x05, 0x50, 0xae)


def _painted(image: np.ndarray, rgb: tuple[int, int, int]) -> int:
    """Pixels of exactly the colour ``rgb`` in an (H, W, 3) screenshot."""
    return int(np.all(image == np.asarray(rgb, dtype=image.dtype), axis=-1).sum())


def _screenshot(chromium: str, url: str, profile: Path, shot: Path) -> np.ndarray:
    _chromium(chromium, url, profile, f"--screenshot={shot}", "--window-size=1400,2400",
              "--hide-scrollbars")
    image = np.asarray(Image.open(shot).convert("RGB"))
    assert image.shape == (2400, 1400, 3)
    return image


def test_the_console_screenshot_reads(live: Live, chromium: str, tmp_path: Path) -> None:
    link = live.who["ops"].call("POST", "/v1/console/links").json()["path"]
    shot = tmp_path / "console.png"
    image = _screenshot(chromium, live.url + link, tmp_path / "profile", shot)
    # The link worked: the console's tables and chart are drawn, not the message page.
    assert _painted(image, _ENROLLED_TAG) > 200 and _painted(image, _CHART_AVERAGE) > 50
    assert image.std() > 10  # text and tables, not a blank or single-colour page
    # The same link again opens the message page ("used already"), which the colours tell apart.
    spent = _screenshot(chromium, live.url + link, tmp_path / "profile-2",
                        tmp_path / "spent.png")
    assert _painted(spent, _ENROLLED_TAG) == 0 and _painted(spent, _CHART_AVERAGE) == 0
    if os.environ.get("FEDMOR_TEST_ARTEFACTS"):
        out = Path(os.environ["FEDMOR_TEST_ARTEFACTS"])
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, out / "console.png")


def test_fedmor_console_prints_a_link_that_opens_one_session(live: Live) -> None:
    """(Without a browser: runs where Chromium is missing too.)"""
    caller = live.who["ops"]
    made = subprocess.run(
        [sys.executable, "-m", "sdk.cli", "console", "--server", live.url + "/", "--insecure-http", "--key-file",
         str(caller.key_file), "--sender", caller.client_id],
        capture_output=True, text=True, timeout=300, env=checkout_env())
    assert made.returncode == 0, made.stderr
    head, url = made.stdout.strip().splitlines()[-2:]
    assert head.startswith("operator console login link (opens one session; expires in ")
    assert url.startswith(f"{live.url}/console/login/")
    with httpx.Client(timeout=60) as browser:
        page = browser.get(url, follow_redirects=True)
        assert page.status_code == 200 and '<section id="members">' in page.text
        assert browser.get(url).status_code == 403


def test_fedmor_console_refuses_an_aligner(live: Live) -> None:
    """(Each role's 403 over REST: tests/apps/test_console.py.)"""
    refused = _console_link(live, "job")
    assert refused.returncode != 0
    assert "403" in refused.stderr and "operator role" in refused.stderr
