"""Benchmark: the federated router under secure aggregation, and the paper's Table 4.

Synthesizes the heterogeneous preference benchmark (sdk.data), trains one reward model per client
on different VLM architectures (sdk.reward), encodes every client's training responses with the
public encoder, trains the router federatedly twice from the same start (SecAgg+ and plain
FedAvg), then evaluates pairwise preference accuracy of Router+RM (each response routed
separately, normalized scores), every single client RM, AvgRM, Random selection and Router+RM
without normalization, on each client's eval pairs and on the held-out categories. Then the
secure router again, same seeds and rounds, with client-level DP at each ``--dp-epsilons``
(delta 1e-5 over the rounds): in-process, through the same distributed DP the REST rounds use
(every ``SecAggClient`` clips its delta and adds its share of the noise; uniform weights). The
last stdout line is one JSON object with a ``headline`` and a ``dp`` comparison.

    .venv/bin/python examples/benchmarks/router.py --quick   # 3 clients, small RMs
    .venv/bin/python examples/benchmarks/router.py           # 5 clients
    ... --out DIR --reuse                                    # keep / reuse data and RMs in DIR
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
from _scratch import scratch_dir

from sdk.data import HELDOUT_CATEGORIES, SynthConfig, load_pairs, synthesize
from sdk.models import ARCHITECTURES
from sdk.reward import (
    RewardModel,
    RewardTrainingConfig,
    ScoreNormalizer,
    train_client_reward_models,
)
from sdk.router import (
    Aggregator,
    Encoder,
    HashingEncoder,
    Router,
    RouterClient,
    SecureAggregator,
    Table4,
    VLMEncoder,
    default_federated_config,
    load_router_clients,
    reward_scores,
    table4,
    train_federated_router,
)
from sdk.secagg import DPConfig, SecAggConfig, dp_clip_range

QUICK_CLIENTS = ("diagram", "detail", "safety")
FULL_CLIENTS = ("diagram", "poster", "position", "detail", "safety")
ARCH_ORDER = tuple(ARCHITECTURES)  # every supported architecture, cycled over the clients


def _log(msg: str) -> None:
    print(msg, flush=True)


def _reward_models(
    root: Path, clients: tuple[str, ...], steps: int, seed: int, reuse: bool
) -> tuple[dict[str, RewardModel], dict[str, ScoreNormalizer], dict[str, str]]:
    models_dir = root / "models"
    if reuse and all((models_dir / c / "normalizer.json").is_file() for c in clients):
        _log(f"[bench] reusing reward models in {models_dir}")
        models = {c: RewardModel.from_pretrained(models_dir / c) for c in clients}
        return (
            models,
            {c: ScoreNormalizer.load(models_dir / c) for c in clients},
            {c: m.architecture for c, m in models.items()},
        )
    config = RewardTrainingConfig(
        steps=steps, batch_size=32, lr=3e-4, warmup_steps=20, eval_every=steps, seed=seed
    )
    trained = train_client_reward_models(
        root / "data", clients, ARCH_ORDER, models_dir, config=config
    )
    normalizers = {c: ScoreNormalizer.load(t.checkpoint) for c, t in trained.items()}
    return (
        {c: t.model.eval() for c, t in trained.items()},
        normalizers,
        {c: t.architecture for c, t in trained.items()},
    )


def _encoder(kind: str, root: Path, seed: int) -> Encoder:
    if kind == "hashing":
        return HashingEncoder()
    from sdk.models import build_tiny_vlm, load_vlm  # the frozen public reference VLM

    path = build_tiny_vlm("qwen2_5_vl", root / "reference-vlm", seed=seed)
    bundle = load_vlm(path)
    return VLMEncoder(bundle.model, bundle.processor)


def _dp_aggregator(epsilon: float, rounds: int, clip_norm: float) -> SecureAggregator:
    """SecAgg+ with client-level DP reaching ``epsilon`` (delta 1e-5) after ``rounds`` rounds of
    every client; the noise multiplier is resolved once (opacus' search is a numeric solve)."""
    target = DPConfig(clip_norm=clip_norm, target_epsilon=epsilon, rounds=rounds)
    dp = DPConfig(clip_norm=clip_norm, noise_multiplier=target.resolved_noise_multiplier(),
                  rounds=rounds)
    # The fewest survivors a secure round accepts (2) gives the widest noise share to fit.
    return SecureAggregator(SecAggConfig(clip_range=dp_clip_range(dp, min_survivors=2), dp=dp))


def _train_router(
    name: str | Aggregator,
    clients: list[RouterClient],
    encoder: Encoder,
    rounds: int,
    seed: int,
) -> tuple[Router, list[dict[str, float]], float]:
    start = time.perf_counter()
    router, stats = train_federated_router(
        clients, encoder, aggregation=name, config=default_federated_config(rounds, seed),
        seed=seed, log=_log,
    )
    wall = time.perf_counter() - start
    rows = [
        {
            "round": s.round,
            "survivors": len(s.survivors),
            "loss": round(s.mean_loss, 4),
            "bytes_up": s.bytes_up,
            "bytes_down": s.bytes_down,
            **({} if s.epsilon is None else {"epsilon": round(s.epsilon, 4)}),
        }
        for s in stats
    ]
    return router, rows, wall


def _dp_row(table: Table4, aggregator: SecureAggregator | None) -> dict[str, float | None]:
    """One row of the DP comparison: what the router costs in accuracy at an epsilon."""
    dp = None if aggregator is None else aggregator.dp
    return {
        "epsilon": None if dp is None else round(dp.epsilon(), 4),
        "noise_multiplier": None if dp is None else round(dp.resolved_noise_multiplier(), 4),
        "routing_accuracy": round(table.routing_accuracy, 4),
        "router_id_avg": round(table.id_avg("Router+RM"), 4),
        "router_heldout_avg": round(table.heldout_avg("Router+RM"), 4),
    }


def _train_and_score(args: argparse.Namespace, fed_clients: list[Any], encoder: Any,
                     rounds: int, id_splits: dict[str, Any], ho_splits: dict[str, Any],
                     scores: dict[str, Any]
                     ) -> tuple[dict[str, Table4], dict[str, list[dict[str, float]]],
                                dict[str, float], dict[str, Any]]:
    """The router trained by secure and plain aggregation, and by the secure one with DP at
    each of ``args.dp_epsilons``, each scored as Table 4: the tables, each run's bytes per
    round, its wall seconds, and the DP rows."""
    tables: dict[str, Table4] = {}
    comm: dict[str, list[dict[str, float]]] = {}
    walls: dict[str, float] = {}
    for name in ("secure", "plain"):
        router, comm[name], walls[name] = _train_router(
            name, fed_clients, encoder, rounds, args.seed
        )
        tables[name] = table4(router, encoder, id_splits, ho_splits, scores)
        _log(
            f"\n[bench] Table 4 with the router trained by {name} aggregation "
            f"({router.num_params()} params, {walls[name]:.1f} s):"
        )
        _log(tables[name].format())

    dp_rows = {"none": _dp_row(tables["secure"], None)}
    for epsilon in args.dp_epsilons:
        aggregator = _dp_aggregator(epsilon, rounds, args.dp_clip_norm)
        name = f"secure, DP epsilon {epsilon:g}"
        router, comm[name], walls[name] = _train_router(
            aggregator, fed_clients, encoder, rounds, args.seed
        )
        tables[name] = table4(router, encoder, id_splits, ho_splits, scores)
        _log(f"\n[bench] Table 4 with the router trained by {name} ({walls[name]:.1f} s):")
        _log(tables[name].format())
        dp_rows[f"{epsilon:g}"] = _dp_row(tables[name], aggregator)
    _log("\n[bench] DP: epsilon spent | noise multiplier | routing accuracy | Router+RM ID avg | "
         "Router+RM held-out avg")
    for key, row in dp_rows.items():
        _log(f"[bench] DP {key:>5}: {row}")
    return tables, comm, walls, dp_rows


def _summary(args: argparse.Namespace, tables: dict[str, Table4],
             comm: dict[str, list[dict[str, float]]], walls: dict[str, float],
             dp_rows: dict[str, Any], *, archs: Any, encoder: Any, encode_rate: float,
             rounds: int, router_pairs: int, wall: float) -> dict[str, Any]:
    """The benchmark's JSON line: the headline of the secure table, the targets, every table."""
    t = tables["secure"]
    headline = {
        "router_id_avg": t.id_avg("Router+RM"),
        "best_single_id_avg": t.best_single_id_avg(),
        "avgrm_id_avg": t.id_avg("AvgRM"),
        "random_id_avg": t.id_avg("Random"),
        "router_heldout_avg": t.heldout_avg("Router+RM"),
        "best_single_heldout_avg": t.best_single_heldout_avg(),
        "routing_accuracy": t.routing_accuracy,
        "no_norm_id_avg": t.id_avg("Router+RM (no norm)"),
        "secagg_minus_plain_id_avg": t.id_avg("Router+RM") - tables["plain"].id_avg("Router+RM"),
    }
    headline = {k: round(v, 4) for k, v in headline.items()}
    return {
        "benchmark": "router",
        "mode": "quick" if args.quick else "full",
        "headline": headline,
        "targets": {
            "router_beats_best_single_id_by_5pts": headline["router_id_avg"]
            >= headline["best_single_id_avg"] + 0.05,
            "router_not_below_best_single_heldout": headline["router_heldout_avg"]
            >= headline["best_single_heldout_avg"],
            "routing_accuracy_ge_0.9": headline["routing_accuracy"] >= 0.9,
            "secure_within_1pt_of_plain": abs(headline["secagg_minus_plain_id_avg"]) <= 0.01,
        },
        # The held-out average of the single RM that is best in distribution (the headline's
        # best_single_heldout_avg is the stronger oracle: the best single RM chosen on held-out).
        "best_id_single_heldout_avg": round(t.heldout_avg(t.best_single_id_method()), 4),
        "dp": {"clip_norm": args.dp_clip_norm, "delta": 1e-5, "by_epsilon": dp_rows},
        "plain_table": {m: tables["plain"].accuracy[m] for m in tables["plain"].accuracy},
        "secure_table": t.accuracy,
        "architectures": archs,
        "encoder": encoder.encoder_id,
        "encode_responses_per_s": round(encode_rate, 1),
        "router_rounds": rounds,
        "router_pairs_per_client": router_pairs,
        "router_train_wall_s": {k: round(v, 1) for k, v in walls.items()},
        "communication": comm,
        "wall_s": round(wall, 1),
        "machine_cores": len(os.sched_getaffinity(0)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 clients, fewer pairs and steps")
    parser.add_argument("--out", type=Path, help="work directory, kept (default: a temporary one, removed at exit)")
    parser.add_argument("--reuse", action="store_true", help="reuse data and RMs found in --out")
    parser.add_argument("--encoder", choices=("hashing", "vlm"), default="hashing")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rm-steps", type=int, help="override reward-model steps (smoke runs)")
    parser.add_argument("--rounds", type=int, help="override router rounds (smoke runs)")
    parser.add_argument("--train-pairs", type=int, help="override pairs per split (smoke runs)")
    parser.add_argument("--dp-epsilons", type=float, nargs="*", default=[1.0, 8.0],
                        help="client-level DP runs of the secure router (none: skip)")
    parser.add_argument("--dp-clip-norm", type=float, default=1.0,
                        help="L2 clip of a client's router delta under DP")
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    start = time.perf_counter()
    clients = QUICK_CLIENTS if args.quick else FULL_CLIENTS
    train_pairs, eval_pairs, heldout_pairs = (600, 100, 100) if args.quick else (2000, 200, 200)
    router_pairs, rounds = (300, 12) if args.quick else (600, 30)
    if args.train_pairs:
        train_pairs, eval_pairs, heldout_pairs = args.train_pairs, 20, 20
        router_pairs = min(router_pairs, train_pairs)
    rounds = args.rounds or rounds
    root = scratch_dir("fedmor-router-bench-", args.out)

    if not (args.reuse and (root / "data" / "manifest.json").is_file()):
        _log(f"[bench] synthesizing data for {list(clients)} into {root / 'data'}")
        synthesize(
            SynthConfig(
                seed=args.seed,
                clients=clients,
                train_pairs=train_pairs,
                eval_pairs=eval_pairs,
                heldout_pairs=heldout_pairs,
                warmup_queries=0,
                policy_train_queries=0,
                policy_eval_queries=0,
            ),
            root / "data",
        )
    models, normalizers, archs = _reward_models(
        root, clients, args.rm_steps or (110 if args.quick else 300), args.seed, args.reuse
    )
    rm_done = time.perf_counter()

    encoder = _encoder(args.encoder, root, args.seed)
    _log(f"[bench] encoding {router_pairs} training pairs per client with {encoder.encoder_id}")
    t0 = time.perf_counter()
    fed_clients = load_router_clients(root / "data", clients, encoder,
                                      pairs_per_client=router_pairs)
    encode_s = time.perf_counter() - t0
    n_rows = sum(c.num_samples for c in fed_clients)
    _log(f"[bench] encoded {n_rows} responses in {encode_s:.1f} s ({n_rows / encode_s:.0f}/s)")

    id_splits = {c: load_pairs(root / "data" / "clients" / c / "eval") for c in clients}
    ho_splits = {h: load_pairs(root / "data" / "heldout" / h) for h in HELDOUT_CATEGORIES}
    _log("[bench] scoring every eval pair with every client reward model")
    scores = {
        name: reward_scores(pairs, clients, models, normalizers)
        for name, pairs in [*id_splits.items(), *ho_splits.items()]
    }

    tables, comm, walls, dp_rows = _train_and_score(args, fed_clients, encoder, rounds,
                                                    id_splits, ho_splits, scores)

    wall = time.perf_counter() - start
    _log(f"[bench] wall time {wall:.1f} s (data + reward models {rm_done - start:.1f} s)")
    summary = _summary(args, tables, comm, walls, dp_rows, archs=archs, encoder=encoder,
                       encode_rate=n_rows / encode_s, rounds=rounds, router_pairs=router_pairs,
                       wall=wall)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
