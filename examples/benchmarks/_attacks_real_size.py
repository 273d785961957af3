"""The attack benchmark's real-size row: membership inference on a LoRA reward model of a
random-init real-size backbone, audited the way ``fedmor audit`` audits a run directory.

The row builds a one-member run directory in the demo's layout:

- ``base/``: a randomly initialised backbone of the architecture's published size
  (``build_tiny_vlm(..., size="real")`` in bfloat16, as examples/benchmarks/real_size.py);
- ``reward_models/detail/``: a LoRA adapter checkpoint trained with ``fedmor rm train
  --backbone base --lora``'s recipe (default LoRA settings, AdamW at lr 3e-4; batch 2, no
  warm-up, one epoch over the members), with its fitted normalizer;
- ``data/clients/detail/{train,eval}``: the members (every training pair) and as many
  non-members.

Then :func:`attacks.audit_run_dir` runs the threshold attack (raw and normalized margins) and
LiRA, whose shadows start from the target's own base and train with the LoRA settings and
recipe its checkpoint records (attacks._shadow_base, attacks._audit_lira), one progress line
per shadow. With a few dozen items the AUC interval is wide: "inconclusive" is the expected,
honest verdict unless the model memorises strongly.

``size="tiny"`` runs the same code path on the tiny architecture (the test's).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from sdk.models import BuildSize

__all__ = ["REAL_SIZE_ARCH", "real_size_membership"]

REAL_SIZE_ARCH = "qwen2_vl"  # 9 image tokens per image: the cheapest real size to train here
_CLIENT = "detail"
WeightType = Literal["float32", "bfloat16", "float16"]  # a torch dtype, by name


def _run_dir(root: Path, arch: str, size: BuildSize, members: int, dtype: WeightType) -> Path:
    """The synthetic pairs and the random-init base; the base's directory."""
    import torch

    from sdk.data import SynthConfig, synthesize
    from sdk.models import build_tiny_vlm

    synthesize(SynthConfig(clients=(_CLIENT,), heldout=(), train_pairs=members,
                           eval_pairs=members, warmup_queries=0, policy_train_queries=0,
                           policy_eval_queries=0), root / "data")
    return build_tiny_vlm(arch, root / "base", size=size, dtype=getattr(torch, dtype))


def _train_target(root: Path, base: Path, runtime: Any) -> dict[str, Any]:
    """The member's LoRA reward model: one epoch at batch 2 over its training pairs."""
    from sdk.data import load_pairs
    from sdk.reward import LoraSettings, RewardModel, RewardTrainingConfig, train_reward_model

    train = load_pairs(root / "data" / "clients" / _CLIENT / "train")
    config = RewardTrainingConfig(batch_size=2, warmup_steps=0, lora=LoraSettings(),
                                  eval_every=0)
    model = RewardModel.from_backbone(base, lora=config.lora, runtime=runtime)
    result = train_reward_model(model, train, [], config,
                                out_dir=root / "reward_models" / _CLIENT, progress=False)
    return {"steps": result.steps, "train_s": round(result.wall_s, 1),
            "params": sum(p.numel() for n, p in model.backbone.named_parameters()
                          if "lora_" not in n)}


def real_size_membership(
    root: Path,
    *,
    arch: str = REAL_SIZE_ARCH,
    size: BuildSize = "real",
    members: int = 16,
    shadows: int = 2,
    dtype: WeightType = "bfloat16",
    device: str = "cpu",
    n_boot: int = 1000,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Build, train and audit the row in ``root``; its JSON figures (``reports``: one summary
    row per attack and view, each with AUC, 95% interval, null band and verdict)."""
    from attacks import AuditConfig, audit_run_dir
    from sdk.models import Runtime

    start, load_before = time.perf_counter(), os.getloadavg()[0]
    runtime = Runtime(device=device, dtype=dtype, gradient_checkpointing=True)
    base = _run_dir(root, arch, size, members, dtype)
    say(f"[attacks real-size] {arch} ({size}) base built in {time.perf_counter() - start:.0f} s")
    target = _train_target(root, base, runtime)
    say(f"[attacks real-size] target: {target['params'] / 1e9:.2f}B parameters, LoRA, "
        f"{target['steps']} steps of 2 pairs in {target['train_s']:.0f} s")
    config = AuditConfig(max_pairs=members, shadow_models=shadows, n_boot=n_boot,
                         capture=False, runtime=runtime)
    report = audit_run_dir(root, root / "audit", config,
                           progress=lambda m: say(f"[attacks real-size] {m}"))
    return {
        "architecture": arch,
        "size": size,
        "dtype": dtype,
        "device": device,
        "params": target["params"],
        "members": members,
        "non_members": members,
        "target_steps": target["steps"],
        "batch_size": 2,
        "shadow_models": shadows,
        "reports": [r.summary_row() for r in report.memberships],
        "seconds": round(time.perf_counter() - start, 1),
        # The machine is shared: the 1-minute load average before and after the row.
        "load_avg": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "machine_cores": len(os.sched_getaffinity(0)),
    }
