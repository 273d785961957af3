"""What the manual shows is what the code takes: docs/deployment.md's full examples are valid
settings (the server's with its [router], a hospital's client app with its
[router_training]), and docs/reward-models.md's ``rm train`` synopsis names every option."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import tomllib

from client_app import ClientSettings
from sdk.cli import build_parser
from server_app import ServerSettings

DOCS = Path(__file__).resolve().parents[1] / "docs"
DOC = DOCS / "deployment.md"


def _block_after(heading: str) -> dict[str, object]:
    """The first ```toml block after ``heading`` in the deployment guide, parsed."""
    text = DOC.read_text()
    section = text[text.index(heading):]
    found = re.search(r"```toml\n(.*?)```", section, re.S)
    assert found, heading
    return tomllib.loads(found.group(1))


def test_the_servers_full_example_declares_its_router() -> None:
    settings = ServerSettings.model_validate(_block_after("## 3. The consortium server"))
    assert settings.router is not None
    assert settings.router.heads == ["st-mary", "st-john", "city-bank"]
    assert settings.alignment.members == settings.router.heads  # declared once, used by both


def test_the_hospitals_full_example_names_only_its_pairs() -> None:
    settings = ClientSettings.model_validate(
        _block_after("## 4. A hospital's client app (full example)"))
    assert settings.router_training is not None
    assert settings.router_training.update == "builtin" and not settings.demo


def _subparser(parser: argparse.ArgumentParser, *path: str) -> argparse.ArgumentParser:
    for name in path:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    return parser


def test_the_rm_train_synopsis_lists_every_option() -> None:
    text = (DOCS / "reward-models.md").read_text()
    synopsis = text[text.index("## Command line"):text.index("## Benchmark")]
    options = [o for a in _subparser(build_parser(), "rm", "train")._actions
               for o in a.option_strings if o.startswith("--") and o != "--help"]
    assert {"--batch-size", "--lr", "--size"} <= set(options)
    assert [o for o in options if o not in synopsis] == []
    assert "reward_head.safetensors" in text and "format_version: 2" in text
