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
in the demo, so the open prompts' rewards do not pull multiple-choice answers out of format.

``routed_step_overhead_ratio``: the same MoR GRPO step over REST vs in-process
(``_table1_overhead.py``); median step time of the REST run over that of the in-process run.

    .venv/bin/python examples/benchmarks/table1.py --quick
    .venv/bin/python examples/benchmarks/table1.py --out runs/table1 [--resume]

Settings come from flags or a config file (``--config run.toml``, the fields of
``Table1Config`` in ``_table1_config.py``; the flags given override it). The full run (3 seeds,
13 rows each) takes tens of minutes on 2 cores. Every finished
(seed, method) row is saved to ``OUT/rows.jsonl`` at once; ``--resume`` continues a stopped run
from those rows when the settings match (``_table1_rows.py``).
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from _table1_clients import RAW_SCALES, build_clients
from _table1_config import Table1Config, UsageError
from _table1_flags import add_model_flags, parse_model
from _table1_methods import MethodFactory, method_registry, pick_methods
from _table1_models import fedavg_reward_model, router_config, train_router
from _table1_overhead import routed_step_overhead
from _table1_rows import RowLog
from _table1_setup import TaskBenchmark, prepare_task_benchmark
from _table1_style import StyleClients, prepare_style_clients
from _table1_summary import headline, print_table, summarize

from sdk.alignment import (
    ONLINE_ROUTER_CONFIG,
    EmptyIsWorst,
    EvalSettings,
    GRPOSettings,
    InProcessRewardSource,
    NeuralTSChooser,
    SelectionRewardFunction,
    StepTimer,
    align,
    evaluate_policy,
)
from sdk.data import HELDOUT_CATEGORIES, TASK_CLIENTS, Query
from sdk.reward import LoraSettings
from sdk.router import HashingEncoder, NeuralThompsonRouter, Router

# GRPO's learning rate under LoRA: a higher one traded MoR's style win rate for task accuracy.
LORA_LEARNING_RATE = 1e-3
Row = dict[str, Any]


def say(message: str) -> None:
    print(message, flush=True)


def grpo_settings(config: Table1Config) -> GRPOSettings:
    """GRPO's settings: the ones the config gives, GRPOSettings' defaults for the rest."""
    # 150 steps of 8 prompts (quick): with fewer, smaller steps the methods' in-domain accuracy
    # stayed within the spread of GRPO's seeds.
    learning_rate = config.learning_rate or (LORA_LEARNING_RATE if config.lora_rank else None)
    given: dict[str, Any] = {"temperature": config.grpo_temperature, "scale_rewards": config.scale_rewards,
             "beta": config.beta, "learning_rate": learning_rate or None}
    lora = LoraSettings(r=config.lora_rank, alpha=2 * config.lora_rank,
                        target_modules=tuple(config.lora_targets.split(",")),
                        train_vision=config.lora_vision) if config.lora_rank else None
    # With LoRA, GRPOSettings derives freeze_vision from the adapters' train_vision.
    vision: dict[str, Any] = {} if config.lora_rank else {"freeze_vision": config.freeze_vision}
    return GRPOSettings(steps=config.steps or (150 if config.quick else 200), prompts_per_step=8,
                        num_generations=config.num_generations, max_completion_length=8,
                        **{k: v for k, v in given.items() if v is not None}, lora=lora, **vision)


@dataclass
class Clients:
    """The reward clients every method draws on, and what the router trains and is probed on."""

    normalized: list[Any]
    raw: list[Any]
    pair_dirs: dict[str, Path]  # client -> its preference pairs
    probe: list[tuple[Any, str, str, str]]  # (image, prompt, response, client it must route to)
    grpo_queries: list[Query]
    style: StyleClients | None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.pair_dirs)


def prepare_clients(config: Table1Config, bench: TaskBenchmark, eval_per_category: int) -> Clients:
    """The simulated task clients, and the style clients' real reward models unless --no-style."""
    scales = RAW_SCALES[config.raw_scales]
    queries = bench.grpo_queries
    # The GRPO queries are stored category by category (the first 200 are all `diagram`, which
    # once hid a router that sent everything to client 0), hence a strided probe.
    clients = Clients(
        normalized=list(build_clients(bench.answers, queries[:60], normalize=True,
                                      scales=scales)),
        raw=list(build_clients(bench.answers, queries[:60], normalize=False, scales=scales)),
        pair_dirs={c: bench.data / "clients" / c / "train" for c in TASK_CLIENTS},
        probe=[(q.image, q.prompt, q.options[0], q.category)
               for q in queries[::max(1, len(queries) // 300)]],
        grpo_queries=list(queries), style=None)
    if config.style:
        style = prepare_style_clients(config.out, grpo_queries=400, eval_pairs=eval_per_category,
                                      say=say)
        clients.style = style
        clients.normalized += style.normalized
        clients.raw += style.raw
        clients.pair_dirs |= {c: style.data / "clients" / c / "train" for c in style.names}
        clients.probe += [(p.image, p.prompt, p.chosen, p.category)
                          for c in style.names for p in style.eval_pairs[c][:50]]
        clients.grpo_queries += style.queries
    return clients


class Routing:
    """The router trained offline (local training per client, FedAvg); each run starts a copy."""

    def __init__(self, config: Table1Config, clients: Clients) -> None:
        say(f"training the router on {len(clients.names)} clients (local training + FedAvg, "
            f"{config.router_rounds} rounds of {config.router_epochs} local epochs) ...")
        self.names = clients.names
        self.probe = clients.probe
        self.encoder = HashingEncoder()
        self.state = train_router(clients.pair_dirs, self.encoder, rounds=config.router_rounds,
                                  epochs=config.router_epochs).state_dict()

    def chooser(self, seed: int) -> NeuralTSChooser:
        router = Router(router_config(self.encoder), list(self.names), self.encoder.encoder_id)
        router.load_state_dict(self.state)
        return NeuralTSChooser(self.encoder, NeuralThompsonRouter(
            router, ONLINE_ROUTER_CONFIG.model_copy(update={"seed": seed})))

    def accuracy(self, router: Any, explore: bool) -> float:
        """Share of the probe completions ``router`` sends to their own client."""
        images, prompts, responses, owners = zip(*self.probe, strict=True)
        arms = router.choose(images, prompts, responses, explore=explore).arms
        return statistics.fmean(float(self.names[a] == c)
                                for a, c in zip(arms, owners, strict=True))


class FedAvgSource:
    """FedAvg-RM's reward source: one real tiny reward model trained by FedAvg on first use."""

    def __init__(self, pair_dirs: dict[str, Path], out: Path, quick: bool) -> None:
        self._pair_dirs, self._out, self._quick = pair_dirs, out, quick
        self.accuracy: dict[str, float] = {}  # pairwise, per category (also from saved rows)

    @functools.cached_property
    def source(self) -> EmptyIsWorst:
        say("FedAvg-RM: one real tiny reward model trained by FedAvg rounds over the clients' "
            "pairs")
        scorer, accuracy = fedavg_reward_model(self._pair_dirs, self._out, self._quick)
        self.accuracy.update(accuracy)
        say(f"FedAvg-RM pairwise accuracy: {accuracy}")
        return EmptyIsWorst(InProcessRewardSource([scorer.score]), worst=-scorer.clip)


@dataclass
class Evaluator:
    """A policy's row: best-of-3 sampled accuracy per category (greedy beside it), and the style
    clients' judges."""

    eval_sets: dict[str, list[Query]]
    settings: EvalSettings
    style: StyleClients | None

    def __call__(self, path: Path, seed: int) -> Row:
        settings = self.settings.model_copy(update={"seed": seed})
        ev = evaluate_policy(path, self.eval_sets, settings)
        cats = ev.categories
        return {"id": ev.average(TASK_CLIENTS), "heldout": ev.average(HELDOUT_CATEGORIES),
                "id_greedy": ev.average(TASK_CLIENTS, "greedy"),
                "id_sampled": ev.average(TASK_CLIENTS, "sampled"),
                "id_expected": ev.average(TASK_CLIENTS, "expected"),
                "heldout_expected": ev.average(HELDOUT_CATEGORIES, "expected"),
                "id_expected_bo3": ev.average(TASK_CLIENTS, "expected_best_of_n"),
                "heldout_expected_bo3": ev.average(HELDOUT_CATEGORIES, "expected_best_of_n"),
                "per_category": {c: s.best_of_n for c, s in cats.items()},
                "per_category_expected": {c: s.expected for c, s in cats.items()},
                "per_category_expected_bo3": {c: s.expected_best_of_n for c, s in cats.items()},
                **(self.style.evaluate(path, settings) if self.style else {})}


class Table1:
    """One run: the benchmark, clients and router prepared once, then every (seed, method) row."""

    def __init__(self, config: Table1Config, log: RowLog) -> None:
        self.config, self.log = config, log
        self.seeds = config.seeds or (1 if config.quick else 3)
        self.grpo = grpo_settings(config)
        self.evals = EvalSettings(samples=3, max_new_tokens=8)
        # Best-of-3 on n queries has a sampling SD of ~sqrt(0.6 * 0.4 / n) per category, 0.07
        # at n = 50, 0.05 at the full run's 100 per category.
        self.eval_per_category = 24 if config.quick else 100
        self.t0 = time.perf_counter()
        self.bench = prepare_task_benchmark(config.out, eval_per_category=self.eval_per_category,
                                            say=say, warmup=config.warmup())
        self.clients = prepare_clients(config, self.bench, self.eval_per_category)
        # Style clients' real reward models cannot score an empty answer (EmptyIsWorst); the
        # format rule keeps their open prompts from pulling multiple-choice answers out of
        # format.
        self.worst = config.invalid_choice_reward if self.clients.style else None
        self.routing = Routing(config, self.clients)
        self.fedavg = FedAvgSource(self.clients.pair_dirs, config.out, config.quick)
        self.evaluate = Evaluator(self.bench.eval_sets, self.evals, self.clients.style)

    def run(self) -> None:
        """Every row, the REST overhead, the table and the JSON summary on stdout."""
        routing = self.routing
        router_accuracy = routing.accuracy(routing.chooser(0), explore=False)
        explore_accuracy = routing.accuracy(routing.chooser(0), explore=True)
        say(f"router sends {router_accuracy:.1%} of probe completions to their own client "
            f"({explore_accuracy:.1%} with Thompson exploration)")
        methods = pick_methods(method_registry(
            self.clients.normalized, self.clients.raw, routing.chooser,
            lambda: self.fedavg.source, self.clients.names), self.config.methods)
        rows = self.run_rows(methods)
        overhead = self.overhead()
        style = self.clients.style
        table = summarize(rows, style.names if style else ())
        print_table(table, say, style=bool(style))
        print(json.dumps(self.report(rows, table, overhead, router_accuracy, explore_accuracy)))

    def run_method(self, name: str, make: MethodFactory, seed: int) -> Row:
        """One GRPO run from the warm-up policy, evaluated."""
        selection, scorers = make(seed)
        source: Any = InProcessRewardSource(scorers)
        if self.worst is not None:
            source = EmptyIsWorst(source, worst=self.worst)
        fn = SelectionRewardFunction(selection, source, invalid_choice_reward=self.worst)
        timer = StepTimer()
        run_dir = align(self.bench.policy, fn, self.clients.grpo_queries,
                        self.grpo.model_copy(update={"seed": seed}),
                        out_dir=self.config.out / "runs" / f"{name}-{seed}", callbacks=[timer],
                        merge_lora=True)  # evaluated as a full policy below
        r = self.evaluate(run_dir / "policy", seed)
        r["mean_step_s"] = statistics.fmean(timer.durations[1:]) if timer.durations[1:] else None
        if selection.chooser is not None:  # where the online updates left the router
            r["router_accuracy_after"] = self.routing.accuracy(selection.chooser, explore=False)
        if name == "fedavg_rm":
            r["fedavg_pairwise_accuracy"] = dict(self.fedavg.accuracy)
        return r

    def run_rows(self, methods: dict[str, MethodFactory]) -> dict[str, list[Row]]:
        """The base row and each method's, per seed: saved rows reused, new ones saved at once."""
        style = self.clients.style
        rows: dict[str, list[Row]] = {"base": []}
        for seed in range(self.seeds):
            base = self.log.get_or_run(seed, "base",
                                       functools.partial(self.evaluate, self.bench.policy, seed))
            rows["base"].append(base)
            say(f"seed {seed} base: id {base['id']:.3f} heldout {base['heldout']:.3f}"
                + (f" style win {base['style_win']:.3f}" if style else ""))
            for name, make in methods.items():
                r = self.log.get_or_run(seed, name,
                                        functools.partial(self.run_method, name, make, seed))
                self.fedavg.accuracy.update(r.get("fedavg_pairwise_accuracy", {}))
                rows.setdefault(name, []).append(r)
                say(f"seed {seed} {name}: id {r['id']:.3f} heldout {r['heldout']:.3f} "
                    f"(greedy id {r['id_greedy']:.3f})"
                    + (f" style win {r['style_win']:.3f}" if style else "")
                    + f" [{time.perf_counter() - self.t0:.0f}s]")
        return rows

    def overhead(self) -> dict[str, Any]:
        """The same MoR GRPO step over REST vs in-process (``{"ratio": None}`` at 0 steps)."""
        steps = self.config.overhead_steps
        if steps is None:
            steps = 8 if self.config.quick else 20
        if steps <= 0:
            return {"ratio": None}
        say("routed step overhead: the same MoR GRPO step over REST vs in-process ...")
        overhead = routed_step_overhead(self.bench.policy, self.clients.grpo_queries, self.grpo,
                                        self.routing.chooser, self.config.out, steps)
        say(f"routed step overhead {overhead['ratio']:.2f}x {overhead['median_step_s']}")
        return overhead

    def report(self, rows: dict[str, list[Row]], table: Any, overhead: dict[str, Any],
               router_accuracy: float, explore_accuracy: float) -> dict[str, Any]:
        """The run's JSON summary."""
        config, style = self.config, self.clients.style
        return {
            "headline": headline(table, style=bool(style), overhead_ratio=overhead["ratio"],
                                 seeds=self.seeds),
            "reward_path": "in-process",
            "routed_step_overhead": overhead,
            "clients": f"simulated exact task judges with raw scales {config.raw_scales} "
                       f"{RAW_SCALES[config.raw_scales]}",
            "router_rounds": config.router_rounds, "router_epochs": config.router_epochs,
            "fedavg_rm_pairwise_accuracy": self.fedavg.accuracy,
            "style_clients": style.accuracy if style else None,
            "router_accuracy": router_accuracy, "router_accuracy_explore": explore_accuracy,
            "online_router": ONLINE_ROUTER_CONFIG.model_dump(),
            "grpo": self.grpo.model_dump(), "warmup": config.warmup().model_dump(),
            "eval": self.evals.model_dump(), "eval_queries_per_category": self.eval_per_category,
            "table": table, "runs": rows,
            "mean_step_seconds": {n: statistics.fmean(r["mean_step_s"] for r in rs)
                                  for n, rs in rows.items()
                                  if n != "base" and all(r.get("mean_step_s") for r in rs)},
            "wall_seconds": round(time.perf_counter() - self.t0, 1),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_model_flags(parser, Table1Config)
    config = parse_model(parser, Table1Config)
    settings = config.row_settings()
    try:
        log = RowLog(config.out, settings, resume=config.resume,
                     defaults=Table1Config.row_defaults())
    except ValueError as e:  # other settings than the saved rows', or a corrupt row
        parser.error(str(e))
    if len(log):
        say(f"resuming: {len(log)} saved rows in {log.path}")
    # One intra-op thread: on a shared small machine OpenMP's spin-waiting makes a tiny
    # model's step many times slower with more threads (each waits for a core another holds).
    torch.set_num_threads(1)
    try:
        Table1(config, log).run()
    except UsageError as e:
        parser.error(str(e))


if __name__ == "__main__":
    main()
