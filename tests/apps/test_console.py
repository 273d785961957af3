"""The operator console over REST (in-process): a signed operator mints a one-time login
link, the link opens one session cookie (HttpOnly, SameSite=Strict, Secure over TLS), a used
or expired link is refused, other roles cannot mint one, and the page escapes what other
parties wrote (tests/apps/test_console_chromium.py renders it in a browser)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from sdk.wire import generate_key, public_key_b64
from tests.apps.conftest import Member, enrolled_team

ROLES = {"m0": "member", "m1": "member", "ops": "operator", "job": "aligner",
         "audit": "auditor"}
HOSTILE = "<script>alert('x')</script><img src=x onerror=alert(1)>\"'&"


class Clock:
    """A clock the test moves (the console's logins read it instead of the wall clock)."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _consortium(tmp_path: Path, base_url: str = "http://testserver",
                **settings: Any) -> tuple[TestClient, dict[str, Member], Clock]:
    who = enrolled_team(tmp_path, ROLES, base_url=base_url, clip_bound=2.5, **settings)
    tc = who["ops"].tc
    clock = Clock(1_000_000.0)
    logins = getattr(tc.app.state, "console", None)  # type: ignore[attr-defined]
    if logins is not None:  # the console is enabled
        logins.clock = clock
    return tc, who, clock


@pytest.fixture
def console(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, Member], Clock]]:
    tc, who, clock = _consortium(tmp_path)
    with tc:
        yield tc, who, clock


def _mint(who: Member) -> str:
    resp = who.call("POST", "/v1/console/links")
    assert resp.status_code == 200, resp.text
    path = str(resp.json()["path"])
    assert re.fullmatch(r"/console/login/[0-9a-f]{64}", path), path
    return path


def test_a_link_opens_one_session_and_the_page_behind_it(
        console: tuple[TestClient, dict[str, Member], Clock]) -> None:
    tc, who, clock = console
    assert tc.get("/console").status_code == 401  # no session yet: a page saying how
    link = _mint(who["ops"])
    opened = tc.get(link, follow_redirects=False)
    assert opened.status_code == 303 and opened.headers["location"] == "/console"
    cookie = opened.headers["set-cookie"]
    attributes = {a.strip().split("=")[0].lower() for a in cookie.split(";")[1:]}
    assert {"httponly", "path", "max-age", "samesite"} <= attributes, cookie
    assert "samesite=strict" in cookie.lower() and "path=/console" in cookie.lower()
    assert "max-age=3600" in cookie.lower()
    assert "secure" not in attributes  # plain http here: a Secure cookie would never return
    page = tc.get("/console")
    assert page.status_code == 200, page.text
    for header, value in (("content-security-policy", "default-src 'self'"),
                          ("x-frame-options", "DENY"), ("cache-control", "no-store")):
        assert value in page.headers[header]
    for section in ("members", "rounds", "router", "alignment", "capture"):
        assert f'<section id="{section}">' in page.text, section
    assert '<meta http-equiv="refresh" content="10">' in page.text
    assert "<script" not in page.text and "http://" not in page.text.replace(
        "http://www.w3.org/2000/svg", "")  # no script, nothing fetched from elsewhere
    css = tc.get("/console/assets/console.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    # The link is spent: a second opening is refused, and says why.
    again = tc.get(link, follow_redirects=False)
    assert again.status_code == 403 and "used already" in again.text
    # The session ends after console.session_s, and on sign-out.
    clock.now += 3601
    assert tc.get("/console").status_code == 401
    clock.now -= 3601
    assert tc.get("/console").status_code == 200
    assert tc.post("/console/logout").status_code == 200
    tc.cookies.clear()
    assert tc.get("/console").status_code == 401


def test_an_expired_link_is_refused(console: tuple[TestClient, dict[str, Member], Clock]
                                    ) -> None:
    tc, who, clock = console
    link = _mint(who["ops"])
    clock.now += 61  # console.link_ttl_s is 60
    refused = tc.get(link, follow_redirects=False)
    assert refused.status_code == 403 and "expired" in refused.text
    assert "set-cookie" not in refused.headers
    assert tc.get("/console/login/" + "0" * 64).status_code == 403  # never minted


@pytest.mark.parametrize("name", ["m0", "job", "audit"])
def test_only_an_operator_identity_mints_a_link(
        console: tuple[TestClient, dict[str, Member], Clock], name: str) -> None:
    tc, who, _ = console
    refused = who[name].call("POST", "/v1/console/links")
    assert refused.status_code == 403
    assert "operator role" in refused.json()["detail"] and ROLES[name] in refused.json()["detail"]
    admin = tc.post("/v1/console/links", headers={"authorization": "Bearer adm"})
    assert admin.status_code == 403 and "signed operator" in admin.json()["detail"]
    assert tc.post("/v1/console/links").status_code == 401  # unsigned


def test_a_revoked_operator_loses_its_session(
        console: tuple[TestClient, dict[str, Member], Clock]) -> None:
    tc, who, _ = console
    tc.get(_mint(who["ops"]))
    assert tc.get("/console").status_code == 200
    assert tc.post("/v1/members/ops/revoke", headers={"authorization": "Bearer adm"}
                   ).status_code == 200
    assert tc.get("/console").status_code == 401


def test_the_cookie_is_secure_over_tls(tmp_path: Path) -> None:
    tc, who, _ = _consortium(tmp_path, base_url="https://testserver")
    with tc:
        opened = tc.get(_mint(who["ops"]), follow_redirects=False)
        assert opened.status_code == 303
        assert "secure" in {a.strip().lower() for a in opened.headers["set-cookie"].split(";")}
        assert tc.get("/console").status_code == 200


def test_the_console_can_be_switched_off(tmp_path: Path) -> None:
    tc, who, _ = _consortium(tmp_path, console={"enabled": False})
    with tc:
        refused = who["ops"].call("POST", "/v1/console/links")
        assert refused.status_code == 404 and "disabled" in refused.json()["detail"]
        assert tc.get("/console").status_code == 404


def test_what_other_parties_wrote_is_escaped(
        console: tuple[TestClient, dict[str, Member], Clock]) -> None:
    """A member's refusal detail (free text it sends) and a roster name that escaped the
    name pattern (an older store, an edited database) reach the page as text, never markup."""
    tc, who, _ = console
    store = tc.app.state.store  # type: ignore[attr-defined]
    store.upsert_roster(HOSTILE, public_key_b64(generate_key()), None)
    opened = who["ops"].call("POST", "/v1/rounds", {"vector_length": 4, "min_clients": 2})
    assert opened.status_code == 200, opened.text
    round_id = opened.json()["round_id"]
    refused = who["m1"].call("POST", f"/v1/rounds/{round_id}/refusal",
                             {"reason": "kind", "detail": HOSTILE})
    assert refused.status_code == 200, refused.text
    tc.get(_mint(who["ops"]))
    page = tc.get("/console").text
    assert "<script>" not in page and "<img" not in page
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" \
           "&#34;&#39;&amp;" in page
    # the name (members and DP tables) and the refusal detail (members table, and the rounds
    # table's column of who left)
    assert page.count("&lt;script&gt;") == 4
    # In attributes (data-value JSON, single-quoted) no quote or bracket survives either.
    assert "data-name='\"\\u003cscript\\u003ealert(\\u0027x\\u0027)" in page


def test_the_router_section_groups_versions_by_lineage(tmp_path: Path) -> None:
    import numpy as np

    from sdk.wire import ConsortiumRouterConfig

    small = {"encoder": {"dim": 8}, "router": {"input_dim": 8, "d_model": 8, "num_layers": 1,
                                               "num_heads": 2, "dim_feedforward": 8}}
    first = ConsortiumRouterConfig.model_validate({**small, "heads": ["m0", "m1"]})
    second = first.model_copy(update={"heads": ["m0", "m1", "m2"]})
    tc, who, _ = _consortium(tmp_path, router=first)
    admin = {"authorization": "Bearer adm"}
    with tc:
        body = np.zeros(first.num_params, dtype="<f4").tobytes()
        assert tc.post("/v1/router", content=body, headers=admin).status_code == 200
        assert tc.post("/v1/router/lineage", json=ConsortiumRouterConfig.model_validate(
            second.model_dump()).model_dump(mode="json"), headers=admin).status_code == 200
        assert tc.post("/v1/router/rollback", json={"version": 2},
                       headers=admin).status_code == 200
        assert tc.post("/v1/members/m1/revoke", json={"reason": "left"},
                       headers=admin).status_code == 200
        assert tc.get(_mint(who["ops"]), follow_redirects=False).status_code == 303
        page = tc.get("/console").text
    router = page.split('<section id="router">')[1].split("</section>")[0]
    assert router.index("lineage 2") < router.index("lineage 1")  # newest lineage first
    assert router.count('class="tag">latest') == 1  # the current lineage's newest only
    latest_row = router.split('data-version=\'3\'')[1].split("</tr>")[0]
    assert "latest" in latest_row and "restored version 2" in latest_row
    assert "carried over from version 1" in router and "published" in router
    assert "1 of 3 heads (masked: m1: revoked, m2: not enrolled)" in page


def test_a_members_refused_start_and_restart_are_on_the_page(
        console: tuple[TestClient, dict[str, Member], Clock]) -> None:
    tc, who, _ = console
    refused = "not started: [router_training] pairs_dir: not found <b>"
    assert who["m1"].call("POST", "/v1/identity/status", {"problem": refused}).status_code == 204
    assert who["m1"].call("POST", "/v1/identity/status",
                          {"problem": "two\nlines"}).status_code == 422  # one line only
    for _ in range(2):  # a first start, then a restart
        assert who["m0"].call("POST", "/v1/identity/status", {}).status_code == 204
    tc.get(_mint(who["ops"]))
    page = tc.get("/console").text
    assert "not started: [router_training] pairs_dir: not found &lt;b&gt;" in page
    assert page.count("restarted ") == 1
