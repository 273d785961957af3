"""What a user reads when a command or a settings file is wrong: the file, the line, the
setting and the fix, in a sentence (not a parser's internals, not the top-level usage)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from client_app import ClientSettings
from fedmor_local import free_port
from sdk.cli import main
from sdk.ops import Connection, OperatorClient
from sdk.serving import load_settings
from server_app import ServerSettings


def test_a_misspelt_setting_names_the_file_the_line_and_the_key(tmp_path: Path) -> None:
    path = tmp_path / "server.toml"
    path.write_text("port = 8000\nstage_deadlin_s = 5\n\n[alignment]\nmax_itms = 3\n")
    with pytest.raises(ValueError) as err:
        load_settings(ServerSettings, path)
    text = str(err.value)
    assert text.startswith(f"{path}: ")
    assert "line 2: stage_deadlin_s: unknown setting (did you mean 'stage_deadline_s'?)" in text
    assert "line 5: [alignment] max_itms: unknown setting (did you mean 'max_items'?)" in text
    assert "pydantic" not in text and "extra_forbidden" not in text


def test_a_retired_member_setting_says_what_replaces_it(tmp_path: Path) -> None:
    path = tmp_path / "client.toml"
    path.write_text('name = "st-mary"\nupdate_source = "site_code:update"\n')
    said = f"{path}: line 2: update_source: no longer a setting: use [router_training]"
    with pytest.raises(ValueError, match=f"^{re.escape(said)}"):
        load_settings(ClientSettings, path)


def test_a_toml_syntax_error_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "server.toml"
    path.write_text("port = 8000\nhost = \n")
    with pytest.raises(ValueError, match=rf"^{path}: not valid TOML: .*line 2"):
        load_settings(ServerSettings, path)


def test_a_json_file_that_is_not_an_object_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "server.json"
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match=rf"^{path}: not a table of settings"):
        load_settings(ServerSettings, path)


def test_fedmor_server_refuses_a_bad_file_without_a_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "server.toml"
    path.write_text("stage_deadline_s = -1\n")
    assert main(["server", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: line 1: stage_deadline_s:" in err and "you wrote -1" in err
    assert "Traceback" not in err


def test_an_unknown_round_option_points_to_param(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["rounds", "open", "router_secagg", "--threshold", "3"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "usage: fedmor rounds open" in err  # the command's usage, not the top level's
    assert "--param threshold=3" in err


def test_options_are_not_abbreviated(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["rounds", "open", "router_secagg", "--min-client", "3"])
    assert "did you mean --min-clients?" in capsys.readouterr().err


def test_the_round_parameter_error_lists_what_an_operator_sets() -> None:
    from sdk.rounds import SecAggRoundParams

    with pytest.raises(ValueError) as err:
        SecAggRoundParams.parse({"thresh": 3})
    listed = str(err.value).split("router_secagg params: ")[1]
    assert "dp" in listed.split(", ") and "threshold" in listed
    for internal in ("update", "router_round", "quantization",
                     "graph_seed"):
        assert internal not in listed


def test_a_server_that_is_down_without_wait_says_how_to_wait() -> None:
    port = free_port()  # a port nothing listens on
    with pytest.raises(ValueError) as err:
        OperatorClient(Connection(server=f"http://127.0.0.1:{port}",
                                  insecure_http=True)).wait_healthy(0)
    assert "within 0 s" not in str(err.value) and "--wait SECONDS" in str(err.value)


def test_no_profile_names_the_profiles_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FEDMOR_CONFIG_DIR", str(tmp_path / "conf"))
    assert main(["members", "list"]) == 1
    assert str(tmp_path / "conf" / "profiles.toml") in capsys.readouterr().err


def test_the_used_link_page_says_the_servers_link_lifetime() -> None:
    from server_app._console._page import message_page

    page = message_page("login link refused", "used", 120.0)
    assert "for 120 s" in page and "for a minute" not in page


def test_a_live_audit_checks_the_shadow_base_before_spending_budget(tmp_path: Path) -> None:
    """The member's reward_config.json names a base that is not on the auditor's host: the
    audit stops naming --shadow-base before it opens a connection (the server here is a port
    nothing listens on, so any query would fail differently)."""
    import json

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from attacks import AttackError, AuditConfig
    from attacks._live_audit import audit_live_member

    config = tmp_path / "reward_config.json"
    config.write_text(json.dumps({"architecture": "qwen2_vl", "hidden_size": 32, "lora": None,
                                  "backbone": {"source": str(tmp_path / "gone")}}))
    for split in ("train", "eval"):
        (tmp_path / "pairs" / split).mkdir(parents=True)
    port = free_port()  # a port nothing listens on
    with pytest.raises(AttackError, match="--shadow-base"):
        audit_live_member(f"http://127.0.0.1:{port}", Ed25519PrivateKey.generate(),
                          caller_id="auditor", member="st-mary", pairs_dir=tmp_path / "pairs",
                          out_dir=tmp_path / "out", config=AuditConfig(shadow_models=2),
                          target_config=config)


def test_a_refused_roster_file_change_names_the_file_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``fedmor roster add|remove --roster FILE`` refused: one sentence naming the file (no
    pydantic dump, which would also print the roster's token hashes), and the file unchanged."""
    from sdk.wire import generate_key, public_key_b64

    roster, key = tmp_path / "roster.json", public_key_b64(generate_key())
    assert main(["roster", "add", "--roster", str(roster), "--name", "a", "--public-key",
                 key]) == 0
    before = roster.read_bytes()
    capsys.readouterr()
    for name in ("b", "b c"):  # the same key under a second name; a name the roster refuses
        assert main(["roster", "add", "--roster", str(roster), "--name", name,
                     "--public-key", key]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"fedmor: error: cannot add {name!r} to roster file {roster}: ")
        assert len(err.splitlines()) == 1 and "pydantic" not in err, err
        assert roster.read_bytes() == before
    for text in ("{", "[]"):  # not JSON; JSON but not a roster
        roster.write_text(text)
        assert main(["roster", "remove", "--roster", str(roster), "--name", "a"]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"fedmor: error: roster file {roster} is not a valid roster"), err
        assert roster.read_text() == text


def test_fedmor_align_names_its_config_file_the_line_and_the_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FEDMOR_CONFIG_DIR", str(tmp_path / "conf"))  # no profile
    job = tmp_path / "job.toml"
    argv = ["align", "--config", str(job), "--server", "http://127.0.0.1:1", "--insecure-http",
            "--identity", "id.pem", "--policy", "p", "--queries", "q", "--out", "o"]
    job.write_text("method = \"mor\"\n\n[grpo]\nstepz = 3\n")
    assert main(argv) == 1
    assert capsys.readouterr().err == (f"fedmor: error: {job}: line 4: [grpo] stepz: unknown "
                                       f"setting (did you mean 'steps'?)\n")
    job.write_text("method = \n")
    assert main(argv) == 1
    assert capsys.readouterr().err.startswith(f"fedmor: error: {job}: not valid TOML: ")


def test_a_path_the_system_refuses_is_one_line_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An operating-system error about a path the user gave (a folder given as a file, an
    output name that exists) is one line naming the path and what is wrong, not a traceback;
    a bug keeps its traceback."""
    from sdk.cli import _one_line

    folder = tmp_path / "conf"
    folder.mkdir()
    assert main(["client", "check", "--config", str(folder)]) == 1
    assert capsys.readouterr().err == f"fedmor: error: {folder}: Is a directory\n"
    taken = tmp_path / "identity.pem"
    taken.symlink_to(tmp_path / "elsewhere.pem")  # the name exists, though it leads nowhere
    assert main(["keys", "new", "--out", str(taken)]) == 1
    assert capsys.readouterr().err == f"fedmor: error: {taken}: File exists\n"
    assert not (tmp_path / "elsewhere.pem").exists()
    assert _one_line(KeyError("a bug")) is None and _one_line(TypeError("a bug")) is None
