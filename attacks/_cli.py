"""``fedmor audit run|capture|live|self``: the privacy audit of a run directory, a server's
capture, a live consortium (as its auditor) or a member's own scorer."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from sdk.progress import say

if TYPE_CHECKING:
    from attacks._report import AuditReport

__all__ = ["register"]


def _say(message: str) -> None:
    say(f"[audit] {message}")


def _common(parser: argparse.ArgumentParser) -> None:
    """``--out``, ``--max-pairs``, ``--seed``, the LiRA shadow models' options and the
    runtime: what every membership audit takes."""
    parser.add_argument("--out", type=Path, help="report directory")
    parser.add_argument("--max-pairs", type=int, default=200,
                        help="members (and as many non-members) per client")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shadow-models", type=int, default=4,
                        help="LiRA shadow reward models per client, trained by the auditor "
                             "(0: no LiRA)")
    parser.add_argument("--shadow-steps", type=int,
                        help="training steps per shadow (default: the target's)")
    parser.add_argument("--shadow-base", type=Path,
                        help="the base VLM directory the targets were trained from (default: "
                             "the frozen base in a LoRA checkpoint, else the base directory "
                             "the checkpoint records)")
    from sdk.runtime_options import add_runtime_arguments

    add_runtime_arguments(parser)


def _run_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = commands.add_parser("run", help="a run directory (reward_models/, data/, router/): "
                              "membership inference and gradient inversion")
    run.add_argument("run_dir", type=Path, help="run directory (default report: RUN_DIR/audit)")
    _common(run)
    run.add_argument("--client", action="append", dest="clients",
                     help="audit only this client (repeatable; default: all)")
    run.add_argument("--update", action="append", type=Path, dest="updates",
                     help="captured router update file to invert (repeatable; default: "
                          "RUN_DIR/router/captured/*.safetensors, else round 1 replayed from "
                          "router/spec.json)")
    run.add_argument("--inversion-steps", type=int, default=300,
                     help="optimization-attack steps per update")
    run.add_argument("--client-url", help="also attack this client's live app through "
                     "/v1/reward (needs exactly one --client; pays its query budget)")
    run.add_argument("--server-key", type=Path,
                     help="the server's Ed25519 identity PEM, to sign --client-url queries")
    run.add_argument("--sender", default="server", help="signer id the client app accepts")
    run.add_argument("--recipient", default=None,
                     help="the client app's client id (named in every signed query)")
    run.set_defaults(handler=_audit)


def _capture_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    capture = commands.add_parser("capture", help="a server's capture directory "
                                  "(manifest.json): its rounds and reward-query log")
    capture.add_argument("capture", type=Path, help="capture directory (default report: "
                         "CAPTURE-audit beside it)")
    capture.add_argument("--out", type=Path, help="report directory")
    capture.add_argument("--member", help="the audited member, whose ground truth follows")
    capture.add_argument("--truth-embeddings", type=Path, help="safetensors with 'embeddings' "
                         "(N, D) of the samples behind its updates and 'pool' (M, D) of others")
    capture.add_argument("--truth-pairs", type=Path,
                         help="its data directory (train/ = members, eval/ = non-members)")
    capture.add_argument("--inversion-steps", type=int, default=300,
                         help="optimization-attack steps per update")
    capture.add_argument("--seed", type=int, default=0)
    capture.set_defaults(handler=_audit_capture)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``audit`` group (``run``, ``capture``, ``live``, ``self``) to the ``fedmor``
    parser."""
    group = sub.add_parser("audit", help="measure what leaks: a run directory, a server's "
                           "capture, a live consortium (auditor role), or a member's own "
                           "scorer; writes report.html")
    commands = group.add_subparsers(dest="audit_command", metavar="COMMAND", required=True)
    _run_parser(commands)
    _capture_parser(commands)

    live = commands.add_parser("live", help="a live consortium, as its auditor (a profile of "
                               "the auditor role): membership queries to one member")
    live.add_argument("--member", required=True, help="the member to query (roster name)")
    live.add_argument("--truth-pairs", type=Path, required=True,
                      help="its data directory (train/ = members, eval/ = non-members)")
    live.add_argument("--target-config", type=Path, help="the member's reward_config.json (or "
                      "its checkpoint directory; no weights are read): LiRA trains "
                      "--shadow-models shadows like it (without it: threshold attack only)")
    _common(live)
    from sdk.ops import add_connection_options

    add_connection_options(live)
    live.set_defaults(handler=_audit_server)

    own = commands.add_parser("self", help="a member audits its own scorer from its client "
                              "app's settings, no server")
    own.add_argument("--client-config", type=Path, required=True,
                     help="the client app's settings file (reward model, device, clip, policy)")
    own.add_argument("--truth-pairs", type=Path, required=True,
                     help="the site's data directory (train/ = members, eval/ = non-members)")
    _common(own)
    own.set_defaults(handler=_audit_self)


def _print_summary(report: AuditReport) -> None:
    """The report's summary, one line per member and artefact kind."""
    for m in report.summary.members:
        for v in m.verdicts:
            print(f"{m.member}: {v.artefact}: {v.level.upper()}: {v.advice}")


def _audit_server(args: argparse.Namespace) -> int:
    from attacks._audit import AuditConfig
    from attacks._live_audit import audit_live_member
    from sdk.ops import connection_from_args
    from sdk.runtime_options import runtime_from_args
    from sdk.wire import key_passphrase, load_private_key

    conn = connection_from_args(args)
    if conn.key_file is None or conn.sender is None:
        raise ValueError("the live audit signs as the auditor: give --profile (an auditor's "
                         "`fedmor enroll`), or --key-file and --sender")
    out = args.out or Path(f"audit-{args.member}")
    cfg = AuditConfig(max_pairs=args.max_pairs, seed=args.seed,
                      shadow_models=args.shadow_models if args.target_config else 0,
                      shadow_steps=args.shadow_steps, shadow_base=args.shadow_base,
                      runtime=runtime_from_args(args))
    report = audit_live_member(
        conn.server, load_private_key(conn.key_file, key_passphrase()), caller_id=conn.sender,
        member=args.member, pairs_dir=args.truth_pairs, out_dir=out, config=cfg,
        target_config=args.target_config, verify=conn.verify(), progress=_say,
    )
    for m in report.memberships:
        print(f"{m.setting} ({m.attack}): {m.verdict}")
    print(report.notes[0])  # the budget this audit used
    _print_summary(report)
    print(f"wrote {out / 'report.json'} and {out / 'report.html'}")
    return 0


def _audit_self(args: argparse.Namespace) -> int:
    from attacks._audit import AuditConfig
    from attacks._self_audit import audit_own_scorer
    from sdk.runtime_options import runtime_from_args

    if args.truth_pairs is None:
        raise ValueError("--client-config needs --truth-pairs (the site's own train/ and eval/ "
                         "pairs)")
    out = args.out or Path("self-audit")
    cfg = AuditConfig(max_pairs=args.max_pairs, seed=args.seed,
                      shadow_models=args.shadow_models, shadow_steps=args.shadow_steps,
                      shadow_base=args.shadow_base, runtime=runtime_from_args(args))
    report = audit_own_scorer(args.client_config, args.truth_pairs, out, cfg, progress=_say)
    for m in report.memberships:
        print(f"{m.setting} ({m.attack}): {m.verdict}")
    _print_summary(report)
    print(f"wrote {out / 'report.json'} and {out / 'report.html'}")
    return 0


def _audit_capture(args: argparse.Namespace) -> int:
    from attacks._capture_audit import CaptureAuditConfig, MemberTruth, audit_capture_dir
    from attacks._captured_attacks import CapturedAttackConfig

    given = args.truth_embeddings is not None or args.truth_pairs is not None
    if given != (args.member is not None):
        raise ValueError("--member and --truth-embeddings / --truth-pairs go together")
    truth = (
        {args.member: MemberTruth.load(args.truth_embeddings, args.truth_pairs)} if given else {}
    )
    out = args.out or args.capture.parent / f"{args.capture.name}-audit"
    cfg = CaptureAuditConfig(
        inversion=CapturedAttackConfig(steps=args.inversion_steps, seed=args.seed), seed=args.seed
    )
    report = audit_capture_dir(
        args.capture, out, cfg, truth=truth, progress=_say
    )
    _print_summary(report)
    print(f"wrote {out / 'report.json'} and {out / 'report.html'}")
    return 0


def _audit(args: argparse.Namespace) -> int:
    # Heavy imports (torch, transformers) only when the command runs.
    from attacks._audit import AuditConfig, audit_run_dir
    from attacks._captured_attacks import CapturedAttackConfig
    from sdk.runtime_options import runtime_from_args

    out = args.out or args.run_dir / "audit"
    cfg = AuditConfig(
        max_pairs=args.max_pairs,
        clients=tuple(args.clients) if args.clients else None,
        seed=args.seed,
        shadow_models=args.shadow_models,
        shadow_steps=args.shadow_steps,
        shadow_base=args.shadow_base,
        updates=tuple(args.updates or ()),
        inversion=CapturedAttackConfig(steps=args.inversion_steps, seed=args.seed),
        runtime=runtime_from_args(args),
    )
    live = None
    if args.client_url:
        if not args.clients or len(args.clients) != 1 or args.server_key is None \
                or args.recipient is None:
            raise ValueError("--client-url needs exactly one --client and --server-key, and "
                             "--recipient (the member's client id)")
        import httpx

        from attacks._remote import RemoteRewardScorer
        from sdk.wire import load_private_key

        http = httpx.Client(base_url=args.client_url, timeout=120)
        key = load_private_key(args.server_key)
        live = {args.clients[0]: RemoteRewardScorer(http, key, sender=args.sender,
                                                         recipient=args.recipient)}
    report = audit_run_dir(
        args.run_dir, out, cfg, live=live, progress=_say
    )
    for m in report.memberships:
        print(f"{m.setting} ({m.attack}): {m.verdict}")
    for r in report.reconstructions:
        print(f"{r.setting} ({r.attack}): {r.verdict}")
    for note in report.notes[: len(report.notes) - 2]:
        print(note)
    _print_summary(report)
    print(f"wrote {out / 'report.json'} and {out / 'report.html'}")
    return 0
