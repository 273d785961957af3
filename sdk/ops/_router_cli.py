"""``fedmor router show|history|rollback`` (added to the ``router`` group) and ``fedmor
alignment status``: the published router versions and the reward service, as the operator
reads them from the server."""

from __future__ import annotations

import argparse
from pathlib import Path

from sdk.ops._connection import add_connection_options, connection_from_args
from sdk.ops._tables import emit, when

__all__ = ["add_router_commands", "register_admin", "register_alignment"]

_COLUMNS = ["VERSION", "ROUND", "LENGTH", "SHA256", "BYTES", "PUBLISHED"]


def _row(v: dict[str, object]) -> list[object]:
    return [v["version"], v["round_id"] or "-", v["length"], str(v["sha256"])[:16],
            v["size_bytes"], when(v["created_at"])]  # type: ignore[arg-type]


def _show(args: argparse.Namespace) -> int:
    conn = connection_from_args(args)
    if args.version is None:
        info = conn.request("GET", "/v1/router/latest", what="router show")
    else:
        found = [v for v in conn.request("GET", "/v1/router/versions", what="router history")
                 if v["version"] == args.version]
        if not found:
            raise ValueError(f"router version {args.version} does not exist")
        info = found[0]
    return emit(info, args.json, ["FIELD", "VALUE"],
                list(zip(_COLUMNS, _row(info), strict=True))
                + [(k, v) for k, v in info.items()
                   if k not in {"version", "round_id", "length", "sha256", "size_bytes",
                                "created_at"}])


def _history(args: argparse.Namespace) -> int:
    versions = connection_from_args(args).request("GET", "/v1/router/versions", what="router history")
    return emit(versions, args.json, _COLUMNS, [_row(v) for v in versions])


def _rollback(args: argparse.Namespace) -> int:
    info = connection_from_args(args).request("POST", "/v1/router/rollback",
                                              {"version": args.version}, what="rollback")
    print(f"router version {args.version} restored as version {info['version']} "
          f"(sha256 {info['sha256']})")
    return 0


def add_router_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``show``, ``history`` and ``rollback`` to the ``router`` group's ``commands``."""
    show = commands.add_parser("show", help="a published router version (default: "
                               "the newest)")
    show.add_argument("version", type=int, nargs="?", default=None)
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(handler=_show)
    history = commands.add_parser("history", help="every published router version")
    history.add_argument("--json", action="store_true", help="print JSON")
    history.set_defaults(handler=_history)
    rollback = commands.add_parser("rollback", help="publish an earlier version "
                                   "again as the newest")
    rollback.add_argument("version", type=int, help="the version to restore")
    rollback.set_defaults(handler=_rollback)
    for parser in (show, history, rollback):
        add_connection_options(parser)


def register_admin(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``fedmor admin rollback --version N``: ``fedmor router rollback N`` under its older
    name, kept for scripts."""
    admin = sub.add_parser("admin", help="same as `fedmor router rollback`, kept for scripts")
    commands = admin.add_subparsers(dest="admin_command", metavar="COMMAND", required=True)
    rollback = commands.add_parser("rollback", help="publish an earlier router version again "
                                   "as the newest (`fedmor router rollback VERSION`)")
    rollback.add_argument("--version", type=int, required=True, help="version to restore")
    add_connection_options(rollback)
    rollback.set_defaults(handler=_rollback)


def _status(args: argparse.Namespace) -> int:
    conn = connection_from_args(args)
    stats = conn.request("GET", "/v1/rewards/stats", what="alignment status")
    labels = {"batches": "reward batches", "items": "items scored",
              "failed": "items failed (member timed out or refused)",
              "empty": "empty completions", "invalid_choices": "off-format completions",
              "feedback_applied": "feedback steps applied", "step": "last GRPO step",
              "last_loss": "last loss", "router_version": "online router's base version",
              "router_updates": "online router updates"}
    rows = [(labels.get(k, k.replace("_", " ")), v) for k, v in stats.items()]
    return emit(stats, args.json, ["ALIGNMENT", "VALUE"], rows)


def _score(args: argparse.Namespace) -> int:
    import base64
    import hashlib
    import json

    data = args.image.read_bytes()
    item = {"image_sha256": hashlib.sha256(data).hexdigest(),
            "image_b64": base64.b64encode(data).decode(), "prompt": args.prompt,
            "response": args.response, "options": args.option}
    answer = connection_from_args(args).request(
        "POST", "/v1/rewards", {"items": [item], "method": args.method}, what="reward query",
        timeout_s=args.timeout)
    if args.json:
        print(json.dumps(answer))
    else:
        failed = " (failed: the member timed out or refused)" if answer["failed"] else ""
        print(f"reward {answer['rewards'][0]:.4f} ({args.method}, router version "
              f"{answer['router_version']}){failed}")
    return 1 if answer["failed"] else 0


def register_alignment(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``fedmor alignment status`` (operator) and ``fedmor alignment score`` (aligner)."""
    group = sub.add_parser("alignment", help="the reward service: its status (operator), one "
                           "reward query (aligner)")
    commands = group.add_subparsers(dest="alignment_command", metavar="COMMAND", required=True)
    status = commands.add_parser("status", help="scored items, failures, feedback steps, the "
                                 "online router")
    status.add_argument("--json", action="store_true", help="print JSON")
    add_connection_options(status)
    status.set_defaults(handler=_status)
    score = commands.add_parser("score", help="(aligner) one reward query through the server, "
                                "as the GRPO job sends them: check the service end to end")
    score.add_argument("--image", type=Path, required=True, help="the query's image (PNG, JPEG)")
    score.add_argument("--prompt", required=True)
    score.add_argument("--response", required=True, help="the completion to reward")
    score.add_argument("--option", action="append", default=[],
                       help="a multiple-choice option (repeatable; none: an open prompt)")
    score.add_argument("--method", default="mor", help="reward selection (default: mor)")
    score.add_argument("--timeout", type=float, default=120.0, help="seconds")
    score.add_argument("--json", action="store_true", help="print JSON")
    add_connection_options(score)
    score.set_defaults(handler=_score)
