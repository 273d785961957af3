"""``fedmor server`` (``backup``, ``status``) and ``fedmor keys new`` (registered by sdk.cli;
the roster and the other operator commands are ``sdk.ops``'s)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from sdk.cli import add_backup_command
from sdk.ops import add_connection_options

__all__ = ["register", "register_keys"]


def _server(args: argparse.Namespace) -> int:
    from sdk.serving import configure_logging, load_settings, serve
    from server_app._app import create_app
    from server_app._settings import ServerSettings

    try:
        cfg = load_settings(ServerSettings, args.config)
    except ValueError as exc:  # the file, the line and the setting to fix: no traceback
        print(f"fedmor server: {exc}", file=sys.stderr)
        return 2
    configure_logging(cfg.log_level, cfg.log_format)
    if args.port is not None:
        cfg = cfg.model_copy(update={"port": args.port})
    if cfg.tls_cert is None and not cfg.allow_plain_http:  # signed requests, cookies in clear
        print(f"fedmor server: no tls_cert/tls_key in {args.config or 'the settings'}: set "
              "them to serve HTTPS, or allow_plain_http = true to serve plain HTTP (a local "
              "test, or TLS ended by a proxy in front)", file=sys.stderr)
        return 2
    try:
        app = create_app(cfg)
    except (ValueError, PermissionError) as exc:  # a key or setting to fix: say which, no traceback
        print(f"fedmor server: {exc}", file=sys.stderr)
        return 2
    serve(app, host=cfg.host, port=cfg.port, tls_cert=cfg.tls_cert,
          tls_key=cfg.tls_key, log_level=cfg.log_level, log_format=cfg.log_format,
          client_ca=cfg.client_ca if cfg.require_client_cert else None,
          connections=cfg.connections)
    return 0


def _status(args: argparse.Namespace) -> int:
    from sdk.ops import Connection, OperatorClient, connection_from_args

    if args.server is not None and args.profile is None:  # no identity needed to ask
        conn = Connection(server=args.server, ca=args.ca, client_cert=args.client_cert,
                          client_key=args.client_key, insecure_http=args.insecure_http)
    else:
        conn = connection_from_args(args)
    health = OperatorClient(conn).wait_healthy(args.wait)
    print(f"{conn.server}: {health.status} ({health.app} {health.version})")
    if health.started_at is not None:  # the process start: a restart shows here
        import time

        resumed = health.recovered_rounds
        at = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(health.started_at))
        print(f"started {at}" + (
            f"; resumed open round(s) {', '.join(map(str, resumed))} from its store"
            if resumed else ""))
    return 0


def _keys_new(args: argparse.Namespace) -> int:
    from sdk.wire import KEY_PASSPHRASE_ENV, key_passphrase, load_or_create_key, public_key_b64

    if args.out.exists():
        raise ValueError(f"{args.out} exists; refusing to overwrite an identity key")
    passphrase = key_passphrase(args.passphrase_file)
    if args.encrypt and passphrase is None:
        raise ValueError(f"--encrypt needs a passphrase: set {KEY_PASSPHRASE_ENV} or give "
                         f"--passphrase-file")
    print(public_key_b64(load_or_create_key(args.out, passphrase if args.encrypt else None)))
    return 0


def _settings() -> type[Any]:
    from server_app._settings import ServerSettings

    return ServerSettings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``fedmor server`` (and its ``backup`` and ``status``)."""
    p = sub.add_parser("server", help="run the consortium server")
    p.add_argument("--config", type=Path, default=None, help="TOML/JSON settings file")
    p.add_argument("--port", type=int, default=None)
    p.set_defaults(handler=_server)
    commands = p.add_subparsers(dest="server_command")
    add_backup_command(commands, settings=_settings, app="server")
    status = commands.add_parser("status", help="is the server up? (GET /v1/health; --wait: "
                                 "until it answers)")
    status.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                        help="keep asking this long (default: once)")
    add_connection_options(status)
    status.set_defaults(handler=_status)



def register_keys(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``fedmor keys new``."""
    keys = sub.add_parser("keys", help="identity keys").add_subparsers(dest="keys_command")
    new = keys.add_parser("new", help="create an Ed25519 identity key, print its public key")
    new.add_argument("--out", type=Path, default=Path("identity.pem"))
    new.add_argument("--encrypt", action="store_true", help="encrypt the key (PKCS#8) with the "
                     "passphrase in FEDMOR_KEY_PASSPHRASE or --passphrase-file")
    new.add_argument("--passphrase-file", type=Path, default=None,
                     help="file whose first line is the passphrase (mode 0600)")
    new.set_defaults(handler=_keys_new)
