"""``fedmor policy ...``: what an aligner does with a GRPO run's artefacts."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sdk.runtime_options import add_runtime_arguments, runtime_from_args

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``policy`` group (``prepare``, ``export``) to the ``fedmor`` parser."""
    group = sub.add_parser("policy", help="stage C: prepare the starting policy, export the "
                           "aligned one")
    commands = group.add_subparsers(dest="policy_command", metavar="COMMAND", required=True)
    _prepare_parser(commands)
    export = commands.add_parser(
        "export", help="merge a GRPO LoRA adapter (RUN/adapter) into a full policy checkpoint")
    export.add_argument("adapter", type=Path, help="adapter directory written by align")
    export.add_argument("--out", type=Path, required=True, help="full policy directory")
    export.add_argument("--base", type=Path,
                        help="base checkpoint (default: the one the adapter was trained on)")
    add_runtime_arguments(export)
    export.set_defaults(handler=_export)


def _prepare_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    prepare = commands.add_parser(
        "prepare", help="the starting policy `fedmor align --policy` reads: a local checkpoint, "
        "optionally warmed up on answered queries")
    base = prepare.add_mutually_exclusive_group(required=True)
    base.add_argument("--base", type=Path, help="local checkpoint directory (Qwen2-VL, "
                      "Qwen2.5-VL, LLaVA-OneVision)")
    base.add_argument("--tiny", metavar="ARCH", help="instead: a tiny random model of ARCH "
                      "(qwen2_5_vl, qwen2_vl, llava_onevision), for trials and tests")
    prepare.add_argument("--out", type=Path, required=True, help="policy directory to create")
    prepare.add_argument("--warmup", type=Path, help="supervised warm-up first, on this query "
                         "folder's answers (e.g. DATA/policy/warmup of `fedmor data synth`)")
    prepare.add_argument("--warmup-steps", type=int, default=None,
                         help="warm-up steps (default: WarmupConfig's)")
    prepare.add_argument("--label-noise", type=float, default=0.0, help="share of warm-up "
                         "queries trained on a random option (the demo uses 0.4: a base that "
                         "hesitates, on which GRPO's rewards separate)")
    prepare.add_argument("--seed", type=int, default=0)
    add_runtime_arguments(prepare)
    prepare.set_defaults(handler=_prepare)


def _prepare(args: argparse.Namespace) -> int:
    import tempfile

    from sdk.alignment._prepare import prepare_policy
    from sdk.alignment._warmup import WarmupConfig
    from sdk.progress import say

    cfg = WarmupConfig(seed=args.seed, label_noise=args.label_noise)
    if args.warmup_steps is not None:
        cfg = cfg.model_copy(update={"steps": args.warmup_steps})
    with tempfile.TemporaryDirectory() as tmp:
        base = args.base
        if base is None:
            from sdk.data import load_queries
            from sdk.models import build_tiny_vlm

            corpus = [] if args.warmup is None else [
                text for q in load_queries(args.warmup) for text in (q.prompt, str(q.answer))]
            base = build_tiny_vlm(args.tiny, Path(tmp) / "base", corpus=corpus, seed=args.seed)
        source = None if args.base else f"tiny {args.tiny} (random weights, seed {args.seed})"
        out = prepare_policy(base, args.out, warmup=args.warmup, config=cfg,
                             runtime=runtime_from_args(args), progress=say, source=source)
    print(json.dumps({"policy": str(out)} | json.loads((out / "prepared.json").read_text())))
    return 0


def _export(args: argparse.Namespace) -> int:
    from sdk.alignment._errors import AlignmentError
    from sdk.alignment._export import export_policy

    try:
        out = export_policy(args.adapter, args.out, base=args.base,
                            runtime=runtime_from_args(args))
    except AlignmentError as exc:
        raise ValueError(str(exc)) from exc
    print(json.dumps({"policy": str(out)}))
    return 0
