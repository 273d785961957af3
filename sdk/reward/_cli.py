"""``fedmor rm ...``: train, evaluate and query a client's reward model."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sdk.progress import say
from sdk.runtime_options import add_runtime_arguments, runtime_from_args

__all__ = ["register"]

_TRIAL_NOTICE = (
    "[rm] no --base: training a tiny randomly initialised {arch} built here, a trial backbone "
    "for checking your data and settings; on real images expect accuracy near chance "
    "(docs/guides/member.md). For a reward model the consortium can use, name a pretrained "
    "checkpoint: --base DIR (a local Qwen2-VL, Qwen2.5-VL or LLaVA-OneVision directory), with "
    "--lora for large ones.")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``rm`` group (``train``, ``eval``, ``score``) to the ``fedmor`` parser."""
    group = sub.add_parser("rm", help="stage A: client reward models (Bradley-Terry)")
    commands = group.add_subparsers(dest="rm_command", metavar="COMMAND", required=True)

    train = commands.add_parser("train", help="train a reward model on a pairs.jsonl directory")
    train.add_argument("--data", type=Path, required=True, help="directory with pairs.jsonl")
    train.add_argument("--eval", type=Path, help="eval directory with pairs.jsonl")
    train.add_argument("--arch", default="qwen2_5_vl",
                       help="tiny backbone architecture: qwen2_vl, qwen2_5_vl, llava_onevision")
    train.add_argument("--backbone", "--base", dest="backbone", type=Path, metavar="DIR",
                       help="a pretrained local VLM checkpoint directory to train on (default: "
                       "build a tiny random-init --arch one, a trial backbone)")
    train.add_argument("--size", choices=("tiny", "small"), default="tiny")
    train.add_argument("--out", type=Path, required=True, help="checkpoint directory")
    train.add_argument("--steps", type=int, help="optimizer steps (default: one epoch)")
    train.add_argument("--batch-size", type=int, default=32, help="pairs per step")
    train.add_argument("--lr", type=float, default=3e-4)
    train.add_argument("--lora", action="store_true", help="train LoRA adapters + head only")
    train.add_argument("--eval-every", type=int, metavar="N",
                       help="evaluate on --eval every N steps and at the last; the best "
                       "evaluation's model is the one saved (default: about ten evaluations "
                       "per run, at most 50 steps apart; 0: the last step only)")
    train.add_argument("--patience", type=int, metavar="N",
                       help="stop after N evaluations without a better eval accuracy "
                       "(default: off)")
    train.add_argument("--dp-epsilon", type=float, help="record-level DP-SGD target epsilon")
    train.add_argument("--dp-delta", type=float, default=1e-5)
    train.add_argument("--seed", type=int, default=0)
    add_runtime_arguments(train)
    train.set_defaults(handler=_train)

    evaluate = commands.add_parser("eval", help="pairwise accuracy of a checkpoint")
    evaluate.add_argument("checkpoint", type=Path)
    evaluate.add_argument("--data", type=Path, required=True, nargs="+",
                          help="one or more directories with pairs.jsonl")
    _loading_options(evaluate)
    evaluate.set_defaults(handler=_eval)

    score = commands.add_parser("score", help="normalized, clipped score of one response")
    score.add_argument("checkpoint", type=Path)
    score.add_argument("--image", type=Path, required=True)
    score.add_argument("--prompt", required=True)
    score.add_argument("--response", required=True)
    _loading_options(score)
    score.set_defaults(handler=_score)


def _loading_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--base", type=Path,
                        help="base VLM checkpoint of a LoRA (adapter-only) reward checkpoint "
                        "(default: the directory it was trained on)")
    add_runtime_arguments(parser)


def _train(args: argparse.Namespace) -> int:
    from sdk.data import load_pairs
    from sdk.models import build_tiny_vlm
    from sdk.reward._clients import pair_texts
    from sdk.reward._config import DPSettings, LoraSettings, RewardTrainingConfig
    from sdk.reward._model import RewardModel
    from sdk.reward._training import train_reward_model

    train = load_pairs(args.data)
    evals = load_pairs(args.eval) if args.eval else []
    config = RewardTrainingConfig(
        steps=args.steps, batch_size=args.batch_size, lr=args.lr, seed=args.seed,
        eval_every=args.eval_every, patience=args.patience,
        lora=LoraSettings() if args.lora else None,
        dp=None if args.dp_epsilon is None
        else DPSettings(target_epsilon=args.dp_epsilon, delta=args.dp_delta),
    )
    if args.backbone is None:
        say(_TRIAL_NOTICE.format(arch=args.arch))
    backbone = args.backbone or build_tiny_vlm(
        args.arch, args.out / "backbone-init", corpus=pair_texts(train), seed=args.seed,
        size=args.size,
    )
    model = RewardModel.from_backbone(backbone, lora=config.lora, runtime=runtime_from_args(args))
    result = train_reward_model(model, train, evals, config, out_dir=args.out)
    summary = {
        "checkpoint": str(result.checkpoint), "architecture": model.architecture,
        "steps": result.steps, "eval_accuracy": result.eval_accuracy,
        "best_step": result.best_step, "stopped_early": result.stopped_early,
        "spent_epsilon": result.spent_epsilon, "wall_s": round(result.wall_s, 2),
        "device": str(model.device), "dtype": str(next(model.backbone.parameters()).dtype),
    }
    print(json.dumps(summary))
    return 0


def _eval(args: argparse.Namespace) -> int:
    from sdk.data import load_pairs
    from sdk.reward._model import RewardModel
    from sdk.reward._training import pairwise_accuracy

    model = RewardModel.from_pretrained(args.checkpoint, base=args.base,
                                        runtime=runtime_from_args(args))
    accuracies = {str(d): pairwise_accuracy(model, load_pairs(d)) for d in args.data}
    print(json.dumps({"architecture": model.architecture, "pairwise_accuracy": accuracies}))
    return 0


def _score(args: argparse.Namespace) -> int:
    from PIL import Image

    from sdk.reward._scorer import ClientScorer

    scorer = ClientScorer.from_pretrained(args.checkpoint, base=args.base,
                                          runtime=runtime_from_args(args))
    with Image.open(args.image) as image:
        value = scorer.score([image.convert("RGB")], [args.prompt], [args.response])[0]
    print(json.dumps({"score": value, "clip": scorer.clip}))
    return 0
