"""``fedmor audit RUN_DIR``: the privacy audit of a demo run directory."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``audit`` command to the ``fedmor`` parser."""
    audit = sub.add_parser(
        "audit",
        help="membership inference on a demo run's reward models and gradient inversion on "
        "its router updates; writes report.html",
    )
    audit.add_argument("run_dir", type=Path, help="demo run directory (reward_models/, data/)")
    audit.add_argument("--out", type=Path, help="report directory (default: RUN_DIR/audit)")
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
    audit.add_argument("--recipient", default=None,
                       help="the client app's client id (named in every signed query)")
    audit.set_defaults(handler=_audit)


def _audit(args: argparse.Namespace) -> int:
    # Heavy imports (torch, transformers) only when the command runs.
    from attacks._audit import AuditConfig, audit_run_dir
    from attacks._captured_attacks import CapturedAttackConfig

    out = args.out or args.run_dir / "audit"
    cfg = AuditConfig(
        max_pairs=args.max_pairs,
        clients=tuple(args.clients) if args.clients else None,
        seed=args.seed,
        shadow_models=args.shadow_models,
        shadow_steps=args.shadow_steps,
        updates=tuple(args.updates or ()),
        inversion=CapturedAttackConfig(steps=args.inversion_steps, seed=args.seed),
    )
    live = None
    if args.client_url:
        if not args.clients or len(args.clients) != 1 or args.server_key is None \
                or args.recipient is None:
            raise ValueError("--client-url needs exactly one --client and --server-key, and "
                             "--recipient (the member's client id)")
        import httpx

        from attacks._remote import RemoteRewardScorer
        from server_app import load_private_key

        http = httpx.Client(base_url=args.client_url, timeout=120)
        key = load_private_key(args.server_key)
        live = {args.clients[0]: RemoteRewardScorer(http, key, sender=args.sender,
                                                         recipient=args.recipient)}
    report = audit_run_dir(
        args.run_dir, out, cfg, live=live, progress=lambda m: print(f"[audit] {m}", flush=True)
    )
    for m in report.memberships:
        print(f"{m.setting} ({m.attack}): {m.verdict}")
    for r in report.reconstructions:
        print(f"{r.setting} ({r.attack}): {r.verdict}")
    for note in report.notes[: len(report.notes) - 2]:
        print(note)
    print(f"wrote {out / 'report.json'} and {out / 'report.html'}")
    return 0
