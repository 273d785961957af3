"""Benchmark: one reward model per client, each on a different VLM architecture.

Synthesizes the heterogeneous preference benchmark (sdk.data), trains a Bradley-Terry reward
model per client (architectures cycle qwen2_vl, qwen2_5_vl, llava_onevision), then prints the
cross-client pairwise-accuracy matrix: rows = client reward models, columns = every client's
eval pairs and the held-out categories. The last stdout line is one JSON object with
``headline`` = {own_accuracy, architectures, cross_accuracy, wall_s}.

    .venv/bin/python examples/benchmarks/reward_models.py --quick   # 3 clients, ~2 min
    .venv/bin/python examples/benchmarks/reward_models.py           # 5 clients, <= 15 min
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from _scratch import scratch_dir

from sdk.data import HELDOUT_CATEGORIES, SynthConfig, load_pairs, synthesize
from sdk.models import ARCHITECTURES
from sdk.reward import (
    RewardTrainingConfig,
    cross_accuracy,
    format_accuracy_matrix,
    train_client_reward_models,
)

QUICK_CLIENTS = ("diagram", "detail", "safety")
FULL_CLIENTS = ("diagram", "position", "poster", "detail", "safety")
ARCH_ORDER = tuple(ARCHITECTURES)  # every supported architecture, cycled over the clients


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 clients, fewer pairs and steps")
    parser.add_argument("--out", type=Path, help="work directory, kept (default: a temporary one, removed at exit)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clients", nargs="+", help="override the client list")
    parser.add_argument("--steps", type=int, help="override the training steps per client")
    parser.add_argument("--architectures", nargs="+", choices=sorted(ARCHITECTURES),
                        help="override the architectures, cycled over the clients")
    args = parser.parse_args(argv)

    clients = tuple(args.clients or (QUICK_CLIENTS if args.quick else FULL_CLIENTS))
    train_pairs, eval_pairs, heldout_pairs = (600, 100, 100) if args.quick else (2000, 200, 200)
    # Twice the steps the slowest client, position, needs to learn its task (docs/data.md).
    steps = args.steps or (110 if args.quick else 400)
    root = scratch_dir("fedmor-rm-bench-", args.out)
    start = time.perf_counter()

    print(f"[bench] synthesizing data for {list(clients)} into {root / 'data'}", flush=True)
    synthesize(SynthConfig(seed=args.seed, clients=clients, train_pairs=train_pairs,
                           eval_pairs=eval_pairs, heldout_pairs=heldout_pairs,
                           warmup_queries=0, policy_train_queries=0, policy_eval_queries=0),
               root / "data")
    config = RewardTrainingConfig(steps=steps, batch_size=32, lr=3e-4, warmup_steps=20,
                                  eval_every=max(steps // 3, 1), seed=args.seed)
    archs_cycle = tuple(args.architectures or ARCH_ORDER)
    trained = train_client_reward_models(root / "data", clients, archs_cycle, root / "models",
                                         config=config)
    train_wall = time.perf_counter() - start

    print("[bench] evaluating the cross-client matrix", flush=True)
    splits = {c: load_pairs(root / "data" / "clients" / c / "eval") for c in clients}
    splits |= {h: load_pairs(root / "data" / "heldout" / h) for h in HELDOUT_CATEGORIES}
    matrix = cross_accuracy({c: t.model for c, t in trained.items()}, splits)
    wall = time.perf_counter() - start
    archs = {c: t.architecture for c, t in trained.items()}

    print(format_accuracy_matrix(matrix, archs))
    for client, item in trained.items():
        print(f"[bench] {client}: {item.architecture}, train {item.result.wall_s:.1f} s, "
              f"{item.result.steps} steps, own eval accuracy {matrix[client][client]:.3f}")
    print(f"[bench] wall time {wall:.1f} s (training incl. data {train_wall:.1f} s)")
    target = 0.75 if args.quick else 0.85
    own = {c: matrix[c][c] for c in clients}
    summary = {
        "benchmark": "reward_models",
        "mode": "quick" if args.quick else "full",
        "headline": {
            "own_accuracy": own,
            "architectures": archs,
            "cross_accuracy": matrix,
            "wall_s": round(wall, 1),
        },
        "targets": {
            "own_accuracy_min": target,
            "own_accuracy_met": all(v >= target for v in own.values()),
            "detail_on_safety_below_half": (
                matrix["detail"]["safety"] < 0.5 if {"detail", "safety"} <= set(clients)
                else None
            ),
        },
        "steps_per_client": steps,
        "train_pairs_per_client": train_pairs,
        "train_wall_s": {c: round(t.result.wall_s, 1) for c, t in trained.items()},
        "machine_cores": len(__import__("os").sched_getaffinity(0)),
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
