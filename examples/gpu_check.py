"""GPU check: the real-size path on one CUDA device in bfloat16, as one JSON line.

Builds a randomly initialised Qwen2-VL-2B (published sizes) as a checkpoint directory, then on
the GPU: one stage-A LoRA step of a reward model per client (two clients), scoring a batch of
16 through each client's ``ClientScorer``, and two GRPO steps (trl) whose rewards are routed to
those in-process scorers. Prints one JSON line: times, peak GPU memory, device name. Exits with
status 2 and a one-line message on a machine without CUDA.

    .venv/bin/python examples/gpu_check.py [--out DIR] [--arch qwen2_vl]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

NO_CUDA = "gpu_check: no CUDA device (torch.cuda.is_available() is False); run it on a GPU machine"


def _check_cuda() -> None:
    import torch

    if not torch.cuda.is_available():
        print(NO_CUDA, file=sys.stderr)
        raise SystemExit(2)


def _stage_a(base: Path, data: Path, root: Path, runtime: Any) -> dict[str, Any]:
    import torch

    from sdk.data import load_pairs
    from sdk.reward import (
        ClientScorer,
        LoraSettings,
        RewardModel,
        RewardTrainingConfig,
        train_reward_model,
    )

    pairs = load_pairs(data)
    times: dict[str, Any] = {"train_step_s": [], "score_item_s": []}
    scorers = []
    for k in range(2):
        model = RewardModel.from_backbone(base, lora=LoraSettings(), runtime=runtime)
        config = RewardTrainingConfig(steps=1, batch_size=2, warmup_steps=0, seed=k,
                                      lora=LoraSettings())
        result = train_reward_model(model, pairs[:4], [], config, out_dir=root / f"rm-{k}",
                                    progress=False)
        times["train_step_s"].append(result.wall_s)
        del model
        torch.cuda.empty_cache()
        scorer = ClientScorer.from_pretrained(root / f"rm-{k}",
                                              runtime=runtime.model_copy(
                                                  update={"gradient_checkpointing": False}))
        batch = [pairs[i % len(pairs)] for i in range(16)]
        torch.cuda.synchronize()
        start = time.perf_counter()
        scores = scorer.score([p.image for p in batch], [p.prompt for p in batch],
                              [p.chosen for p in batch])
        torch.cuda.synchronize()
        times["score_item_s"].append((time.perf_counter() - start) / len(scores))
        scorers.append(scorer)
    times["scorers"] = scorers
    return times


def _stage_c(base: Path, queries: Any, scorers: list[Any], root: Path,
             runtime: Any) -> float:
    """Two GRPO steps, each completion routed by MoR (hashing encoder, router and Neural TS on
    the GPU) to one of the in-process scorers."""
    from sdk.alignment import (
        GRPOSettings,
        InProcessRewardSource,
        NeuralTSChooser,
        SelectionRewardFunction,
        StepTimer,
        align,
        make_selection,
    )
    from sdk.reward import LoraSettings
    from sdk.router import HashingEncoder, NeuralThompsonRouter, Router, RouterConfig

    encoder = HashingEncoder()
    router = Router(RouterConfig(input_dim=encoder.dim, num_layers=1),
                    [f"client-{k}" for k in range(len(scorers))], encoder.encoder_id)
    chooser = NeuralTSChooser(encoder, NeuralThompsonRouter(router.to(runtime.resolve_device())))
    reward_fn = SelectionRewardFunction(make_selection("mor", chooser=chooser),
                                        InProcessRewardSource([s.score for s in scorers]))
    timer = StepTimer()
    settings = GRPOSettings(steps=2, prompts_per_step=2, num_generations=2,
                            max_completion_length=8, lora=LoraSettings())
    align(base, reward_fn, queries, settings, out_dir=root / "grpo", callbacks=[timer],
          progress=None, runtime=runtime)
    return sum(timer.durations) / max(1, len(timer.durations))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="work directory (default: a temporary one)")
    parser.add_argument("--arch", default="qwen2_vl",
                        choices=("qwen2_vl", "qwen2_5_vl", "llava_onevision"))
    args = parser.parse_args(argv)
    _check_cuda()
    import torch

    from sdk.data import SynthConfig, load_queries, synthesize
    from sdk.models import Runtime, build_tiny_vlm

    root = args.out or Path(tempfile.mkdtemp(prefix="fedmor-gpu-check-"))
    runtime = Runtime(device="cuda", dtype="bfloat16", gradient_checkpointing=True)
    start = time.perf_counter()
    synthesize(SynthConfig(clients=("detail",), heldout=(), train_pairs=16, eval_pairs=4,
                           warmup_queries=8, policy_train_queries=8, policy_eval_queries=0),
               root / "data")
    base = build_tiny_vlm(args.arch, root / "base", size="real", dtype=torch.bfloat16)
    build_s = time.perf_counter() - start
    torch.cuda.reset_peak_memory_stats()
    stage_a = _stage_a(base, root / "data" / "clients" / "detail" / "train", root, runtime)
    stage_a_peak = torch.cuda.max_memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    queries = load_queries(root / "data" / "policy" / "train")
    grpo_step_s = _stage_c(base, queries, stage_a.pop("scorers"), root, runtime)
    print(json.dumps({
        "check": "gpu", "device": torch.cuda.get_device_name(), "architecture": args.arch,
        "dtype": "bfloat16", "build_s": round(build_s, 1),
        "rm_train_step_s": [round(t, 3) for t in stage_a["train_step_s"]],
        "score_item_s": [round(t, 4) for t in stage_a["score_item_s"]],
        "grpo_step_s": round(grpo_step_s, 3),
        "peak_gpu_bytes": {"stage_a": stage_a_peak,
                           "grpo": torch.cuda.max_memory_allocated()},
        "wall_s": round(time.perf_counter() - start, 1),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
