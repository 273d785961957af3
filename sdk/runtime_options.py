"""``--device`` / ``--dtype`` flags for every command that loads a model: the sdk's own
commands and those of the packages above it (``fedmor audit``, the demo) add the same flags.

Kept free of torch and transformers so that building the ``fedmor`` parser stays fast; the
flags become an ``sdk.models.Runtime`` only when a command runs.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sdk.models import Runtime

__all__ = ["add_runtime_arguments", "runtime_from_args"]


def add_runtime_arguments(parser: argparse.ArgumentParser) -> None:
    """``--device``, ``--dtype`` and ``--gradient-checkpointing`` on a command that loads a model."""
    parser.add_argument("--device", default="auto",
                        help="auto (CUDA if available), cpu, cuda, cuda:N or mps")
    parser.add_argument("--dtype", default="auto",
                        choices=("auto", "float32", "bfloat16", "float16"),
                        help="auto: bfloat16 on a GPU that supports it, float32 otherwise")
    parser.add_argument("--gradient-checkpointing", action="store_true",
                        help="recompute activations in the backward pass (less memory)")


def runtime_from_args(args: argparse.Namespace) -> Runtime:
    """The ``Runtime`` a command's ``--device`` / ``--dtype`` flags ask for; a bad device name
    raises ValueError with the accepted forms."""
    from pydantic import ValidationError

    from sdk.models import Runtime

    try:
        return Runtime(device=args.device, dtype=args.dtype,
                       gradient_checkpointing=bool(getattr(args, "gradient_checkpointing", False)))
    except ValidationError as exc:
        raise ValueError(f"--device {args.device!r}: expected auto, cpu, cuda, cuda:N or mps"
                         ) from exc
