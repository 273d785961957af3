"""``fedmor data ...``: generate the synthetic benchmark, import a member's own data and check
data directories."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

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

    _register_import(commands)

    check = commands.add_parser(
        "check", help="validate every pairs.jsonl / queries.jsonl below a directory"
    )
    check.add_argument("directory", type=Path)
    check.set_defaults(handler=_check)


def _register_import(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from sdk.data._import_config import SourceKind

    command = commands.add_parser(
        "import", help="write a member's own data (hf, scores, mc, csv; DICOM images) as pairs"
    )
    command.add_argument("kind", choices=[k.value for k in SourceKind], metavar="SOURCE_KIND",
                         help="hf, scores, mc or csv")
    command.add_argument("source", type=Path, metavar="SOURCE",
                         help="file or folder (datasets save_to_disk, Parquet, Arrow, JSONL, CSV)")
    command.add_argument("--out", type=Path, required=True, help="output folder (must not exist)")
    split = command.add_mutually_exclusive_group()
    split.add_argument("--eval-fraction", type=float,
                       help="share of items in eval/, 0 to 1 (default 0.1)")
    split.add_argument("--split", choices=("train", "eval"),
                       help="import everything into this split (a held-out set: --split eval)")
    command.add_argument("--salt", help="secret mixed into the split, ids and file names")
    command.add_argument("--category", help="category of records without one (imported)")
    command.add_argument("--column", action="append", default=[], metavar="FIELD=COLUMN",
                         help="read FIELD from the source's COLUMN (repeatable)")
    command.add_argument("--wrong", choices=("all", "one"), help="mc: wrong options per item")
    command.add_argument("--aspects", nargs="+", help="scores: aspects averaged (default all)")
    command.add_argument("--min-margin", type=float, help="scores: smallest score gap (1.0)")
    command.add_argument("--dicom-frame", type=int, help="DICOM: keep this frame (default all)")
    command.add_argument("--allow-burned-in", action="store_true", default=None,
                         help="DICOM: import files marked BurnedInAnnotation YES")
    command.add_argument("--max-image-side", type=int, help="scale larger images down (1024)")
    command.add_argument("--replace", action="store_true", default=None,
                         help="replace an existing output folder once the import validated")
    command.set_defaults(handler=_import)


def _plain(error: Any) -> str:
    """One pydantic error as a sentence naming the flag: ``--eval-fraction 1.5: input should be
    less than or equal to 1``."""
    flag = "--" + "-".join(str(part) for part in error["loc"][:1]).replace("_", "-")
    message = str(error["msg"])
    return f"{flag} {error.get('input')!r}: {message[:1].lower()}{message[1:]}"


def _import(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from sdk.data._import import ImportInterrupted, import_data
    from sdk.data._import_config import ImportConfig

    columns = {}
    for pair in args.column:
        field, _, column = pair.partition("=")
        if not field or not column:
            raise ValueError(f"--column takes FIELD=COLUMN, got {pair!r}")
        columns[field] = column
    names = ("eval_fraction", "salt", "category", "wrong", "aspects", "min_margin",
             "dicom_frame", "allow_burned_in", "max_image_side", "replace")
    values = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    if args.split is not None:
        values["eval_fraction"] = 1.0 if args.split == "eval" else 0.0
    try:
        config = ImportConfig.model_validate({**values, "columns": columns})
    except ValidationError as exc:
        raise ValueError("; ".join(_plain(error) for error in exc.errors())) from exc
    try:
        summary = import_data(args.kind, args.source, args.out, config)
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the writer has removed its folder
        signal = "SIGTERM" if isinstance(exc, ImportInterrupted) else "SIGINT"
        print(f"fedmor: import interrupted ({signal}); nothing was written to {args.out}",
              file=sys.stderr)
        return 143 if signal == "SIGTERM" else 130
    for line in summary.render():
        print(line)
    print(f"wrote {args.out}")
    return 0


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
