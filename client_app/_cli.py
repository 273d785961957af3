"""``fedmor client`` (registered by sdk.cli; it checks its settings first and refuses to start
on a wrong one), ``fedmor client check``, ``fedmor client policy show``, ``fedmor client
status`` and ``fedmor client rotate-key``."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Any

from sdk.cli import add_backup_command

__all__ = ["register"]


def _client(args: argparse.Namespace) -> int:
    from client_app._settings import ClientSettings
    from sdk.serving import configure_logging, load_settings

    try:
        cfg = load_settings(ClientSettings, args.config)
    except ValueError as exc:  # the file, the line and the setting to fix: no traceback
        print(f"fedmor client: {exc}", file=sys.stderr)
        return 2
    configure_logging(cfg.log_level, cfg.log_format)
    update = {"port": args.port} if args.port is not None else {}
    if args.demo:
        update["demo"] = True
    cfg = cfg.model_copy(update=update)
    failed = [c for c in _checks(cfg, args) if c.problem is not None]
    for c in failed:  # every wrong setting at once, each with its key and fix
        print(f"fedmor client: {c.key}: {c.problem}", file=sys.stderr)
    if failed:
        from client_app._checks import report_refused_start

        told = report_refused_start(cfg, failed)
        print("fedmor client: not started (`fedmor client check` runs these checks again)"
              + ("" if told is None else f"; the operator sees: {told}"), file=sys.stderr)
        return 2
    from client_app._app import create_client_app  # the app's imports: only for a start
    from sdk.serving import serve

    try:
        app = create_client_app(cfg, start_runner=not args.no_rounds)
    except (ValueError, PermissionError) as exc:  # a setting or key: say which, no traceback
        print(f"fedmor client: {exc}", file=sys.stderr)
        return 2
    # A revoked member's runner stops: the app stops with it, and the exit code says so.
    app.state.on_revoked = lambda: os.kill(os.getpid(), signal.SIGTERM)
    serve(app, host=cfg.host, port=cfg.port, tls_cert=cfg.tls_cert, tls_key=cfg.tls_key,
          log_level=cfg.log_level, log_format=cfg.log_format, connections=cfg.connections)
    runner = getattr(app.state, "runner", None)
    return 3 if runner is not None and runner.revoked else 0


def _checks(cfg: Any, args: argparse.Namespace) -> list[Any]:
    from client_app._checks import run_checks

    source = str(args.config) if args.config else "FEDMOR_CLIENT_* environment"
    return run_checks(cfg, rounds=cfg.run_rounds and not args.no_rounds, source=source)


def _check(args: argparse.Namespace) -> int:
    from client_app._checks import report
    from client_app._settings import ClientSettings
    from sdk.serving import load_settings

    cfg = load_settings(ClientSettings, args.config)
    return 0 if report(_checks(cfg, args), print) else 1


def _policy_show(args: argparse.Namespace) -> int:
    from client_app._policy import describe_policy
    from client_app._settings import ClientSettings
    from sdk.serving import load_settings

    cfg = load_settings(ClientSettings, args.config)
    print(describe_policy(cfg.policy))
    return 0


def _rotate_key(args: argparse.Namespace) -> int:
    from client_app._identity import rotate_key
    from client_app._router_update import no_update
    from client_app._runner import ClientRunner
    from client_app._settings import ClientSettings
    from client_app._transport import Unanswered
    from sdk.serving import load_settings
    from sdk.wire import RequestRefused, key_fingerprint

    cfg = load_settings(ClientSettings, args.config)
    try:
        runner = ClientRunner(cfg, update_fn=no_update)
        try:
            public = rotate_key(runner)
        finally:
            runner.close()
    except (ValueError, RequestRefused, Unanswered) as exc:
        print(f"fedmor client rotate-key: {exc}", file=sys.stderr)
        return 2
    print(f"rotated: {cfg.identity_key} now holds key {key_fingerprint(public)} ({public}); "
          f"a running client app switches to it at its next request")
    return 0


def _status(args: argparse.Namespace) -> int:
    import json

    from client_app._settings import ClientSettings
    from client_app._store import read_rounds
    from sdk.serving import load_settings

    cfg = load_settings(ClientSettings, args.config)
    client_id, rounds = read_rounds(cfg.db_path)
    if args.id:
        if client_id is None:
            raise ValueError(f"{cfg.name} is not enrolled yet: start the client app with its "
                             f"enrollment token first")
        print(client_id)
        return 0
    if args.json:
        print(json.dumps({"name": cfg.name, "client_id": client_id, "rounds": rounds}))
        return 0
    from rich.console import Console
    from rich.table import Table

    print(f"{cfg.name}: client id {client_id or '- (not enrolled yet)'}, server "
          f"{cfg.server_url}, {len(rounds)} round(s)")
    table = Table("ROUND", "STATUS", "PAIRS", "LOSS BEFORE", "LOSS AFTER", "DETAIL", box=None,
                  header_style="bold", pad_edge=False)
    for r in rounds:
        table.add_row(str(r["round_id"]), r["status"], _cell(r["pairs"], "d"),
                      _cell(r["loss_before"], ".4f"), _cell(r["loss_after"], ".4f"),
                      (r["detail"] or "")[:120])
    console = Console()
    (console if console.is_terminal else Console(width=4096)).print(table)
    return 0


def _cell(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _settings() -> type[Any]:
    from client_app._settings import ClientSettings

    return ClientSettings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``fedmor client`` and its ``policy show``."""
    p = sub.add_parser("client", help="run a member's client app (reward queries + rounds)")
    p.add_argument("--config", type=Path, default=None, help="TOML/JSON settings file")
    p.add_argument("--port", type=int, default=None)
    p.add_argument("--no-rounds", action="store_true", help="serve reward queries only")
    p.add_argument("--demo", action="store_true", help="stand-ins for an unconfigured reward "
                   "model and update function (hash scorer, random updates); never for a site")
    p.set_defaults(handler=_client)
    groups = p.add_subparsers(dest="client_command")
    check = groups.add_parser("check", help="check every path and setting the client needs, "
                              "and the server: one line per check (exit 1 on a problem)")
    check.add_argument("--config", type=Path, default=None, help="TOML/JSON settings file")
    check.add_argument("--no-rounds", action="store_true", help="as `fedmor client "
                       "--no-rounds`: skip the round settings")
    check.set_defaults(handler=_check)
    policy = groups.add_parser("policy", help="the site policy").add_subparsers(
        dest="policy_command", required=True)
    show = policy.add_parser("show", help="print the effective site policy in words")
    show.add_argument("--config", type=Path, default=None, help="TOML/JSON settings file")
    show.set_defaults(handler=_policy_show)
    rotate = groups.add_parser("rotate-key", help="switch to a new identity key (signed by the "
                               "current one); the old key stops working")
    rotate.add_argument("--config", type=Path, default=None, help="TOML/JSON settings file")
    rotate.set_defaults(handler=_rotate_key)
    status = groups.add_parser("status", help="this member's rounds: status, the local pairs "
                               "its update used and its local router loss before and after")
    status.add_argument("--config", type=Path, default=None, help="TOML/JSON settings file")
    status.add_argument("--json", action="store_true", help="print JSON")
    status.add_argument("--id", action="store_true", help="print only this member's client "
                        "id (the --sender of `fedmor router pull`)")
    status.set_defaults(handler=_status)
    add_backup_command(groups, settings=_settings, app="client")
