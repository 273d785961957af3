"""Finding 3 (third review): a refused roster change leaves ``roster.json`` byte for byte as it
was, over the live ``POST /v1/roster``; the server's roster and its file change together or
not at all; a server that finds an invalid roster at start names the file, the line and the
``fedmor`` command that mends it."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from sdk.cli import main as fedmor
from sdk.wire import generate_key, public_key_b64, sign_headers
from sdk.wire._auth import authority_of
from server_app._app import create_app
from server_app._settings import ServerSettings
from tests._serve import served
from tests.apps.conftest import Member, enrolled_team


def _add(url: str, ops: Member, name: str) -> httpx.Response:
    body = json.dumps({"name": name, "public_key": public_key_b64(generate_key())}).encode()
    # signed for the authority the app's settings name (its public_urls: the test client's)
    headers = sign_headers(ops.key, sender=ops.client_id, method="POST", path="/v1/roster",
                           body=body, authority=authority_of(str(ops.tc.base_url))) | {
                               "content-type": "application/json"}
    return httpx.post(url + "/v1/roster", content=body, headers=headers, timeout=30)


def test_a_refused_roster_add_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    team = enrolled_team(tmp_path, {"ops": "operator", "st-mary": "member"})
    roster = tmp_path / "roster.json"
    with served(team["ops"].tc.app) as url:
        before = roster.read_bytes()
        refused = _add(url, team["ops"], "St-Mary")
        assert refused.status_code == 409, refused.text
        assert roster.read_bytes() == before
        assert "differ only by case" in refused.json()["detail"]
        assert not list(tmp_path.glob(".roster.json.*.tmp"))  # nothing was written
        added = _add(url, team["ops"], "st-john")  # the roster still takes a valid change
        assert added.status_code == 200, added.text
    names = [c["name"] for c in json.loads(roster.read_text())["clients"]]
    assert names == ["ops", "st-mary", "st-john"]
    create_app(ServerSettings(db_path=tmp_path / "s.db", identity_key=tmp_path / "id.pem",
                              roster_file=roster))  # and the server starts on it again


def test_an_invalid_roster_at_start_names_its_line_and_the_mend(tmp_path: Path) -> None:
    roster = tmp_path / "roster.json"
    entries = [{"name": n, "public_key": public_key_b64(generate_key())}
               for n in ("st-mary", "city-bank", "St-Mary")]
    roster.write_text(json.dumps({"clients": entries}, indent=2))
    cfg = ServerSettings(db_path=tmp_path / "s.db", identity_key=tmp_path / "id.pem",
                         roster_file=roster)
    with pytest.raises(ValueError) as refused:
        create_app(cfg)
    line = next(n for n, text in enumerate(roster.read_text().splitlines(), 1)
                if '"St-Mary"' in text)
    mend = f"fedmor roster remove --roster {roster} --name St-Mary"
    assert f"roster file {roster}, line {line}: " in str(refused.value)
    assert mend in str(refused.value)
    assert fedmor(mend.split()[1:]) == 0  # the named command works on the invalid file
    create_app(cfg)
