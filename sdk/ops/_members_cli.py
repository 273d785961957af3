"""``fedmor members list|show|revoke|wait``: the consortium's identities as the operator sees
them, with what each member's site policy refused and the DP budget its updates spent."""

from __future__ import annotations

import argparse
import time
from collections import Counter

from sdk.ops._connection import add_connection_options
from sdk.ops._operator_client import client_from_args
from sdk.ops._tables import emit, print_table, when
from sdk.wire import MemberReport, Revocation

__all__ = ["register_members", "revoke"]


def _refusals(report: MemberReport) -> str:
    counts = Counter(r.reason for r in report.refusals)
    return ", ".join(f"{reason} x{n}" for reason, n in sorted(counts.items())) or "-"


def _epsilon(report: MemberReport) -> str:
    spent = report.epsilon_spent
    return "-" if spent is None else f"{spent:.3g} ({report.dp_rounds} rounds)"


def _restarted(report: MemberReport) -> str:
    """When the member last restarted (and in which round), or ``-``: a member killed and
    restarted that resumed its round leaves no failure, only this."""
    if not report.restarts:
        return "-"
    during = report.restarted_in_round
    return (f"restarted at {when(report.started_at)}"
            + ("" if during is None else f" (during round {during})")
            + f", {report.restarts} restart(s) in all")


def _round_terms(report: MemberReport) -> str:
    """Which rounds a member's site policy takes part in, in one phrase (its announced round
    terms; "-" when it announced none)."""
    terms = report.round_terms
    if terms is None:
        return "-"
    words = [",".join(terms.round_kinds) or "no rounds",
             f">= {terms.min_participants} members", f"threshold >= {terms.min_threshold}"]
    if terms.require_dp:
        words.append("DP only")
    if not terms.allow_captured_rounds:
        words.append("not captured")
    return "; ".join(words)


def _list(args: argparse.Namespace) -> int:
    reports = client_from_args(args).member_reports()
    if args.role:
        reports = [r for r in reports if r.role == args.role]
    rows = [[r.name, r.role, r.state, r.fingerprint, when(r.last_seen), r.rounds,
             _round_terms(r), _refusals(r), _epsilon(r), r.problem or "-", r.client_id]
            for r in reports]
    return emit([r.model_dump(mode="json") for r in reports], args.json,
                ["NAME", "ROLE", "STATE", "KEY", "LAST SEEN", "ROUNDS", "TAKES ROUNDS",
                 "REFUSED (RULE)", "DP EPSILON", "PROBLEM", "CLIENT ID"], rows)


def _show(args: argparse.Namespace) -> int:
    r = client_from_args(args).member_report(args.name)
    if args.json:
        return emit(r.model_dump(mode="json"), True, [], [])
    fields = [("name", r.name), ("role", r.role), ("state", r.state),
              ("client id", r.client_id), ("key fingerprint", r.fingerprint),
              ("enrolled", when(r.enrolled_at)), ("last seen", when(r.last_seen)),
              ("rounds", r.rounds), ("takes rounds", _round_terms(r)),
              ("clip bound", r.clip_bound),
              ("DP epsilon spent", _epsilon(r) + ("" if r.delta is None
                                                  else f" at delta {r.delta:g}")),
              ("revoked", when(r.revoked_at)), ("started", when(r.started_at)),
              ("restarted", _restarted(r)), ("problem", r.problem or "-")]
    print_table(["FIELD", "VALUE"], fields, title=f"member {r.name}")
    if r.refusals:
        print_table(["ROUND", "RULE", "WHAT THE SITE POLICY SAID", "AT"],
                    [[f.round_id, f.reason, f.detail, when(f.at)] for f in r.refusals],
                    title="rounds its site policy refused (or it abandoned: its own cause)")
    return 0


def revoke(args: argparse.Namespace, verb: str = "revoked") -> int:
    """Revoke ``args.name`` at the server (``fedmor members revoke``, ``fedmor roster
    remove``)."""
    info = client_from_args(args).revoke(args.name, Revocation(reason=args.reason))
    print(f"{verb} {info.name} ({info.client_id or 'not enrolled'}): refused from its "
          f"next request on, dropped from every open round")
    return 0


def _wait(args: argparse.Namespace) -> int:
    ops = client_from_args(args)
    deadline = time.monotonic() + args.timeout
    while True:
        enrolled = [m.name for m in ops.members()
                    if m.state == "enrolled" and m.role == args.role]
        if len(enrolled) >= args.enrolled:
            print(f"{len(enrolled)} {args.role}(s) enrolled: {', '.join(enrolled)}")
            return 0
        if time.monotonic() >= deadline:
            raise ValueError(f"only {len(enrolled)} of {args.enrolled} {args.role}(s) enrolled "
                             f"after {args.timeout:g} s: {', '.join(enrolled) or 'none'}")
        time.sleep(args.poll)


def register_members(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``fedmor members ...``."""
    group = sub.add_parser("members", help="the consortium's identities: state, "
                           "last seen, refusals by rule, DP budget spent")
    commands = group.add_subparsers(dest="members_command", metavar="COMMAND", required=True)
    listing = commands.add_parser("list", help="every identity, one row each")
    listing.add_argument("--role", default=None, help="only this role (member, operator, ...)")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(handler=_list)
    show = commands.add_parser("show", help="one identity, with every round its site policy "
                               "refused and why")
    show.add_argument("name")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(handler=_show)
    revoking = commands.add_parser("revoke", help="revoke an identity now (refused from its "
                                 "next request, dropped from open rounds)")
    revoking.add_argument("name")
    revoking.add_argument("--reason", default="", help="kept in the audit log")
    revoking.set_defaults(handler=revoke)
    wait = commands.add_parser("wait", help="wait until N identities of a role enrolled")
    wait.add_argument("--enrolled", type=int, required=True, help="how many")
    wait.add_argument("--role", default="member")
    wait.add_argument("--timeout", type=float, default=300.0, help="seconds (default 300)")
    wait.add_argument("--poll", type=float, default=0.5, help=argparse.SUPPRESS)
    wait.set_defaults(handler=_wait)
    for parser in (listing, show, revoking, wait):
        add_connection_options(parser)
