"""``fedmor server``, ``fedmor keys new``, ``fedmor roster add|list``, ``fedmor admin
rollback`` (registered by sdk.cli)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from sdk.cli import add_backup_command
from sdk.wire import ROLES

__all__ = ["register"]


def _server(args: argparse.Namespace) -> int:
    from sdk.wire import configure_logging, load_settings, serve
    from server_app._app import create_app
    from server_app._settings import ServerSettings

    cfg = load_settings(ServerSettings, args.config)
    configure_logging(cfg.log_level, cfg.log_format)
    if args.port is not None:
        cfg = cfg.model_copy(update={"port": args.port})
    serve(create_app(cfg), host=cfg.host, port=cfg.port, tls_cert=cfg.tls_cert,
          tls_key=cfg.tls_key, log_level=cfg.log_level, log_format=cfg.log_format,
          client_ca=cfg.client_ca if cfg.require_client_cert else None)
    return 0


def _keys_new(args: argparse.Namespace) -> int:
    from sdk.wire import load_or_create_key, public_key_b64

    if args.out.exists():
        raise ValueError(f"{args.out} exists; refusing to overwrite an identity key")
    print(public_key_b64(load_or_create_key(args.out)))
    return 0


def _roster_add(args: argparse.Namespace) -> int:
    from sdk.wire import add_to_roster, load_private_key, public_key_b64

    public = args.public_key or public_key_b64(load_private_key(args.key_file))
    token = add_to_roster(args.roster, name=args.name, public_key=public, role=args.role)
    print(f"added {args.name} ({args.role}); one-time enrollment token (give it to the site): "
          f"{token}")
    return 0


def _roster_list(args: argparse.Namespace) -> int:
    from sdk.wire import RosterFile

    for entry in RosterFile.load(args.roster).clients:
        print(f"{entry.name}\t{entry.role}\t{entry.public_key}")
    return 0


def _admin_rollback(args: argparse.Namespace) -> int:
    import ssl

    import httpx

    token = os.environ.get("FEDMOR_ADMIN_TOKEN")
    if not token:
        raise ValueError("set FEDMOR_ADMIN_TOKEN to the server's admin token")
    verify: ssl.SSLContext | bool = (ssl.create_default_context(cafile=str(args.ca))
                                     if args.ca else True)
    resp = httpx.post(args.server.rstrip("/") + "/v1/router/rollback", verify=verify,
                      json={"version": args.version}, timeout=30,
                      headers={"authorization": f"Bearer {token}"})
    if resp.status_code != 200:
        raise ValueError(f"rollback refused ({resp.status_code}): {resp.text[:300]}")
    info = resp.json()
    print(f"router version {args.version} restored as version {info['version']} "
          f"(sha256 {info['sha256']})")
    return 0


def _settings() -> type[Any]:
    from server_app._settings import ServerSettings

    return ServerSettings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the server-side subcommands."""
    p = sub.add_parser("server", help="run the consortium server")
    p.add_argument("--config", type=Path, default=None, help="TOML/JSON settings file")
    p.add_argument("--port", type=int, default=None)
    p.set_defaults(handler=_server)
    add_backup_command(p.add_subparsers(dest="server_command"), settings=_settings,
                       app="server")

    keys = sub.add_parser("keys", help="identity keys").add_subparsers(dest="keys_command")
    new = keys.add_parser("new", help="create an Ed25519 identity key, print its public key")
    new.add_argument("--out", type=Path, default=Path("identity.pem"))
    new.set_defaults(handler=_keys_new)

    roster = sub.add_parser("roster", help="the consortium roster").add_subparsers(
        dest="roster_command")
    add = roster.add_parser("add", help="add a member, print its enrollment token")
    add.add_argument("--roster", type=Path, default=Path("roster.json"))
    add.add_argument("--name", required=True)
    add.add_argument("--role", default="member", choices=ROLES,
                     help="member (default), aligner (the GRPO job), auditor or operator")
    who = add.add_mutually_exclusive_group(required=True)
    who.add_argument("--public-key", help="base64 Ed25519 public key")
    who.add_argument("--key-file", type=Path, help="PEM private key to take the public key from")
    add.set_defaults(handler=_roster_add)
    listing = roster.add_parser("list", help="list members")
    listing.add_argument("--roster", type=Path, default=Path("roster.json"))
    listing.set_defaults(handler=_roster_list)

    admin = sub.add_parser("admin", help="operator commands over the server's admin API "
                           "(token in FEDMOR_ADMIN_TOKEN)").add_subparsers(dest="admin_command")
    rollback = admin.add_parser("rollback", help="publish an earlier router version again as "
                                "the newest")
    rollback.add_argument("--server", required=True, help="server URL, e.g. https://host:8443")
    rollback.add_argument("--version", type=int, required=True, help="version to restore")
    rollback.add_argument("--ca", type=Path, default=None, help="CA bundle of the server")
    rollback.set_defaults(handler=_admin_rollback)
