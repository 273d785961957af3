"""The ``fedmor`` command line: one subcommand group per stage.

Each area registers its own subcommands (``register(subparsers)``) and imports its heavy
dependencies (torch, transformers) only when a command runs, so ``fedmor --help`` stays fast.
The areas are found through the ``fedmor.commands`` entry-point group (pyproject.toml), so this
module names no package above ``sdk``: an app installed beside the sdk brings its own commands.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import tomllib

from sdk._version import __version__
from sdk.progress import set_quiet

Registrar = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]


ENTRY_POINT_GROUP = "fedmor.commands"
_PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def _table() -> dict[str, str]:
    """The group's entry points: command name -> ``module:function``."""
    if _PYPROJECT.exists():
        project = tomllib.loads(_PYPROJECT.read_text()).get("project", {})
        return dict(project.get("entry-points", {}).get(ENTRY_POINT_GROUP, {}))
    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def command_targets() -> list[str]:
    """``module:function`` of each subcommand group, by group name (the order ``--help`` lists
    them in: installers do not keep the table's order).

    In a source checkout (pyproject.toml beside the package) its own table: the installed
    metadata may come from another checkout or an older install (an editable install's is not
    rebuilt when a group is added). Otherwise the installed entry points of the group.
    """
    table = _table()
    return [table[name] for name in sorted(table)]


def _registrars(only: str | None = None) -> list[Registrar]:
    """Every group's registrar, or with ``only`` (a command named by an entry point) just its
    own: ``fedmor rounds list`` then imports no model code."""
    targets = [_table()[only]] if only is not None else command_targets()
    out: list[Registrar] = []
    for target in targets:
        module, _, attr = target.partition(":")
        out.append(getattr(importlib.import_module(module), attr or "register"))
    return out


def add_backup_command(group: argparse._SubParsersAction[argparse.ArgumentParser], *,
                       settings: Callable[[], type[Any]], app: str) -> None:
    """Add ``backup OUT [--config FILE]`` to an app's subcommand ``group``: an online backup of
    the SQLite database its settings (the class ``settings`` returns, imported only when the
    command runs) name; the app may keep running."""
    p = group.add_parser("backup", help=f"online backup of the {app}'s SQLite database")
    p.add_argument("out", type=Path, help="the backup file to create")
    p.add_argument("--config", type=Path, default=None, help="TOML/JSON settings file")

    def run(args: argparse.Namespace) -> int:
        from sdk.serving import load_settings
        from sdk.storage import backup_sqlite

        cfg = load_settings(settings(), args.config)
        size = backup_sqlite(Path(cfg.db_path), args.out)
        print(f"backed up {cfg.db_path} to {args.out} ({size} bytes)")
        return 0

    p.set_defaults(handler=run)


_QUIET_HELP = ("print only results and errors: no progress bars or step lines (also "
               "FEDMOR_QUIET=1)")


def _add_quiet(parser: argparse.ArgumentParser) -> None:
    """``--quiet`` on ``parser`` and on every command below it, so it goes anywhere on the line
    (``fedmor --quiet rm train ...`` or ``fedmor rm train ... --quiet``)."""
    # SUPPRESS: a command's own default does not undo a --quiet given before the command.
    parser.add_argument("--quiet", "-q", action="store_true", default=argparse.SUPPRESS,
                        help=_QUIET_HELP)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _add_quiet(child)


ROLES_HELP: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("every role", ("keys", "enroll", "profile")),
    ("member (hospital, bank)", ("data", "rm", "client")),
    ("operator", ("server", "roster", "members", "rounds", "router", "alignment", "console")),
    ("aligner", ("policy", "align")),
    ("privacy officer, auditor", ("audit",)),
    ("trying it out", ("demo",)),
)
"""Which commands each role uses, in the order ``fedmor --help`` lists them (a command
registered but not named here is listed under "other")."""


def _by_role(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> str:
    """``fedmor --help``'s command list, one section per role."""
    helps = {action.dest: action.help or "" for action in sub._choices_actions}
    width = max(map(len, helps), default=8) + 2
    placed: set[str] = set()
    lines = []
    for role, names in (*ROLES_HELP, ("other", tuple(sorted(helps)))):
        found = [n for n in names if n in helps and n not in placed]
        if found:
            lines.append(f"{role}:")
            lines += [f"  {n.ljust(width)}{helps[n]}" for n in found]
            placed.update(found)
    return "\n".join(lines)


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """``parser`` and every parser below it."""
    out = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                out += _parsers(child)
    return out


def _innermost(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.ArgumentParser:
    """The parser of the deepest command ``argv`` names (``rounds open`` for ``fedmor rounds open
    router_secagg --x``), whose usage an error about its arguments should print."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for i, token in enumerate(argv):
                if token in action.choices:
                    return _innermost(action.choices[token], argv[i + 1:])
    return parser


def _unrecognized(parser: argparse.ArgumentParser, extras: Sequence[str]) -> str:
    """``unrecognized arguments`` with the fix: the option it nearly spells, or, on a command
    that takes ``--param``, the same value written as a parameter."""
    text = f"unrecognized arguments: {' '.join(extras)}"
    flag = extras[0]
    if not flag.startswith("--"):
        return text
    options = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
    near = difflib.get_close_matches(flag.split("=")[0], options, n=1, cutoff=0.8)
    if near:
        return f"{text} (did you mean {near[0]}? options are not abbreviated)"
    if "--param" in options:
        name, _, value = flag[2:].partition("=")
        if not value and len(extras) > 1 and not extras[1].startswith("-"):
            value = extras[1]
        return (f"{text} (a round's parameters go in --param: --param "
                f"{name.replace('-', '_')}={value or 'VALUE'})")
    return text


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or with ``only`` the parser of that one command (its entry point)."""
    parser = argparse.ArgumentParser(
        prog="fedmor", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Federated Mixture-of-Rewards alignment of vision-language models.",
    )
    parser.add_argument("--version", action="version", version=f"fedmor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND",
                                help="one of the commands below; `fedmor COMMAND --help`")
    for register in _registrars(only):
        register(sub)
    parser.epilog = _by_role(sub)
    sub._choices_actions.clear()  # listed by role in the epilog instead
    _add_quiet(parser)
    for each in _parsers(parser):
        each.allow_abbrev = False  # --min-client is an error, not --min-clients
    return parser


def _command(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names, when an entry point registers it under that name."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return first if first is not None and first in _table() else None


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_command(argv))
    args, extras = parser.parse_known_args(argv)
    if extras:
        command = _innermost(parser, argv)
        command.error(_unrecognized(command, extras))
    if getattr(args, "quiet", False):
        set_quiet()  # through the environment: processes the command starts follow it
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        return int(handler(args) or 0)
    except Exception as exc:
        said = _one_line(exc)
        if said is None:
            raise
        print(f"fedmor: error: {said}", file=sys.stderr)
        return 1


def _one_line(exc: Exception) -> str | None:
    """What a user reads for an error of theirs (a wrong value, a path that is missing, a
    folder or a file that exists, a server's refusal), else None: any other exception is a
    bug, whose traceback is kept. An operating-system error that names a path is the user's
    path (``IsADirectoryError: [Errno 21] ...`` reads as ``somedir: Is a directory``)."""
    if isinstance(exc, OSError) and exc.filename is not None:
        where = exc.filename if exc.filename2 is None else f"{exc.filename} -> {exc.filename2}"
        return f"{where}: {exc.strerror or exc}"
    if isinstance(exc, (ValueError, FileNotFoundError, PermissionError, _refusal())):
        return str(exc)
    return None


def _refusal() -> type[Exception]:
    """The type of a request the server refused (imported on failure: ``--help`` stays
    fast)."""
    from sdk.wire import RequestRefused

    return RequestRefused


if __name__ == "__main__":
    raise SystemExit(main())
