"""The attack benchmark's real-size row, run on the tiny architecture: the same code path (a
random-init base, a LoRA reward model, ``fedmor audit``'s threshold attack and LiRA with shadows
from the target's own base) without the real-size cost."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests._checkout import checkout_env

_BENCH = Path(__file__).resolve().parents[2] / "examples" / "benchmarks"
_VERDICTS = ("leaks", "inconclusive", "within the null band of a random attack")


def test_real_size_row_runs_alone_on_the_tiny_architecture(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(_BENCH / "attack_tables.py"), "--only", "real-size",
         "--real-size-scale", "tiny", "--real-size-members", "6", "--real-size-shadows", "2",
         "--real-size-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=600, env=checkout_env(), check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    said = done.stdout + done.stderr
    assert "not a size" not in said
    out = json.loads(done.stdout.strip().splitlines()[-1])
    row = out["real_size"]
    assert (row["architecture"], row["size"], row["dtype"]) == ("qwen2_vl", "tiny", "bfloat16")
    assert row["members"] == row["non_members"] == 6 and row["target_steps"] == 3
    # The target is an adapter checkpoint over the random-init base, as `rm train --lora` saves.
    ckpt = tmp_path / "reward_models" / "detail"
    assert (ckpt / "normalizer.json").is_file() and not (ckpt / "backbone").exists()
    attacks = [(r["attack"], r["setting"].split(", LiRA")[0]) for r in row["reports"]]
    assert sorted(a for a, _ in attacks) == ["lira", "lira", "threshold", "threshold"]
    for rep in row["reports"]:
        lo, hi = rep["auc_ci"]
        assert 0.0 <= lo <= rep["auc"] <= hi <= 1.0
        assert 0.0 < rep["null_band"][0] < 0.5 < rep["null_band"][1] < 1.0
        assert rep["verdict"].startswith(_VERDICTS), rep["verdict"]
    # One progress line per shadow, from the target's own base with its LoRA settings.
    for s in (1, 2):
        assert f"shadow model {s}/2 (qwen2_vl" in said
    assert f"from the target's base {tmp_path / 'base'}, LoRA rank 8" in said
    assert out["headline"]["mia_real_size_verdict"] in (
        "leaks", "inconclusive", "within the null band of a random attack")
