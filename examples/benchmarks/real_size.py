"""Benchmark: stage A at real model sizes — memory, time and checkpoint bytes per architecture.

For each architecture a randomly initialised model of its published size (sdk.models
``REAL_SIZES``) is saved as a checkpoint directory in the chosen dtype; then, each phase in its
own process (so each peak resident set size is that phase's alone):

- load: ``RewardModel.from_backbone(DIR, lora=..., runtime=...)``;
- train: LoRA (rank 8, attention projections), batch 2 pairs with images, ``--steps`` steps,
  gradient checkpointing, adapter checkpoint saved (normalizer fitted on the training pairs);
- score: the adapter checkpoint reloaded over its base, one batch of 16 (image, prompt, response).

The last stdout line is one JSON object; ``headline`` = {peak_rss_over_weight_bytes (training
peak RSS / weight bytes, target <= 1.3), adapter_checkpoint_fraction (adapter checkpoint bytes /
weight bytes, target <= 0.02), load_s, train_step_s, score_item_s, dtype, device}; with several
architectures each headline figure is the worst one.

    .venv/bin/python examples/benchmarks/real_size.py --quick   # Qwen2-VL-2B only, ~2 min, ~5 GB
    .venv/bin/python examples/benchmarks/real_size.py           # + Qwen2.5-VL-3B, LLaVA-OV-0.5B
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _scratch import scratch_dir

QUICK_ARCHITECTURES = ("qwen2_vl",)
FULL_ARCHITECTURES = ("qwen2_vl", "qwen2_5_vl", "llava_onevision")
RSS_TARGET = 1.3
ADAPTER_TARGET = 0.02
SCORE_BATCH = 16


def _peak_rss() -> int:
    """This process's peak resident set size in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _runtime(args: argparse.Namespace) -> Any:
    from sdk.models import Runtime

    return Runtime(device=args.device, dtype=args.dtype, gradient_checkpointing=True)


def _phase_build(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from sdk.models import build_tiny_vlm

    start = time.perf_counter()
    build_tiny_vlm(args.arch, args.dir, size=args.size, dtype=getattr(torch, args.dtype))
    return {"build_s": time.perf_counter() - start}


def _pairs(args: argparse.Namespace, n: int) -> list[Any]:
    from sdk.data import load_pairs

    pairs = load_pairs(args.data)
    return [pairs[i % len(pairs)] for i in range(n)]


def _phase_load(args: argparse.Namespace) -> dict[str, Any]:
    from sdk.reward import LoraSettings, RewardModel

    start = time.perf_counter()
    model = RewardModel.from_backbone(args.dir, lora=LoraSettings(), runtime=_runtime(args))
    load_s = time.perf_counter() - start
    params = list(model.backbone.parameters())
    return {
        "load_s": load_s,
        # Non-LoRA backbone weights: what the checkpoint directory holds.
        "params": sum(p.numel() for n, p in model.backbone.named_parameters()
                      if "lora_" not in n),
        "weight_bytes": sum(p.numel() * p.element_size()
                            for n, p in model.backbone.named_parameters() if "lora_" not in n),
        "trainable_params": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "dtype": str(params[0].dtype).removeprefix("torch."),
        "device": str(params[0].device),
    }


def _phase_train(args: argparse.Namespace) -> dict[str, Any]:
    from sdk.reward import LoraSettings, RewardModel, RewardTrainingConfig, train_reward_model

    model = RewardModel.from_backbone(args.dir, lora=LoraSettings(), runtime=_runtime(args))
    config = RewardTrainingConfig(steps=args.steps, batch_size=2, warmup_steps=0,
                                  eval_batch_size=4, lora=LoraSettings())
    result = train_reward_model(model, _pairs(args, 4), [], config, out_dir=args.ckpt,
                                progress=False)
    return {"train_step_s": result.wall_s / result.steps, "steps": result.steps}


def _phase_score(args: argparse.Namespace) -> dict[str, Any]:
    from sdk.reward import ClientScorer

    runtime = _runtime(args).model_copy(update={"gradient_checkpointing": False})
    scorer = ClientScorer.from_pretrained(args.ckpt, runtime=runtime)
    pairs = _pairs(args, SCORE_BATCH)
    scorer.score([p.image for p in pairs[:1]], [pairs[0].prompt], [pairs[0].chosen])  # warm
    start = time.perf_counter()
    scores = scorer.score([p.image for p in pairs], [p.prompt for p in pairs],
                          [p.chosen for p in pairs])
    elapsed = time.perf_counter() - start
    return {"score_item_s": elapsed / len(scores), "scores_finite": all(
        s == s for s in scores)}


PHASES = {"build": _phase_build, "load": _phase_load, "train": _phase_train,
          "score": _phase_score}


def run_phase(phase: str, **options: Any) -> dict[str, Any]:
    """Run one phase in a fresh Python process; its JSON result plus ``peak_rss`` (bytes)."""
    argv = [sys.executable, __file__, "--phase", phase]
    for key, value in options.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False,
                          env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    if done.returncode != 0:
        raise RuntimeError(f"phase {phase} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def measure(arch: str, root: Path, data: Path, *, dtype: str, device: str, steps: int,
            say: Any = print, size: str = "real") -> dict[str, Any]:
    """Every phase for one architecture; the figures of one entry of ``architectures``.
    (``size="tiny"`` runs the same phases on a tiny model, to test this script.)"""
    base, ckpt = root / f"{arch}-base", root / f"{arch}-reward"
    common = {"arch": arch, "dir": base, "dtype": dtype, "device": device, "data": data,
              "ckpt": ckpt, "steps": steps, "size": size}
    # Each phase in a fresh process (its own peak RSS), and one line on how it went.
    lines: dict[str, Callable[[dict[str, Any]], str]] = {
        "build": lambda r: f"built in {r['build_s']:.0f} s, {_dir_bytes(base) / 1e9:.2f} GB "
                           "on disk",
        "load": lambda r: f"{r['params'] / 1e9:.2f}B parameters, loaded in {r['load_s']:.1f} s",
        "train": lambda r: f"{r['train_step_s']:.1f} s a step",
        "score": lambda r: f"{r['score_item_s']:.2f} s an item",
    }
    done: dict[str, dict[str, Any]] = {}
    for phase, line in lines.items():
        done[phase] = run_phase(phase, **common)
        rss = "" if phase == "build" else f", peak RSS {done[phase]['peak_rss'] / 1e9:.2f} GB"
        say(f"[real_size] {arch}: {line(done[phase])}{rss}")
    built, loaded, trained, scored = (done[p] for p in lines)
    weight_bytes = loaded["weight_bytes"]
    adapter_bytes = _dir_bytes(ckpt)
    peaks = {name: phase["peak_rss"] for name, phase in
             (("load", loaded), ("train", trained), ("score", scored))}
    return {
        "params": loaded["params"],
        "trainable_params": loaded["trainable_params"],
        "weight_bytes": weight_bytes,
        "base_checkpoint_bytes": _dir_bytes(base),
        "adapter_checkpoint_bytes": adapter_bytes,
        "adapter_checkpoint_fraction": adapter_bytes / weight_bytes,
        "build_s": round(built["build_s"], 1),
        "load_s": round(loaded["load_s"], 2),
        "train_step_s": round(trained["train_step_s"], 2),
        "score_item_s": round(scored["score_item_s"], 3),
        "peak_rss": peaks,
        "peak_rss_over_weight_bytes": {k: round(v / weight_bytes, 3) for k, v in peaks.items()},
        "dtype": loaded["dtype"],
        "device": loaded["device"],
    }


def _headline(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    worst = max(results.values(), key=lambda r: r["peak_rss_over_weight_bytes"]["train"])
    return {
        "peak_rss_over_weight_bytes": max(r["peak_rss_over_weight_bytes"]["train"]
                                          for r in results.values()),
        "adapter_checkpoint_fraction": round(max(r["adapter_checkpoint_fraction"]
                                                 for r in results.values()), 6),
        "load_s": max(r["load_s"] for r in results.values()),
        "train_step_s": max(r["train_step_s"] for r in results.values()),
        "score_item_s": max(r["score_item_s"] for r in results.values()),
        "dtype": worst["dtype"],
        "device": worst["device"],
    }


def _phase_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--phase", choices=sorted(PHASES), required=True)
    for name in ("arch", "dir", "dtype", "device", "data", "ckpt", "size"):
        parser.add_argument(f"--{name}")
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args(argv)
    result = PHASES[args.phase](args)
    print(json.dumps({**result, "peak_rss": _peak_rss()}))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--phase" in argv:
        return _phase_main(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="Qwen2-VL-2B only")
    parser.add_argument("--out", type=Path,
                        help="work directory, kept (default: a temporary one, removed at exit)")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps")
    parser.add_argument("--steps", type=int, default=2, help="LoRA training steps (batch 2)")
    parser.add_argument("--architectures", nargs="+", choices=FULL_ARCHITECTURES)
    args = parser.parse_args(argv)
    archs = tuple(args.architectures or (QUICK_ARCHITECTURES if args.quick
                                         else FULL_ARCHITECTURES))
    root = scratch_dir("fedmor-real-size-", args.out)
    start = time.perf_counter()

    from sdk.data import SynthConfig, synthesize

    synthesize(SynthConfig(clients=("detail",), heldout=(), train_pairs=16, eval_pairs=4,
                           warmup_queries=0, policy_train_queries=0, policy_eval_queries=0),
               root / "data")
    data = root / "data" / "clients" / "detail" / "train"
    results = {}
    for arch in archs:
        results[arch] = measure(arch, root, data, dtype=args.dtype, device=args.device,
                                steps=args.steps)
        for sub in (root / f"{arch}-base", root / f"{arch}-reward"):  # free the disk
            __import__("shutil").rmtree(sub, ignore_errors=True)
    headline = _headline(results)
    summary = {
        "benchmark": "real_size",
        "mode": "quick" if args.quick else "full",
        "headline": headline,
        "targets": {
            "peak_rss_over_weight_bytes_max": RSS_TARGET,
            "peak_rss_met": headline["peak_rss_over_weight_bytes"] <= RSS_TARGET,
            "adapter_checkpoint_fraction_max": ADAPTER_TARGET,
            "adapter_met": headline["adapter_checkpoint_fraction"] <= ADAPTER_TARGET,
        },
        "architectures": results,
        "wall_s": round(time.perf_counter() - start, 1),
        "machine_cores": len(os.sched_getaffinity(0)),
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
