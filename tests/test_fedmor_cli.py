import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

import sdk.cli
from sdk import __version__
from sdk.cli import ENTRY_POINT_GROUP, build_parser, command_targets, main
from tests._checkout import checkout_env


def test_version_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"fedmor {__version__}"


def test_no_command_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: fedmor" in capsys.readouterr().out


def test_console_script_is_installed() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "sdk.cli", "--help"], capture_output=True, text=True, check=True
    )
    assert "Federated Mixture-of-Rewards" in out.stdout
    assert build_parser().prog == "fedmor"


ROOT = Path(__file__).resolve().parents[1]


def test_cli_names_no_package_above_sdk() -> None:
    source = Path(sdk.cli.__file__).read_text()
    for upper in ("server_app", "client_app", "attacks"):
        assert upper not in source


def test_cli_groups_come_from_the_entry_point_table() -> None:
    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"][
        ENTRY_POINT_GROUP]
    # Installed metadata (after ``pip install -e .``) or, before it, the checkout's own table.
    assert command_targets() == [table[name] for name in sorted(table)]
    commands = subprocess.run([sys.executable, "-m", "sdk.cli", "--help"], capture_output=True,
                              text=True, check=True).stdout
    for command in ("server", "client", "roster", "audit", "demo", "enroll", "rounds"):
        assert f"\n  {command} " in commands
    # listed by role: the operator's commands under the operator's heading
    operator = commands.split("\noperator:\n", 1)[1].split("\n\n", 1)[0].split(":\n", 1)[0]
    for command in ("server", "roster", "members", "rounds", "router"):
        assert f"\n  {command} " in "\n" + operator


HEAVY = ("torch", "transformers", "fastapi")


@pytest.mark.parametrize(("argv", "shows"), [
    (["rounds", "--help"], "usage: fedmor rounds"),
    (["router", "history", "--help"], "usage: fedmor router history"),
    (["keys", "new", "--help"], "usage: fedmor keys new"),
    (["audit", "--help"], "usage: fedmor audit"),
    (["rm", "--help"], "usage: fedmor rm"),
    (["policy", "--help"], "usage: fedmor policy"),
    (["client", "policy", "show"], "reward queries:"),  # runs: reads the client's settings
    (["--help"], "usage: fedmor"),  # every group's parser, built with nothing heavy
    (["align", "--help"], "usage: fedmor align"),
], ids=["rounds-help", "router-history-help", "keys-new-help", "audit-help", "rm-help",
        "policy-help", "client-policy-show", "help", "align-help"])
def test_a_command_imports_only_what_it_uses(argv: list[str], shows: str,
                                             tmp_path: Path) -> None:
    """``fedmor <command> ...`` builds only its group's parser, and the packages it goes through
    load their heavy modules on first use: no model code (torch, transformers) and no web
    framework (fastapi) is imported for a command that does not run them, so each one starts in
    a fraction of a second."""
    code = (f"import sys\nfrom sdk.cli import main\ntry:\n    main({argv!r})\n"
            "except SystemExit:\n    pass\n"
            f"print('imported:', [m for m in {HEAVY!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path, env=checkout_env(), timeout=300)
    assert shows in out.stdout, out.stderr[-2000:]
    assert out.stdout.strip().endswith("imported: []"), out.stdout[-500:]
