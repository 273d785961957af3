"""``fedmor data import KIND SOURCE --out DIR``: one sub-command per source kind, so that
``fedmor data import KIND --help`` lists that kind's fields and options."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["register_import"]

_ABOUT = {
    "hf": "trl's preference columns in a datasets folder (save_to_disk), Parquet, Arrow or JSONL",
    "scores": "several rated responses per image and prompt (VLFeedback-like); pairs from "
              "rating gaps",
    "mc": "multiple-choice items (question, options, answer): the right option beats wrong ones",
    "csv": "a CSV file with the fields of pairs.jsonl and an image folder beside it",
}
_CONFIG_NAMES = ("eval_fraction", "salt", "category", "wrong", "aspects", "min_margin",
                 "dicom_frame", "allow_burned_in", "mask_border", "max_image_side",
                 "max_source_bytes", "max_source_pixels", "replace", "skip_bad")


def register_import(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``import`` and its kinds (``hf``, ``scores``, ``mc``, ``csv``) to ``fedmor data``."""
    from sdk.data._import_config import FIELDS, SourceKind

    command = commands.add_parser(
        "import", help="write a member's own data (hf, scores, mc, csv; DICOM images) as pairs",
        description="Import a member's own data; `fedmor data import KIND --help` lists a "
                    "kind's fields and options.")
    kinds = command.add_subparsers(dest="kind", metavar="SOURCE_KIND", required=True)
    for kind in SourceKind:
        fields = "\n".join(f"  {name} ({', '.join(columns)})"
                            for name, columns in FIELDS[kind].items())
        parser = kinds.add_parser(
            kind.value, help=_ABOUT[kind.value],
            formatter_class=argparse.RawDescriptionHelpFormatter,
            description=f"{_ABOUT[kind.value]}.\n\nfields (the source columns tried, in order; "
                        f"id and category optional; --column FIELD=COLUMN names another):\n"
                        f"{fields}")
        _common(parser)
        if kind is SourceKind.MC:
            parser.add_argument("--wrong", choices=("all", "one"),
                                help="pair the right option with every wrong one or one (all)")
        if kind is SourceKind.SCORES:
            parser.add_argument("--aspects", nargs="+", metavar="ASPECT",
                                help="rating aspects averaged, any case (default: all)")
            parser.add_argument("--min-margin", type=float,
                                help="smallest score gap that makes a pair (1.0)")
        parser.set_defaults(handler=_import)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", type=Path, metavar="SOURCE",
                        help="file or folder (datasets save_to_disk, Parquet, Arrow, JSONL, CSV)")
    parser.add_argument("--out", type=Path, required=True, help="output folder (must not exist)")
    split = parser.add_mutually_exclusive_group()
    split.add_argument("--eval-fraction", type=float,
                       help="share of items in eval/, 0 to 1 (default 0.1)")
    split.add_argument("--split", choices=("train", "eval"),
                       help="import everything into this split (a held-out set: --split eval)")
    parser.add_argument("--salt", help="secret mixed into the split, ids and file names")
    parser.add_argument("--category", help="category of records without one (imported)")
    parser.add_argument("--column", action="append", default=[], metavar="FIELD=COLUMN",
                        help="read FIELD from the source's COLUMN (repeatable)")
    parser.add_argument("--skip-bad", action="store_true", default=None,
                        help="skip refused records (counted, reasons in import.json) instead "
                             "of stopping at the first")
    parser.add_argument("--dicom-frame", type=int, help="DICOM: keep this frame (default all)")
    parser.add_argument("--allow-burned-in", action="store_true", default=None,
                        help="DICOM: import files marked BurnedInAnnotation YES")
    parser.add_argument("--mask-border", type=int, metavar="PIXELS",
                        help="black out this many pixels along every edge of every image "
                             "(where scanners burn in text)")
    parser.add_argument("--max-image-side", type=int, help="scale larger images down (1024)")
    parser.add_argument("--max-source-bytes", type=int,
                        help="refuse a larger source image file or cell (256 MiB)")
    parser.add_argument("--max-source-pixels", type=int,
                        help="refuse a source image (or DICOM frame) of more pixels (64 Mi)")
    parser.add_argument("--replace", action="store_true", default=None,
                        help="replace an existing output folder once the import validated")


def _plain(error: Any) -> str:
    """One pydantic error as a sentence naming the flag: ``--eval-fraction 1.5: input should be
    less than or equal to 1``."""
    flag = "--" + str(error["loc"][0]).replace("_", "-") if error["loc"] else "an option"
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
    values = {name: getattr(args, name) for name in _CONFIG_NAMES
              if getattr(args, name, None) is not None}
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
