"""``fedmor alignment status`` (operator) and ``fedmor alignment score`` (aligner): the reward
service as the server reports it, and one reward query through it."""

from __future__ import annotations

import argparse
from pathlib import Path

from sdk.ops._connection import add_connection_options
from sdk.ops._operator_client import client_from_args
from sdk.ops._tables import emit
from sdk.wire import AlignerItem, AlignerRequest, AlignerStats

__all__ = ["heads_phrase", "register_alignment"]


def heads_phrase(stats: AlignerStats) -> str:
    """``version V (lineage L): k of K heads (masked: name: why, ...)``: what the reward
    service selects from now (``fedmor alignment status`` and ``fedmor router show``)."""
    if stats.serving_version is None:
        return "no router version to serve yet"
    heads, masked = stats.heads, stats.masked_heads
    text = (f"version {stats.serving_version} (lineage {stats.serving_lineage or '-'})"
            f": {len(heads) - len(masked)} of {len(heads)} heads")
    if masked:
        text += " (masked: " + ", ".join(f"{n}: {why}" for n, why in masked.items()) + ")"
    return text


def _status(args: argparse.Namespace) -> int:
    stats = client_from_args(args).alignment_stats()
    labels = {"batches": "reward batches", "items": "items scored",
              "failed": "items failed (member timed out or refused)",
              "empty": "empty completions", "invalid_choices": "off-format completions",
              "feedback_applied": "feedback steps applied", "step": "last GRPO step",
              "last_loss": "last loss", "router_version": "online router's base version",
              "router_updates": "online router updates"}
    hidden = {"heads", "masked_heads", "serving_version", "serving_lineage"}
    data = stats.model_dump(mode="json")
    rows = [(labels.get(k, k.replace("_", " ")), v) for k, v in data.items()
            if k not in hidden]
    rows.append(("router served", heads_phrase(stats)))
    return emit(data, args.json, ["ALIGNMENT", "VALUE"], rows)


def _score(args: argparse.Namespace) -> int:
    import base64
    import hashlib

    data = args.image.read_bytes()
    item = AlignerItem(image_sha256=hashlib.sha256(data).hexdigest(),
                       image_b64=base64.b64encode(data).decode(), prompt=args.prompt,
                       response=args.response, options=args.option)
    answer = client_from_args(args).score(AlignerRequest(items=[item], method=args.method),
                                          timeout_s=args.timeout)
    if args.json:
        print(answer.model_dump_json())
    else:
        failed = " (failed: the member timed out or refused)" if answer.failed else ""
        print(f"reward {answer.rewards[0]:.4f} ({args.method}, router version "
              f"{answer.router_version}){failed}")
    return 1 if answer.failed else 0


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
