"""``fedmor audit`` on clients trained another way than the default: LiRA's shadow models must
be trained with the target's own recipe, read from its checkpoint (record-level DP-SGD, model
size, LoRA adapters), or the calibration compares the target against models unlike it."""

from __future__ import annotations

from pathlib import Path

import pytest
from _attack_kit import reward_run_dir

from attacks import AuditConfig, audit_run_dir
from sdk.models import ModelSize, build_tiny_vlm
from sdk.reward import DPSettings, LoraSettings, RewardTrainingConfig


def _run_dir(root: Path, cfg: RewardTrainingConfig, size: ModelSize = "tiny") -> Path:
    """A demo-layout run directory with one client trained with ``cfg``."""
    return reward_run_dir(
        root, cfg, lambda out, corpus: build_tiny_vlm("qwen2_5_vl", out, corpus=corpus, size=size)
    )


@pytest.fixture(scope="module")
def dp_run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One client trained by DP-SGD at epsilon 8."""
    cfg = RewardTrainingConfig(
        steps=3, batch_size=4, warmup_steps=1, eval_every=0, dp=DPSettings(target_epsilon=8.0)
    )
    return _run_dir(tmp_path_factory.mktemp("dp_run"), cfg)


def _audit(run_dir: Path, out: Path) -> tuple[list[str], list[str]]:
    """Audit with two LiRA shadows, batch and all from the target's checkpoint; (the plan
    line, the shadows' lines)."""
    lines: list[str] = []
    report = audit_run_dir(
        run_dir,
        out,
        AuditConfig(max_pairs=8, shadow_models=2, capture=False),
        progress=lines.append,
    )
    assert [m.attack for m in report.memberships] == ["threshold"] * 2 + ["lira"] * 2
    plan = [line for line in lines if "LiRA with 2 shadow models" in line]
    shadows = [line for line in lines if "shadow model" in line and "trained in" in line]
    assert len(plan) == 1 and len(shadows) == 2
    return plan, shadows


def test_audit_trains_lira_shadows_with_the_targets_dp_sgd(
    dp_run_dir: Path, tmp_path: Path
) -> None:
    plan, shadows = _audit(dp_run_dir, tmp_path / "audit")
    assert "record-level DP-SGD at epsilon 8" in plan[0]
    # A full fine-tune: the shadows start from the base directory its checkpoint records.
    assert f"from the target's base {dp_run_dir / 'backbone'}" in plan[0]
    for line in shadows:
        # Each shadow's own accountant: 3 steps (the target's recorded count) at epsilon 8.
        spent = float(line.split("DP-SGD epsilon ")[1].split(")")[0])
        assert 7.0 < spent <= 8.0


def test_audit_trains_lira_shadows_of_the_targets_size_and_adapters(tmp_path: Path) -> None:
    cfg = RewardTrainingConfig(
        steps=3,
        batch_size=4,
        lr=1e-3,
        warmup_steps=1,
        eval_every=0,
        lora=LoraSettings(r=2, alpha=4),
    )
    run_dir = _run_dir(tmp_path / "run", cfg, size="small")
    plan, shadows = _audit(run_dir, tmp_path / "audit")
    base = f"qwen2_5_vl, hidden 128, from the target's base {run_dir / 'backbone'}, LoRA rank 2"
    assert f"({base}, 3 steps of 4 pairs at lr 0.001 each" in plan[0]
    assert all(f"({base}, " in line for line in shadows)
