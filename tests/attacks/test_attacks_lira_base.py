"""LiRA's shadows start from the target's own base checkpoint, at any size fedmor can load: a
LoRA reward model of each tiny architecture (one of a width no fedmor size has) is audited
from its checkpoint and recorded base, and a fully fine-tuned one whose base moved away is said to be
calibrated against random weights."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from _attack_kit import CLIENT, reward_run_dir

from attacks import AuditConfig, audit_run_dir
from attacks._errors import AttackInputError
from attacks._shadow_base import resolve_shadow_base
from attacks._summary import verdict_level
from sdk.models import ARCHITECTURES, build_tiny_vlm, get_architecture
from sdk.reward import (
    LoraSettings,
    RewardCheckpointError,
    RewardModel,
    RewardTrainingConfig,
)

LORA = RewardTrainingConfig(
    steps=3, batch_size=4, lr=1e-3, warmup_steps=1, eval_every=0, lora=LoraSettings(r=2, alpha=4)
)


def _backbone(architecture: str, out: Path, corpus: list[str], *, wide: bool) -> Path:
    """A tiny VLM; ``wide``: a language model 96 wide, a size fedmor does not build."""
    if not wide:
        return build_tiny_vlm(architecture, out, corpus=corpus)
    spec = get_architecture(architecture)
    tokenizer = spec.build_tokenizer(corpus)
    config = spec.build_config("tiny", tokenizer)
    config.text_config.hidden_size = 96
    torch.manual_seed(0)
    spec.model_class(config).save_pretrained(out)
    spec.build_processor(tokenizer).save_pretrained(out)
    return out


def _run_dir(root: Path, architecture: str, cfg: RewardTrainingConfig, *, wide: bool) -> Path:
    return reward_run_dir(
        root, cfg, lambda out, corpus: _backbone(architecture, out, corpus, wide=wide)
    )


def _audit(run_dir: Path, out: Path, **kw: object) -> tuple[list[str], list[str]]:
    lines: list[str] = []
    report = audit_run_dir(
        run_dir,
        out,
        AuditConfig(max_pairs=8, shadow_models=2, capture=False, **kw),  # type: ignore[arg-type]
        progress=lines.append,
    )
    lira = [m for m in report.memberships if m.attack == "lira"]
    assert len(lira) == 2
    assert all(
        verdict_level(m.verdict) in ("leak", "inconclusive", "no measurable leak") for m in lira
    )
    (card,) = report.summary.members
    assert card.member == CLIENT and len(card.verdicts) == 2
    plan = [line for line in lines if "LiRA with 2 shadow models" in line]
    shadows = [line for line in lines if "shadow model" in line and "trained in" in line]
    assert len(plan) == 1 and len(shadows) == 2
    return plan, shadows


@pytest.mark.parametrize("architecture", sorted(ARCHITECTURES))
def test_lira_audits_a_lora_reward_model_from_its_checkpoint_alone(
    architecture: str, tmp_path: Path
) -> None:
    wide = architecture == "llava_onevision"
    run_dir = _run_dir(tmp_path / "run", architecture, LORA, wide=wide)
    out = tmp_path / "audit"
    target = RewardModel.from_pretrained(run_dir / "reward_models" / CLIENT)
    base = resolve_shadow_base(run_dir / "reward_models" / CLIENT, target, tmp_path / "scratch")
    # An adapter checkpoint loads over its recorded (hash-checked) base, which LoRA leaves
    # untouched: the shadows start from exactly that directory.
    assert base.exact and base.path == run_dir / "backbone"
    width = 96 if wide else 64
    plan, shadows = _audit(run_dir, out)
    label = f"{architecture}, hidden {width}, from the target's base {run_dir / 'backbone'}"
    assert f"({label}, LoRA rank 2, 3 steps of 4 pairs" in plan[0], plan[0]
    assert all(f"({label}, LoRA rank 2, " in line for line in shadows)
    assert not list(out.glob("shadows-*"))  # no scratch copy is left behind
    # Without its base an adapter checkpoint cannot be audited (nor loaded): a clear error.
    shutil.rmtree(run_dir / "backbone")
    with pytest.raises(RewardCheckpointError, match="base"):
        RewardModel.from_pretrained(run_dir / "reward_models" / CLIENT)


def test_lira_says_when_a_full_fine_tune_is_calibrated_against_random_weights(
    tmp_path: Path,
) -> None:
    cfg = LORA.model_copy(update={"lora": None})
    run_dir = _run_dir(tmp_path / "run", "qwen2_5_vl", cfg, wide=False)
    plan, _ = _audit(run_dir, tmp_path / "audit")
    assert f"from the target's base {run_dir / 'backbone'}" in plan[0]
    moved = tmp_path / "moved-backbone"
    shutil.move(run_dir / "backbone", moved)
    plan, _ = _audit(run_dir, tmp_path / "audit2")
    assert "from RANDOM weights" in plan[0]
    plan, _ = _audit(run_dir, tmp_path / "audit3", shadow_base=moved)
    assert f"from the given base {moved}" in plan[0]
    other = build_tiny_vlm("qwen2_vl", tmp_path / "other")
    with pytest.raises(AttackInputError, match="is a qwen2_vl of hidden 64; the target is a"):
        _audit(run_dir, tmp_path / "audit4", shadow_base=other)
