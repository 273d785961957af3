"""``fedmor demo``: the main job, end to end on the embedded defaults, across real processes.

Stage A: synthesize the heterogeneous benchmark, train one reward model per client — each on a
different VLM architecture — and print the cross-client pairwise-accuracy matrix.
Stage B: start one server and one client app per client on 127.0.0.1 (each client app serves its
own reward model); train the router over REST under secure aggregation (each client trains
locally with ``sdk.router.router_update``), download the final router and print a Table-4-style
comparison on the clients' eval pairs.
Stage C: warm the tiny policy up (cached; in a second process while stages A and B run), train
held-out style judges, align the policy with GRPO as the consortium's aligner: every batch of
completions goes to the server's ``POST /v1/rewards``, where MoR routes each completion to one
client and the score comes back from that client process over REST; then evaluate base vs
aligned. Everything goes to a run directory (config, data, checkpoints, ``metrics.json``, plots).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import multiprocessing
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedmor_local._demo_config import DemoConfig, rm_config, say
from fedmor_local._demo_judges import judge_architectures, style_evaluation, train_style_judges
from fedmor_local._demo_report import change_summary, plot_run, results_table, style_table
from fedmor_local._demo_stage_b import (
    dp_options,
    member_router_training,
    router_config,
    router_spec,
    site_policy,
    stage_b,
)
from sdk.runtime_options import add_runtime_arguments

if TYPE_CHECKING:
    from sdk.reward import RewardModel

__all__ = ["DemoConfig", "register", "run_demo"]


def _policy(config: DemoConfig, run_dir: Path, cache_dir: Path) -> Path:
    """The tiny base policy, warmed up on the public QA split (cached across runs)."""
    from sdk.alignment import WarmupConfig, warmup_policy
    from sdk.data import load_queries
    from sdk.models import build_tiny_vlm

    warm = load_queries(run_dir / "data" / "policy" / "warmup")
    base = run_dir / "policy" / "base"
    corpus = [q.prompt for q in warm] + [str(q.answer) for q in warm]
    build_tiny_vlm("qwen2_5_vl", base, corpus=corpus, seed=config.seed)
    warm_cfg = WarmupConfig(seed=config.seed, label_noise=config.warmup_label_noise)
    if config.warmup_steps is not None:
        warm_cfg = warm_cfg.model_copy(update={"steps": config.warmup_steps})
    say(f"stage C (background): supervised warm-up of the base policy ({warm_cfg.steps} steps, "
        f"cached in {cache_dir})")
    lines = itertools.count()  # one line in 8 (every 200 steps): stages A and B print meanwhile
    return warmup_policy(base, warm, cache_dir, warm_cfg, runtime=config.runtime(),
                         progress=lambda m: say(f"stage C (background): {m}")
                         if next(lines) % 8 == 0 else None)


def _warmed_up_policy(config: DemoConfig, run_dir: Path, cache_dir: Path) -> tuple[Path, float]:
    """:func:`_policy` and its seconds, for the second process ``run_demo`` runs it in while
    stages A and B run (stage A's reward-model training uses one core)."""
    import torch

    torch.set_num_threads(1)
    start = time.perf_counter()
    return _policy(config, run_dir, cache_dir), time.perf_counter() - start


def _judges(config: DemoConfig, run_dir: Path) -> dict[str, RewardModel]:
    """The held-out style judges, trained on data of another seed."""
    from sdk.data import PREFERENCE_CLIENTS

    archs = judge_architectures(config.clients, config.architectures,
                                [c for c in config.clients if c in PREFERENCE_CLIENTS])
    say(f"stage C: training held-out judge reward models {archs} on separate data")
    return train_style_judges(archs, run_dir / "judges", seed=config.seed,
                              train_pairs=config.train_pairs, config=rm_config(config),
                              runtime=config.runtime())


_ALIGNER = "aligner"  # the roster name of the demo's GRPO job (role aligner)


def _alignment_settings(config: DemoConfig) -> dict[str, Any]:
    """The server's ``alignment`` section: the online Neural TS settings and the demo's reward
    rules (the server hosts stage C's pipeline; its router is the declared ``[router]``)."""
    from sdk.alignment import ONLINE_ROUTER_CONFIG

    return {"online": ONLINE_ROUTER_CONFIG.model_copy(update={"seed": config.seed}).model_dump(),
            # An unparseable answer to a multiple-choice prompt gets a fixed low score and
            # reaches no client: the style clients' prompts otherwise pulled MC answers out of
            # format (docs/alignment.md, "Format rule"). An empty one gets the same.
            "invalid_choice_reward": config.invalid_choice_reward,
            "empty_reward": config.invalid_choice_reward,
            # The demo is the whole consortium: it may see which client judged what.
            "reveal_judges": True}


def _stage_c(config: DemoConfig, run_dir: Path, consortium: Any, client_ids: list[str],
             policy: Path, judges: dict[str, RewardModel]) -> dict[str, Any]:
    from sdk.alignment import (
        EvalSettings,
        GRPOSettings,
        RestRewardFunction,
        StepTimer,
        align,
        enroll_identity,
        evaluate_policy,
    )
    from sdk.data import (
        HELDOUT_CATEGORIES,
        MULTIPLE_CHOICE_CATEGORIES,
        load_pairs,
        load_queries,
    )
    from sdk.reward import pairwise_accuracy
    from sdk.wire import load_private_key

    runtime = config.runtime()
    # The GRPO job is a client of the server's REST API with its own aligner identity: it
    # never opens the server's store or key; the server routes, queries and updates the router.
    aligner = consortium.identity_cfg[_ALIGNER]
    key = load_private_key(Path(aligner["identity_key"]))
    sender = enroll_identity(consortium.server_url, key, name=_ALIGNER,
                             token=aligner["enrollment_token"], verify=consortium.verify)
    reward_fn = RestRewardFunction(consortium.server_url, key, sender.client_id,
                                   verify=consortium.verify)
    grpo = GRPOSettings(steps=config.grpo_steps, prompts_per_step=config.grpo_prompts,
                        learning_rate=config.grpo_lr, beta=config.grpo_beta, num_generations=4,
                        max_completion_length=8, seed=config.seed)
    timer = StepTimer()
    say(f"stage C: GRPO with MoR, {grpo.steps} steps x {grpo.prompts_per_step} prompts x "
        f"{grpo.num_generations} completions; every reward comes from a client process "
        f"through the server's POST /v1/rewards")
    out = align(policy, reward_fn, load_queries(run_dir / "data" / "policy" / "train"), grpo,
                out_dir=run_dir / "alignment", callbacks=[timer], runtime=runtime,
                progress=lambda line: say(f"stage C: {line}"))
    service = consortium.ops.get("/v1/rewards/stats", dict[str, Any])  # as the operator

    id_cats = [c for c in config.clients if c in MULTIPLE_CHOICE_CATEGORIES]
    evals = {c: load_queries(run_dir / "data" / "policy" / "eval" / c)[: config.eval_queries]
             for c in (*id_cats, *HELDOUT_CATEGORIES)}
    client_evals = {c: load_pairs(run_dir / "data" / "clients" / c / "eval") for c in judges}
    judge_accuracy = {c: pairwise_accuracy(j, client_evals[c]) for c, j in judges.items()}
    style_pairs = {c: pairs[: config.eval_queries] for c, pairs in client_evals.items()}
    settings = EvalSettings(samples=3, max_new_tokens=grpo.max_completion_length,
                            seed=config.seed)
    rows: dict[str, dict[str, Any]] = {}
    for name, path in (("base", policy), ("MoR (REST)", out / "policy")):
        say(f"stage C: evaluating the {name} policy (best-of-3 on {len(evals)} categories, "
            f"held-out judges on {len(judges)} style clients)")
        ev = evaluate_policy(path, evals, settings, runtime=runtime)
        rows[name] = {"id_avg": ev.average(id_cats) if id_cats else None,
                      "heldout_avg": ev.average(HELDOUT_CATEGORIES),
                      "per_category": {c: s.best_of_n for c, s in ev.categories.items()},
                      "greedy": {c: s.greedy for c, s in ev.categories.items()},
                      "id_expected": ev.average(id_cats, "expected") if id_cats else None,
                      "heldout_expected": ev.average(HELDOUT_CATEGORIES, "expected"),
                      "expected": {c: s.expected for c, s in ev.categories.items()},
                      "style": style_evaluation(path, judges, style_pairs, settings,
                                                runtime=runtime)}
    log = json.loads((out / "metrics.json").read_text())["log_history"]
    return {
        "grpo": grpo.model_dump(), "eval": settings.model_dump(), "id_categories": id_cats,
        "results": rows,
        "judges": {c: {"architecture": judges[c].architecture, "accuracy_on_client_eval": a}
                   for c, a in judge_accuracy.items()},
        "steps": [{"step": e["step"], "loss": e["loss"], "reward": e.get("reward"),
                   "kl": e.get("kl")}
                  for e in log if "loss" in e],
        "arm_counts": {c: reward_fn.judge_counts.get(i, 0)
                       for c, i in zip(config.clients, client_ids, strict=True)},
        "mean_step_s": sum(timer.durations) / max(len(timer.durations), 1),
        "empty_completions": service["empty"],
        "failed_completions": service["failed"],
        "bytes": {"reward_queries": service["member_query_bytes"],
                  "aligner_requests": reward_fn.bytes_sent},
    }


def _stage_a(config: DemoConfig, run_dir: Path) -> tuple[dict[str, Any], dict[str, Any],
                                                         dict[str, Any]]:
    """Train one reward model per client; returns them, the eval splits and the metrics."""
    from sdk.data import HELDOUT_CATEGORIES, load_pairs
    from sdk.reward import cross_accuracy, format_accuracy_matrix, train_client_reward_models

    say("stage A: training one reward model per client")
    trained = train_client_reward_models(
        run_dir / "data", config.clients, config.architectures, run_dir / "reward_models",
        config=rm_config(config), runtime=config.runtime(),
    )
    splits = {c: load_pairs(run_dir / "data" / "clients" / c / "eval") for c in config.clients}
    splits |= {h: load_pairs(run_dir / "data" / "heldout" / h) for h in HELDOUT_CATEGORIES}
    matrix = cross_accuracy({c: t.model for c, t in trained.items()}, splits)
    archs = {c: t.architecture for c, t in trained.items()}
    print("\n[demo] stage A: pairwise accuracy of each client's reward model (rows) on each "
          "client's eval pairs and the held-out categories (columns)")
    print(format_accuracy_matrix(matrix, archs), flush=True)
    return trained, splits, {
        "architectures": archs,
        "own_accuracy": {c: matrix[c][c] for c in config.clients},
        "cross_accuracy": matrix,
        "checkpoints": {c: str(t.checkpoint) for c, t in trained.items()},
    }


@contextlib.contextmanager
def _running_consortium(config: DemoConfig, run_dir: Path,
                        trained: dict[str, Any]) -> Iterator[tuple[Any, list[str], Any]]:
    """One server and one client app per client on 127.0.0.1, each client serving its reward
    model and training the router on its own pairs (its ``[router_training]``); yields the
    consortium, the enrolled client ids and the router configuration the server declares."""
    from fedmor_local import LocalConsortium

    consortium = LocalConsortium(
        run_dir / "consortium", len(config.clients),
        server={"stage_deadline_s": config.stage_deadline_s, "reward_timeout_s": 120.0,
                "preload_dp_accountant": config.dp},  # stage B's first DP round needs it
        identities={_ALIGNER: "aligner"},
        capture=run_dir / "capture" if config.capture else None,
        policy=site_policy(config))
    declared = router_config(config, consortium.names)
    consortium.server_cfg["router"] = declared.model_dump(mode="json")
    consortium.server_cfg["alignment"] = _alignment_settings(config)
    record = run_dir / "router"
    record.mkdir(parents=True, exist_ok=True)
    (record / "config.json").write_text(declared.model_dump_json(indent=2))
    # What an audit of the run directory replays (fedmor audit --run); no process reads it.
    (record / "spec.json").write_text(
        router_spec(config, run_dir, declared).model_dump_json(indent=2))
    for site, client in zip(consortium.names, config.clients, strict=True):
        consortium.client_cfg[site].update(
            reward_model_dir=str(trained[client].checkpoint), **client_runtime(config),
            router_training=member_router_training(run_dir, client))
    with consortium:
        say(f"stage B: starting 1 server + {len(config.clients)} client processes on "
            f"127.0.0.1 (logs in {consortium.dir}); router configuration "
            f"{declared.sha256[:12]} ({declared.num_params} parameters)")
        consortium.start()
        client_ids = consortium.wait_enrolled()
        say(f"stage B: enrolled {dict(zip(config.clients, client_ids, strict=True))}")
        yield consortium, client_ids, declared


def client_runtime(config: DemoConfig) -> dict[str, str]:
    """The device and dtype fields of each client app's settings: its scorer runs there."""
    return {"device": config.device, "dtype": config.dtype}


def _print_stage_c(stage_c: dict[str, Any]) -> None:
    say("stage C: results (multiple-choice accuracy per category)")
    print(results_table(stage_c), flush=True)
    print(change_summary(stage_c), flush=True)  # a result, not progress: kept by --quiet
    if any(r["style"] for r in stage_c["results"].values()):
        say("stage C: style clients, win rate against the rejected answer under a held-out "
            "judge reward model (3 samples per prompt)")
        print(style_table(stage_c), flush=True)


def run_demo(config: DemoConfig, run_dir: Path, cache_dir: Path | None = None) -> dict[str, Any]:
    """Run every stage into ``run_dir``; returns the metrics also written to ``metrics.json``.

    ``cache_dir`` holds the warmed-up policy, reusable across runs (default ``run_dir/cache``).
    """
    import torch

    # Absolute: the consortium's processes run from the checkout, not from the caller's folder,
    # and read the paths this run writes into their settings.
    run_dir = run_dir.resolve()
    cache_dir = None if cache_dir is None else cache_dir.resolve()

    from sdk.data import SynthConfig, synthesize

    # Two cores: intra-op threads beyond one mostly contend with the other processes.
    torch.set_num_threads(1)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(config.model_dump_json(indent=2))
    start = time.perf_counter()
    walls: dict[str, float] = {}
    metrics: dict[str, Any] = {}

    say(f"stage A: synthesizing data for clients {list(config.clients)}")
    synthesize(
        SynthConfig(seed=config.seed, clients=config.clients, train_pairs=config.train_pairs,
                    eval_pairs=config.eval_pairs, heldout_pairs=config.heldout_pairs),
        run_dir / "data",
    )
    with contextlib.ExitStack() as running:
        # The policy's warm-up needs the data alone: it takes a second process from here on,
        # since stage A trains on one core and would leave the other idle. Leaving the stack
        # terminates it.
        background = running.enter_context(multiprocessing.get_context("spawn").Pool(1))
        warm_up = background.apply_async(
            _warmed_up_policy, (config, run_dir, cache_dir or run_dir / "cache")) \
            if config.grpo_steps else None
        trained, splits, metrics["stage_a"] = _stage_a(config, run_dir)
        walls["stage_a"] = time.perf_counter() - start

        t = time.perf_counter()
        consortium, client_ids, declared = running.enter_context(
            _running_consortium(config, run_dir, trained))
        router, metrics["stage_b"] = stage_b(config, consortium, declared, trained, splits)
        router.save(run_dir / "router" / "final")
        walls["stage_b"] = time.perf_counter() - t

        if warm_up is not None:
            t = time.perf_counter()
            judges = _judges(config, run_dir)  # while the warm-up may still run
            waited = time.perf_counter()
            policy, walls["stage_c_warmup"] = warm_up.get()
            background.close()
            background.join()
            say(f"stage C: the warm-up took {walls['stage_c_warmup']:.0f} s in the background; "
                f"waited {time.perf_counter() - waited:.0f} s for it")
            metrics["stage_c"] = _stage_c(config, run_dir, consortium, client_ids, policy,
                                          judges)
            _print_stage_c(metrics["stage_c"])
            walls["stage_c"] = time.perf_counter() - t

    b = metrics["stage_b"]["bytes"]
    metrics["communication_bytes"] = {"router rounds": b["uplink"] + b["downlink"]}
    if "stage_c" in metrics:
        metrics["communication_bytes"]["reward queries"] = \
            metrics["stage_c"]["bytes"]["reward_queries"]
    metrics["plots"] = plot_run(metrics, run_dir / "plots")

    metrics["wall_s"] = {k: round(v, 1) for k, v in walls.items()}
    metrics["wall_s"]["total"] = round(time.perf_counter() - start, 1)
    (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
    say(f"done in {metrics['wall_s']['total']} s; run directory: {run_dir}")
    return metrics


def _handle(args: argparse.Namespace) -> int:
    run_dir = args.out or Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S")
    run_demo(config_from_args(args), run_dir, args.cache)
    return 0


def config_from_args(args: argparse.Namespace) -> DemoConfig:
    """The demo's config from ``fedmor demo``'s flags (the defaults for everything else)."""
    return DemoConfig(seed=args.seed, device=args.device, dtype=args.dtype,
                      gradient_checkpointing=args.gradient_checkpointing, capture=args.capture,
                      **dp_options(args))


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``fedmor demo``."""
    parser = sub.add_parser("demo", help="run the end-to-end demo on the embedded defaults")
    parser.add_argument("--out", type=Path, help="run directory (default: runs/demo-<time>)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--capture", action="store_true", help="the server keeps what it "
                        "receives and publishes in RUN/capture (fedmor audit capture)")
    parser.add_argument("--dp", action="store_true",
                        help="client-level DP in stage B's router rounds (the members require it)")
    parser.add_argument("--dp-epsilon", type=float, default=DemoConfig().dp_epsilon,
                        help="epsilon (delta 1e-5) over the router rounds under --dp")
    parser.add_argument("--cache", type=Path, default=Path("runs") / "cache",
                        help="cache of the warmed-up policy, shared by runs")
    add_runtime_arguments(parser)
    parser.set_defaults(handler=_handle)
