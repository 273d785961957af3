"""``fedmor audit RUN_DIR``: the privacy audit of a demo run directory."""

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


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``audit`` command to the ``fedmor`` parser."""
    audit = sub.add_parser(
        "audit",
        help="membership inference on a demo run's reward models and gradient inversion on "
        "its router updates; writes report.html",
    )
    audit.add_argument(
        "run_dir", type=Path, nargs="?", help="demo run directory (reward_models/, data/)"
    )
    audit.add_argument(
        "--out",
        type=Path,
        help="report directory (default: RUN_DIR/audit, or CAPTURE-audit beside --capture)",
    )
    _capture_arguments(audit)
    audit.add_argument(
        "--max-pairs", type=int, default=200, help="members (and as many non-members) per client"
    )
    audit.add_argument(
        "--client",
        action="append",
        dest="clients",
        help="audit only this client (repeatable; default: all)",
    )
    audit.add_argument("--seed", type=int, default=0)
    audit.add_argument(
        "--shadow-models",
        type=int,
        default=4,
        help="LiRA shadow reward models per client, trained by the auditor (0: no LiRA)",
    )
    audit.add_argument(
        "--shadow-steps", type=int, help="training steps per shadow (default: the target's)"
    )
    audit.add_argument(
        "--shadow-base",
        type=Path,
        help="the base VLM directory the targets were trained from (default: the frozen base "
        "in a LoRA checkpoint, else the base directory the checkpoint records)",
    )
    audit.add_argument(
        "--update",
        action="append",
        type=Path,
        dest="updates",
        help="captured router update file to invert (repeatable; default: "
        "RUN_DIR/router/captured/*.safetensors, else round 1 replayed from router/spec.json)",
    )
    audit.add_argument(
        "--inversion-steps", type=int, default=300, help="optimization-attack steps per update"
    )
    audit.add_argument(
        "--client-url",
        help="also attack this client's live app through "
        "/v1/reward (needs exactly one --client; pays its query budget)",
    )
    audit.add_argument(
        "--server-key",
        type=Path,
        help="the server's Ed25519 identity PEM, to sign --client-url queries",
    )
    audit.add_argument("--sender", default="server", help="signer id the client app accepts")
    from sdk.runtime_options import add_runtime_arguments

    add_runtime_arguments(audit)
    audit.add_argument("--recipient", default=None,
                       help="the client app's client id (named in every signed query)")
    audit.set_defaults(handler=_audit)


def _capture_arguments(audit: argparse.ArgumentParser) -> None:
    """``--capture DIR`` and the audited member's ground truth."""
    audit.add_argument(
        "--capture",
        type=Path,
        help="attack a server's capture directory (manifest.json) instead of a run directory",
    )
    audit.add_argument(
        "--member",
        help="with --capture: the audited member, whose ground truth follows; with --server: "
        "the member to query",
    )
    audit.add_argument(
        "--server",
        help="a live consortium server: membership queries to --member through it, as the "
        "auditor role (--identity, --caller-id, --truth-pairs)",
    )
    audit.add_argument(
        "--identity", type=Path, help="with --server: the auditor's Ed25519 identity PEM"
    )
    audit.add_argument("--caller-id", help="with --server: the auditor's enrolled client id")
    audit.add_argument(
        "--server-ca", type=Path, help="with --server: CA bundle of the server's certificate"
    )
    audit.add_argument(
        "--client-config",
        type=Path,
        help="a member's self-audit: its client app's settings file (reward model, device, "
        "clip, policy); its reward answers are attacked locally on --truth-pairs, no server",
    )
    audit.add_argument(
        "--target-config",
        type=Path,
        help="with --server: the member's reward_config.json (or its checkpoint directory; no "
        "weights are read): LiRA trains --shadow-models shadows like it here, from its base "
        "(the one it records, or --shadow-base)",
    )
    audit.add_argument(
        "--truth-embeddings",
        type=Path,
        help="with --member: safetensors with 'embeddings' (N, D) of the samples behind its "
        "updates and 'pool' (M, D) of other samples",
    )
    audit.add_argument(
        "--truth-pairs",
        type=Path,
        help="with --member: its data directory (train/ = members, eval/ = non-members)",
    )


def _print_summary(report: AuditReport) -> None:
    """The report's summary, one line per member and artefact kind."""
    for m in report.summary.members:
        for v in m.verdicts:
            print(f"{m.member}: {v.artefact}: {v.level.upper()}: {v.advice}")


def _audit_server(args: argparse.Namespace) -> int:

    from attacks._audit import AuditConfig
    from attacks._live_audit import audit_live_member
    from sdk.runtime_options import runtime_from_args
    from sdk.wire import load_private_key, tls_verify

    if None in (args.identity, args.caller_id, args.member, args.truth_pairs):
        raise ValueError("--server needs --identity, --caller-id, --member and --truth-pairs")
    out = args.out or Path(f"audit-{args.member}")
    verify = tls_verify(args.server_ca)
    cfg = AuditConfig(max_pairs=args.max_pairs, seed=args.seed,
                      shadow_models=args.shadow_models if args.target_config else 0,
                      shadow_steps=args.shadow_steps, shadow_base=args.shadow_base,
                      runtime=runtime_from_args(args))
    report = audit_live_member(
        args.server, load_private_key(args.identity), caller_id=args.caller_id,
        member=args.member, pairs_dir=args.truth_pairs, out_dir=out, config=cfg,
        target_config=args.target_config, verify=verify, progress=_say,
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

    sources = (args.run_dir, args.capture, args.server, args.client_config)
    if sum(x is not None for x in sources) != 1:
        raise ValueError("give one of RUN_DIR, --capture DIR, --server URL or --client-config "
                         "FILE")
    if args.capture is not None:
        return _audit_capture(args)
    if args.client_config is not None:
        return _audit_self(args)
    if args.server is not None:
        return _audit_server(args)

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
