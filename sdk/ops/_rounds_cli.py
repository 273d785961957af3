"""``fedmor rounds open|check|list|show|wait|cancel``: the operator's rounds. ``open`` sends no
vector length unless ``--length`` is given: the server takes it from its router configuration.
``check`` says, before a round is opened, which members' announced round terms refuse it. The
round kinds are the registry's (``sdk.rounds.ROUND_KINDS``)."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from sdk.ops._connection import add_connection_options
from sdk.ops._operator_client import OperatorClient, client_from_args
from sdk.ops._tables import emit, print_table, when
from sdk.wire import MemberReport, RoundCancel, RoundCreate, RoundInfo

__all__ = ["register_rounds"]


def _names(ops: OperatorClient) -> dict[str, str]:
    """client id -> roster name, for the tables (ids alone mean nothing to a reader)."""
    return {m.client_id: m.name for m in ops.members() if m.client_id}


def _participants(ops: OperatorClient, members: list[str]) -> list[str]:
    """Client ids for ``members`` (roster names or client ids)."""
    ids = {name: cid for cid, name in _names(ops).items()}
    known = set(ids.values())
    out = []
    for m in members:
        if m in known:
            out.append(m)
        elif m in ids:
            out.append(ids[m])
        else:
            raise ValueError(f"{m!r} is not an enrolled identity (`fedmor members list`)")
    return out


def _param(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--param takes KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def _split(values: list[str]) -> list[str]:
    """``--members`` values, each one name or a comma-separated list."""
    return [m for part in values for m in part.split(",") if m]


def _open(args: argparse.Namespace) -> int:
    ops = client_from_args(args)
    participants = _participants(ops, _split(args.members)) if args.members else None
    min_clients = args.min_clients if args.min_clients is not None else (
        None if participants is None else len(participants))
    req = RoundCreate(kind=args.kind, params=dict(args.param), vector_length=args.length,
                      participants=participants, stage_deadline_s=args.deadline,
                      **({} if min_clients is None else {"min_clients": min_clients}))
    info = ops.open_round(req)
    if args.wait is not None:
        return _await(ops, info.round_id, args.wait, args.json)
    return _print_round(ops, info, args.json)


def _refusal(report: MemberReport, kind: str, listed: int, params: dict[str, Any],
             min_clients: int | None) -> str | None:
    """Why a member with these announced round terms would refuse a round of ``kind`` over
    ``listed`` members (None: it would take part; the member's own check still decides)."""
    terms = report.round_terms
    if terms is None:
        return "unknown: it announced no round terms (not started since, or an older client)"
    if kind not in terms.round_kinds:
        return f"round_kind: it takes part only in {', '.join(terms.round_kinds) or 'none'}"
    if listed < terms.min_participants:
        return f"participants: {listed} < its min_participants {terms.min_participants}"
    survivors = max(int(params.get("threshold", 0)), min_clients or 0)
    if kind == "router_secagg" and survivors and survivors < terms.min_threshold:
        return f"threshold: {survivors} survivor(s) could be accepted < its min_threshold " \
               f"{terms.min_threshold}"
    if terms.require_dp and not params.get("dp"):
        return "dp: it takes part only in rounds with client-level DP (--param dp=...)"
    return None


def _check(args: argparse.Namespace) -> int:
    members = [m for m in client_from_args(args).member_reports()
               if m.role == "member" and m.state == "enrolled"]
    wanted = set(_split(args.members))
    if wanted:
        members = [m for m in members if m.name in wanted or m.client_id in wanted]
    params = dict(args.param)
    rows = [[m.name, why] for m in members
            if (why := _refusal(m, args.kind, len(members), params,
                                args.min_clients)) is not None]
    if args.json:
        print(json.dumps([{"member": name, "refusal": why} for name, why in rows]))
    elif rows:
        print_table(["MEMBER", "WOULD REFUSE (RULE: WHY)"], rows,
                    title=f"{args.kind} over {len(members)} member(s)")
    else:
        print(f"no member's announced round terms refuse a {args.kind} round over "
              f"{len(members)} member(s)")
    return 1 if any(not why.startswith("unknown") for _, why in rows) else 0


def _row(info: RoundInfo, names: dict[str, str]) -> list[Any]:
    def who(ids: list[str]) -> str:
        return ", ".join(names.get(c, c) for c in ids) or "-"

    refused = ", ".join(f"{names.get(r.client_id, r.client_id)} ({r.reason})"
                        for r in info.refusals) or "-"
    eps = "-" if info.dp is None else f"{info.dp.epsilon:.3g}"
    return [info.round_id, info.kind, info.status, info.stage or "-", who(info.participants),
            who(info.dropouts), refused, eps, info.vector_length, info.router_version,
            when(info.created_at)]


_COLUMNS = ["ID", "KIND", "STATUS", "STAGE", "PARTICIPANTS", "DROPOUTS", "REFUSED (RULE)",
            "DP EPSILON", "LENGTH", "ROUTER", "OPENED"]


def _list(args: argparse.Namespace) -> int:
    ops = client_from_args(args)
    rounds = ops.rounds(args.status)
    names = {} if args.json else _names(ops)
    return emit([r.model_dump(mode="json") for r in rounds], args.json, _COLUMNS,
                [_row(r, names) for r in rounds])


def _print_round(ops: OperatorClient, info: RoundInfo, as_json: bool) -> int:
    if as_json:
        print(info.model_dump_json())
        return 0
    fields = [*zip(_COLUMNS, _row(info, _names(ops)), strict=True), ("error", info.error),
              ("finished", when(info.finished_at))]
    if info.resumed:
        fields.append(("resumed", info.resumed))
    print_table(["FIELD", "VALUE"], fields, title=f"round {info.round_id}")
    if info.failures:
        print_table(["MEMBER", "STAGE", "WHY IT LEFT"],
                    [[f.member, f.stage, f.reason] for f in info.failures],
                    title="members that left the round")
    return 0


def _show(args: argparse.Namespace) -> int:
    ops = client_from_args(args)
    return _print_round(ops, ops.round(args.round_id), args.json)


def _await(ops: OperatorClient, round_id: int, timeout: float, as_json: bool) -> int:
    deadline = time.monotonic() + timeout
    while True:
        info = ops.round(round_id)
        if info.status != "open":
            _print_round(ops, info, as_json)
            return 0 if info.status == "finished" else 1
        if time.monotonic() >= deadline:
            raise ValueError(f"round {round_id} still open at stage {info.stage} after "
                             f"{timeout:g} s")
        time.sleep(0.5)


def _wait(args: argparse.Namespace) -> int:
    return _await(client_from_args(args), args.round_id, args.timeout, args.json)


def _cancel(args: argparse.Namespace) -> int:
    info = client_from_args(args).cancel_round(args.round_id, RoundCancel(reason=args.reason))
    print(f"round {info.round_id} cancelled: {info.error}")
    return 0


_DEFAULT_KIND = RoundCreate.model_fields["kind"].default


def register_rounds(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``fedmor rounds ...``: the kinds offered are the registry's."""
    from sdk.rounds import ROUND_KINDS

    group = sub.add_parser("rounds", help="open, follow and cancel rounds")
    commands = group.add_subparsers(dest="rounds_command", metavar="COMMAND", required=True)
    op = commands.add_parser("open", help="open a round (its length from the server's "
                             "router configuration unless --length)")
    op.add_argument("kind", nargs="?", default=_DEFAULT_KIND, choices=sorted(ROUND_KINDS))
    op.add_argument("--members", action="append", default=[], metavar="NAME[,NAME...]",
                    help="participants by roster name or client id (default: every "
                         "enrolled member)")
    op.add_argument("--min-clients", type=int, default=None,
                    help="fewest participants (default: all of --members, else the server's)")
    op.add_argument("--length", type=int, default=None,
                    help="vector length (default: the server's router configuration)")
    op.add_argument("--deadline", type=float, default=None, help="stage deadline, seconds")
    op.add_argument("--param", type=_param, action="append", default=[], metavar="KEY=VALUE",
                    help="a kind's parameter (router_secagg: degree, threshold, clip_range, "
                         "max_weight, dp...); VALUE is JSON or text")
    op.add_argument("--wait", type=float, default=None, metavar="SECONDS",
                    help="wait until the round ends (exit 1 if it failed)")
    op.add_argument("--json", action="store_true", help="print JSON")
    op.set_defaults(handler=_open)
    check = commands.add_parser("check", help="before opening a round: which members' "
                                "announced round terms refuse it (exit 1 if any)")
    check.add_argument("kind", nargs="?", default=_DEFAULT_KIND, choices=sorted(ROUND_KINDS))
    check.add_argument("--members", action="append", default=[], metavar="NAME[,NAME...]",
                       help="the round's participants (default: every enrolled member)")
    check.add_argument("--min-clients", type=int, default=None, help="as for open")
    check.add_argument("--param", type=_param, action="append", default=[],
                       metavar="KEY=VALUE", help="as for open (threshold, dp)")
    check.add_argument("--json", action="store_true", help="print JSON")
    check.set_defaults(handler=_check)
    listing = commands.add_parser("list", help="every round, oldest first")
    listing.add_argument("--status", choices=("open", "finished", "failed"), default=None)
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(handler=_list)
    show = commands.add_parser("show", help="one round: stage, participants, DP epsilon, "
                               "and each member that left it: at which stage and why")
    show.add_argument("round_id", type=int)
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(handler=_show)
    wait = commands.add_parser("wait", help="wait until a round ends (exit 1 if it failed)")
    wait.add_argument("round_id", type=int)
    wait.add_argument("--timeout", type=float, default=600.0, help="seconds (default 600)")
    wait.add_argument("--json", action="store_true", help="print JSON")
    wait.set_defaults(handler=_wait)
    cancel = commands.add_parser("cancel", help="end an open round as failed now")
    cancel.add_argument("round_id", type=int)
    cancel.add_argument("--reason", default="", help="kept in the round and the audit log")
    cancel.set_defaults(handler=_cancel)
    for parser in (op, check, listing, show, wait, cancel):
        add_connection_options(parser)
