"""``fedmor policy prepare``: the starting policy from a local checkpoint, loadable as it is or
after the supervised warm-up (whose steps change the weights and are recorded)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from sdk.cli import main
from sdk.models import load_vlm


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(folder / "model.safetensors")


def test_prepare_copies_or_warms_up_the_base(base_policy: Path, data_dir: Path,
                                             tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    plain, warm = tmp_path / "plain", tmp_path / "warm"
    assert main(["policy", "prepare", "--base", str(base_policy), "--out", str(plain)]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["warmup"] is None
    assert main(["policy", "prepare", "--base", str(base_policy), "--out", str(warm),
                 "--warmup", str(data_dir / "policy" / "warmup"), "--warmup-steps", "2",
                 "--label-noise", "0.4", "-q"]) == 0
    record = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert record["warmup"]["steps_done"] == 2
    assert record["warmup"]["config"]["label_noise"] == 0.4
    base, same, trained = _weights(base_policy), _weights(plain), _weights(warm)
    assert all(torch.equal(base[k], same[k]) for k in base)  # no warm-up: the base as it was
    assert any(not torch.equal(base[k], trained[k]) for k in base)
    load_vlm(warm)  # what `fedmor align --policy` reads
    # an existing folder is never overwritten
    assert main(["policy", "prepare", "--base", str(base_policy), "--out", str(plain)]) == 1
    assert "exists" in capsys.readouterr().err


def test_a_tiny_base_is_recorded_by_what_it_is(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A ``--tiny`` base lives in a folder deleted after the command: prepared.json names the
    architecture and seed instead of a path that no longer exists."""
    out = tmp_path / "tiny"
    assert main(["policy", "prepare", "--tiny", "qwen2_5_vl", "--seed", "3", "--out",
                 str(out), "-q"]) == 0
    record = json.loads((out / "prepared.json").read_text())
    assert record["base"] == "tiny qwen2_5_vl (random weights, seed 3)"
    capsys.readouterr()

