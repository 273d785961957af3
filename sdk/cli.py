"""The ``fedmor`` command line: one subcommand group per stage.

Each area registers its own subcommands (``register(subparsers)``) and imports its heavy
dependencies (torch, transformers) only when a command runs, so ``fedmor --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from sdk._version import __version__

Registrar = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]


# Modules that own a subcommand group, in the order ``--help`` lists them.
_COMMAND_MODULES: tuple[str, ...] = (
    "sdk._demo",
    "sdk.data._cli",
    "sdk.reward._cli",
    "sdk.router._cli",
    "sdk.alignment._cli",
    "server_app._cli",
    "client_app._cli",
    "attacks._cli",
)


def _registrars() -> list[Registrar]:
    return [importlib.import_module(name).register for name in _COMMAND_MODULES]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fedmor",
        description="Federated Mixture-of-Rewards alignment of vision-language models.",
    )
    parser.add_argument("--version", action="version", version=f"fedmor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for register in _registrars():
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        return int(handler(args) or 0)
    except (ValueError, FileNotFoundError) as exc:
        print(f"fedmor: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
