"""``fedmor router show|history|lineages|rollback`` (added to the ``router`` group) and
``fedmor alignment status``: the published router versions, their lineages and the reward
service, as the operator reads them from the server."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from sdk.ops._connection import Connection, add_connection_options, connection_from_args
from sdk.ops._tables import emit, when
from sdk.wire import RequestRefused, RouterVersionInfo

__all__ = ["add_router_commands", "register_admin", "register_alignment"]

_COLUMNS = ["VERSION", "LINEAGE", "FROM", "LENGTH", "SHA256", "BYTES", "PUBLISHED"]
_SHOWN = {"version", "round_id", "length", "sha256", "size_bytes", "created_at",
          "router_config", "restored", "carried_from"}


def _lineage(v: dict[str, Any]) -> object:
    ref = v.get("router_config")
    return ref["lineage"] if ref else "-"


def _row(v: dict[str, Any]) -> list[object]:
    origin = RouterVersionInfo.model_validate(v).origin()
    return [v["version"], _lineage(v), origin, v["length"], str(v["sha256"])[:16],
            v["size_bytes"], when(v["created_at"])]


def _serving(conn: Connection) -> str | None:
    """What the reward service selects from now (``k of K heads``, masked heads named), or
    None when this caller may not read the reward service's status."""
    try:
        stats = conn.request("GET", "/v1/rewards/stats", what="alignment status")
    except RequestRefused:
        return None
    return None if stats.get("serving_version") is None else _heads_phrase(stats)


def _heads_phrase(stats: dict[str, Any]) -> str:
    """``version V (lineage L): k of K heads (masked: name: why, ...)``."""
    heads, masked = stats.get("heads") or [], stats.get("masked_heads") or {}
    if stats.get("serving_version") is None:
        return "no router version to serve yet"
    text = (f"version {stats['serving_version']} (lineage {stats.get('serving_lineage') or '-'})"
            f": {len(heads) - len(masked)} of {len(heads)} heads")
    if masked:
        text += " (masked: " + ", ".join(f"{n}: {why}" for n, why in masked.items()) + ")"
    return text


def _show(args: argparse.Namespace) -> int:
    conn = connection_from_args(args)
    if args.version is None:
        try:
            info = conn.request("GET", "/v1/router/latest", what="router show")
        except RequestRefused as exc:
            # None in the current lineage yet: the error says where the newest is, and the
            # reward service's own view says what it serves meanwhile.
            serving = _serving(conn) if exc.status == 404 else None
            if serving is not None and not args.json:
                print(f"selection serves {serving}")
            raise
        serving = _serving(conn)
    else:
        found = [v for v in conn.request("GET", "/v1/router/versions", what="router history")
                 if v["version"] == args.version]
        if not found:
            raise ValueError(f"router version {args.version} does not exist")
        info, serving = found[0], None
    rows = list(zip(_COLUMNS, _row(info), strict=True)) + [
        (k, v) for k, v in info.items() if k not in _SHOWN]
    if serving is not None:
        rows.append(("SELECTION", serving))
    return emit(info if serving is None else {**info, "serving": serving}, args.json,
                ["FIELD", "VALUE"], rows)


def _history(args: argparse.Namespace) -> int:
    versions = connection_from_args(args).request("GET", "/v1/router/versions",
                                                  what="router history")
    return emit(versions, args.json, _COLUMNS, [_row(v) for v in versions])


def _lineages(args: argparse.Namespace) -> int:
    found = connection_from_args(args).request("GET", "/v1/router/lineages",
                                               what="router lineages")
    rows = [[f"{x['lineage']}{' (current)' if x['current'] else ''}", str(x["sha256"])[:12],
             ", ".join(x["config"]["heads"]), x["num_params"],
             x.get("first_version") or "none yet", x.get("latest_version") or "none yet",
             x.get("started_by") or "-", when(x["created_at"])] for x in found]
    return emit(found, args.json, ["LINEAGE", "CONFIG SHA256", "MEMBERS (HEADS)", "PARAMETERS",
                                   "FIRST", "LATEST", "STARTED BY", "STARTED"], rows)


def _rollback(args: argparse.Namespace) -> int:
    info = connection_from_args(args).request("POST", "/v1/router/rollback",
                                              {"version": args.version}, what="rollback")
    print(f"router version {args.version} restored as version {info['version']} "
          f"(sha256 {info['sha256']})")
    return 0


def add_router_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``show``, ``history``, ``lineages`` and ``rollback`` to the ``router`` group's
    ``commands``."""
    show = commands.add_parser("show", help="a published router version (default: "
                               "the newest)")
    show.add_argument("version", type=int, nargs="?", default=None)
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(handler=_show)
    history = commands.add_parser("history", help="every published router version, with its "
                                  "lineage and where it came from")
    history.add_argument("--json", action="store_true", help="print JSON")
    history.set_defaults(handler=_history)
    lineages = commands.add_parser("lineages", help="every router lineage: configuration "
                                   "hash, members (heads), first and latest version")
    lineages.add_argument("--json", action="store_true", help="print JSON")
    lineages.set_defaults(handler=_lineages)
    rollback = commands.add_parser("rollback", help="publish an earlier version "
                                   "again as the newest")
    rollback.add_argument("version", type=int, help="the version to restore")
    rollback.set_defaults(handler=_rollback)
    for parser in (show, history, lineages, rollback):
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
    hidden = {"heads", "masked_heads", "serving_version", "serving_lineage"}
    rows = [(labels.get(k, k.replace("_", " ")), v) for k, v in stats.items()
            if k not in hidden]
    rows.append(("router served", _heads_phrase(stats)))
    return emit(stats, args.json, ["ALIGNMENT", "VALUE"], rows)


def _score(args: argparse.Namespace) -> int:
    import base64
    import hashlib

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
