"""``fedmor audit`` on a client whose reward model was trained with record-level DP-SGD: LiRA's
shadow models must be trained with the target's own DP-SGD settings, read from its checkpoint,
or the calibration compares a noisy model against noiseless shadows."""

from __future__ import annotations

from pathlib import Path

import pytest

from attacks import AuditConfig, audit_run_dir
from sdk.data import SynthConfig, load_pairs, synthesize
from sdk.models import build_tiny_vlm
from sdk.reward import (
    DPSettings,
    RewardModel,
    RewardTrainingConfig,
    pair_texts,
    train_reward_model,
)

CLIENT = "detail"


@pytest.fixture(scope="module")
def dp_run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A demo-layout run directory with one client trained by DP-SGD at epsilon 8."""
    root = tmp_path_factory.mktemp("dp_run")
    synthesize(
        SynthConfig(
            seed=1,
            image_size=32,
            clients=(CLIENT,),
            heldout=("color",),
            train_pairs=16,
            eval_pairs=8,
            heldout_pairs=1,
            warmup_queries=0,
            policy_train_queries=0,
            policy_eval_queries=0,
        ),
        root / "data",
    )
    train = load_pairs(root / "data" / "clients" / CLIENT / "train")
    backbone = build_tiny_vlm("qwen2_5_vl", root / "backbone", corpus=pair_texts(train))
    cfg = RewardTrainingConfig(
        steps=3, batch_size=4, warmup_steps=1, eval_every=0, dp=DPSettings(target_epsilon=8.0)
    )
    train_reward_model(
        RewardModel.from_backbone(backbone),
        train,
        [],
        cfg,
        out_dir=root / "reward_models" / CLIENT,
        progress=False,
    )
    return root


def test_audit_trains_lira_shadows_with_the_targets_dp_sgd(dp_run_dir: Path, tmp_path: Path) -> None:
    lines: list[str] = []
    report = audit_run_dir(
        dp_run_dir,
        tmp_path / "audit",
        AuditConfig(max_pairs=8, shadow_models=2, shadow_batch_size=4, capture=False),
        progress=lines.append,
    )
    assert [m.attack for m in report.memberships] == ["threshold"] * 2 + ["lira"] * 2
    plan = [line for line in lines if "LiRA with 2 shadow models" in line]
    assert len(plan) == 1 and "record-level DP-SGD at epsilon 8" in plan[0]
    shadows = [line for line in lines if "shadow model" in line and "trained in" in line]
    assert len(shadows) == 2
    for line in shadows:
        # Each shadow's own accountant: 3 steps (the target's recorded count) at epsilon 8.
        spent = float(line.split("DP-SGD epsilon ")[1].split(")")[0])
        assert 7.0 < spent <= 8.0
