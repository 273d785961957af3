"""``fedmor demo``: the main job, end to end on the embedded defaults.

Stage A: synthesize the heterogeneous benchmark, train one reward model per client — each on a
different VLM architecture — and print the cross-client pairwise-accuracy matrix. Everything is
written to a run directory (config, data, checkpoints, ``metrics.json``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["DemoConfig", "register", "run_demo"]


class DemoConfig(BaseModel):
    """What the demo runs; the defaults finish in minutes on 2 CPU cores."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = 0
    clients: tuple[str, ...] = ("diagram", "detail", "safety")
    architectures: tuple[str, ...] = ("qwen2_vl", "qwen2_5_vl", "llava_onevision")
    train_pairs: int = Field(default=600, ge=32)
    eval_pairs: int = Field(default=100, ge=8)
    heldout_pairs: int = Field(default=100, ge=8)
    rm_steps: int = Field(default=110, ge=1)
    rm_batch_size: int = Field(default=32, ge=2)


def run_demo(config: DemoConfig, run_dir: Path) -> dict[str, Any]:
    """Run every stage into ``run_dir``; returns the metrics also written to ``metrics.json``."""
    import torch

    from sdk.data import HELDOUT_CATEGORIES, SynthConfig, load_pairs, synthesize
    from sdk.reward import (
        RewardTrainingConfig,
        cross_accuracy,
        format_accuracy_matrix,
        train_client_reward_models,
    )

    # Two cores: intra-op threads beyond one mostly contend with the other processes.
    torch.set_num_threads(1)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(config.model_dump_json(indent=2))
    start = time.perf_counter()

    print(f"[demo] stage A: synthesizing data for clients {list(config.clients)}", flush=True)
    synthesize(
        SynthConfig(seed=config.seed, clients=config.clients, train_pairs=config.train_pairs,
                    eval_pairs=config.eval_pairs, heldout_pairs=config.heldout_pairs),
        run_dir / "data",
    )
    rm_config = RewardTrainingConfig(
        steps=config.rm_steps, batch_size=config.rm_batch_size, lr=3e-4, warmup_steps=20,
        eval_every=max(config.rm_steps // 3, 1), seed=config.seed,
    )
    print("[demo] stage A: training one reward model per client", flush=True)
    trained = train_client_reward_models(
        run_dir / "data", config.clients, config.architectures, run_dir / "reward_models",
        config=rm_config,
    )
    splits = {c: load_pairs(run_dir / "data" / "clients" / c / "eval") for c in config.clients}
    splits |= {h: load_pairs(run_dir / "data" / "heldout" / h) for h in HELDOUT_CATEGORIES}
    matrix = cross_accuracy({c: t.model for c, t in trained.items()}, splits)
    archs = {c: t.architecture for c, t in trained.items()}
    print("\n[demo] stage A: pairwise accuracy of each client's reward model (rows) on each "
          "client's eval pairs and the held-out categories (columns)")
    print(format_accuracy_matrix(matrix, archs), flush=True)

    metrics: dict[str, Any] = {
        "stage_a": {
            "architectures": archs,
            "own_accuracy": {c: matrix[c][c] for c in config.clients},
            "cross_accuracy": matrix,
            "checkpoints": {c: str(t.checkpoint) for c, t in trained.items()},
        },
        "wall_s": round(time.perf_counter() - start, 1),
    }
    (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
    print(f"\n[demo] done in {metrics['wall_s']} s; run directory: {run_dir}", flush=True)
    return metrics


def _handle(args: argparse.Namespace) -> int:
    run_dir = args.out or Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S")
    run_demo(DemoConfig(seed=args.seed), run_dir)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``fedmor demo``."""
    parser = sub.add_parser("demo", help="run the end-to-end demo on the embedded defaults")
    parser.add_argument("--out", type=Path, help="run directory (default: runs/demo-<time>)")
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(handler=_handle)
