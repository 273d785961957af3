"""``fedmor policy ...``: what an aligner does with a GRPO run's artefacts."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sdk.runtime_options import add_runtime_arguments, runtime_from_args

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``policy`` group (``export``) to the ``fedmor`` parser."""
    group = sub.add_parser("policy", help="stage C: the aligned policy's artefacts")
    commands = group.add_subparsers(dest="policy_command", metavar="COMMAND", required=True)
    export = commands.add_parser(
        "export", help="merge a GRPO LoRA adapter (RUN/adapter) into a full policy checkpoint")
    export.add_argument("adapter", type=Path, help="adapter directory written by align")
    export.add_argument("--out", type=Path, required=True, help="full policy directory")
    export.add_argument("--base", type=Path,
                        help="base checkpoint (default: the one the adapter was trained on)")
    add_runtime_arguments(export)
    export.set_defaults(handler=_export)


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
