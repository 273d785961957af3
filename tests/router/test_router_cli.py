"""``fedmor router train`` / ``eval`` on a synthesized benchmark, through the real CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import sdk.cli
from sdk.data import SynthConfig, synthesize

CLIENTS = ("detail", "safety")


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("router-cli")
    synthesize(SynthConfig(seed=0, clients=CLIENTS, train_pairs=48, eval_pairs=16,
                           heldout_pairs=8, warmup_queries=0, policy_train_queries=0,
                           policy_eval_queries=0), root / "data")
    for client in CLIENTS:
        argv = ["rm", "train", "--data", str(root / "data" / "clients" / client / "train"),
                "--out", str(root / "models" / client), "--steps", "1", "--arch", "qwen2_vl"]
        assert sdk.cli.main(argv) == 0
    return root


def _last_json(text: str) -> dict[str, object]:
    return json.loads(text.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_train_then_eval_routes_each_style_client_to_itself(
    bench: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = bench / "router"
    argv = ["router", "train", "--data", str(bench / "data"), "--clients", *CLIENTS,
            "--out", str(out), "--rounds", "40", "--pairs-per-client", "48"]
    assert sdk.cli.main(argv) == 0
    summary = _last_json(capsys.readouterr().out)
    assert summary["clients"] == list(CLIENTS) and summary["rounds"] == 40
    rounds = json.loads((out / "rounds.json").read_text())
    assert [r["survivors"] for r in rounds] == [list(CLIENTS)] * 40
    assert rounds[-1]["mean_loss"] < rounds[0]["mean_loss"]
    assert all(r["bytes_up"] > 0 for r in rounds)

    argv = ["router", "eval", str(out), "--data", str(bench / "data"),
            "--models", str(bench / "models")]
    assert sdk.cli.main(argv) == 0
    table = _last_json(capsys.readouterr().out)
    # The two style clients' prompts differ, so the router learns to tell them apart.
    assert table["routing_accuracy"] >= 0.9
    accuracy = table["accuracy"]
    assert isinstance(accuracy, dict) and set(accuracy["Router+RM"]) >= {*CLIENTS, "color"}

    # A member's own folders, in no benchmark layout: one eval folder per router output.
    own = {c: shutil.copytree(bench / "data" / "clients" / c / "eval", bench / "site" / c / "held")
           for c in CLIENTS}
    argv = ["router", "eval", str(out), "--models", str(bench / "models"),
            *[f"--pairs={c}={folder}" for c, folder in own.items()],
            f"--heldout=color={bench / 'data' / 'heldout' / 'color'}"]
    assert sdk.cli.main(argv) == 0
    mine = _last_json(capsys.readouterr().out)
    assert mine["routing_accuracy"] == table["routing_accuracy"]
    assert set(mine["accuracy"]["Router+RM"]) == {*CLIENTS, "color"}  # type: ignore[index]
    argv = ["router", "eval", str(out), "--models", str(bench / "models"),
            f"--pairs=detail={own['detail']}"]
    assert sdk.cli.main(argv) == 1
    assert "no folder for the router's output(s) safety" in capsys.readouterr().err


def test_bad_input_is_a_clear_error(bench: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["router", "train", "--data", str(bench / "data"), "--clients", "detail", "nobody",
            "--out", str(bench / "bad")]
    assert sdk.cli.main(argv) == 1
    assert "nobody" in capsys.readouterr().err
    argv = ["router", "eval", str(bench / "models"), "--data", str(bench / "data"),
            "--models", str(bench / "models")]
    assert sdk.cli.main(argv) == 1
    assert "no router checkpoint" in capsys.readouterr().err
