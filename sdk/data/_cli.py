"""``fedmor data ...``: generate the synthetic benchmark, import a member's own data and check
data directories."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from sdk.data._import_cli import register_import

__all__ = ["register"]


_SYNTH_OPTIONS: tuple[tuple[str, type, str], ...] = (
    ("--seed", int, "random seed (default 0)"),
    ("--image-size", int, "side of the square images in px (default 84)"),
    ("--train-pairs", int, "training pairs per client (default 2000)"),
    ("--eval-pairs", int, "eval pairs per client (default 200)"),
    ("--heldout-pairs", int, "pairs per held-out category (default 200)"),
    ("--warmup-queries", int, "warm-up queries per multiple-choice category (default 200)"),
    ("--policy-train-queries", int, "GRPO queries per client category (default 64)"),
    ("--policy-eval-queries", int, "eval queries per category (default 50)"),
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``data`` group (``synth``, ``import``, ``check``) to the ``fedmor`` parser."""
    group = sub.add_parser("data", help="stage A data: synthesize, import and check preference data")
    commands = group.add_subparsers(dest="data_command", metavar="COMMAND", required=True)

    synth = commands.add_parser(
        "synth", help="write the synthetic heterogeneous VQA preference benchmark"
    )
    synth.add_argument("--out", type=Path, required=True, help="output directory")
    # Defaults live in SynthConfig only: an option left out is not passed on.
    for flag, kind, text in _SYNTH_OPTIONS:
        synth.add_argument(flag, type=kind, help=text)
    synth.add_argument("--clients", nargs="+", help="client categories (default: all five)")
    synth.add_argument("--heldout", nargs="*", help="held-out categories (default: all four)")
    synth.set_defaults(handler=_synth)

    register_import(commands)

    check = commands.add_parser(
        "check", help="validate every pairs.jsonl / queries.jsonl below a directory"
    )
    check.add_argument("directory", type=Path)
    check.set_defaults(handler=_check)


def _synth(args: argparse.Namespace) -> int:
    from sdk.data._synth import SynthConfig, synthesize

    names = [flag[2:].replace("-", "_") for flag, _kind, _text in _SYNTH_OPTIONS]
    values = {name: getattr(args, name) for name in [*names, "clients", "heldout"]}
    config = SynthConfig.model_validate({k: v for k, v in values.items() if v is not None})
    start = time.perf_counter()
    manifest = synthesize(config, args.out, progress=lambda line: print(line, flush=True))
    total = sum(manifest.counts.values())
    print(f"wrote {total} records to {args.out} in {time.perf_counter() - start:.1f} s")
    return 0


def _check(args: argparse.Namespace) -> int:
    from sdk.data._check import shared_images
    from sdk.data._loading import PAIRS_FILE, QUERIES_FILE, iter_pairs, iter_queries

    root: Path = args.directory
    if not root.is_dir():
        raise FileNotFoundError(f"no such directory: {root}")
    found = 0
    for path in sorted([*root.rglob(PAIRS_FILE), *root.rglob(QUERIES_FILE)]):
        loader = iter_pairs if path.name == PAIRS_FILE else iter_queries
        count = sum(1 for _record in loader(path.parent))
        print(f"{path.parent}: {count} records ok" if count else f"{path.parent}: empty")
        found += 1
    if not found:
        raise FileNotFoundError(f"no {PAIRS_FILE} or {QUERIES_FILE} below {root}")
    shared = shared_images(root)
    for train, evals in shared[:5]:
        print(f"warning: the same image is in train and eval: {train} and {evals}")
    if shared:
        print(f"warning: {len(shared)} images appear in both a train and an eval folder")
    return 0
