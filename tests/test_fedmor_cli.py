import subprocess
import sys

import pytest

from sdk import __version__
from sdk.cli import build_parser, main


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
