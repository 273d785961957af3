"""``fedmor server``, ``fedmor keys new``, ``fedmor roster add|remove|list``, ``fedmor admin
rollback`` (registered by sdk.cli)."""

from __future__ import annotations

import argparse
import os
import sys
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


def _public_key_from_file(path: Path) -> str:
    """The base64 Ed25519 public key a member sent (what ``fedmor keys new`` prints, or a PEM
    public key); a private key is refused: the operator must never hold a member's secret."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    from sdk.wire import parse_public_key, public_key_b64

    text = path.read_text().strip()
    if "PRIVATE KEY" in text:
        raise ValueError(f"{path} holds a private key: ask the member for its public key "
                         f"(the line `fedmor keys new` printed), never its identity file")
    if text.startswith("-----BEGIN PUBLIC KEY-----"):
        key = load_pem_public_key(text.encode())
        if not isinstance(key, Ed25519PublicKey):
            raise ValueError(f"{path} is not an Ed25519 public key")
        return public_key_b64(key)
    parse_public_key(text)  # names the problem if it is not one
    return text


def _roster_add(args: argparse.Namespace) -> int:
    from sdk.wire import add_to_roster

    public = args.public_key or _public_key_from_file(args.public_key_file)
    token = add_to_roster(args.roster, name=args.name, public_key=public, role=args.role)
    print(f"added {args.name} ({args.role}); one-time enrollment token (give it to the site): "
          f"{token}")
    return 0


def _roster_remove(args: argparse.Namespace) -> int:
    from sdk.wire import RosterFile

    roster = RosterFile.load(args.roster)
    kept = [c for c in roster.clients if c.name != args.name]
    if len(kept) == len(roster.clients):
        raise ValueError(f"{args.name!r} is not in {args.roster}")
    roster.clients = kept
    roster.save(args.roster)
    print(f"removed {args.name}; a running server revokes it within a tick (or run POST "
          f"/v1/roster/reload)")
    return 0


def _roster_list(args: argparse.Namespace) -> int:
    from sdk.wire import RosterFile

    if args.server is not None:
        return _members_list(args)
    for entry in RosterFile.load(args.roster).clients:
        print(f"{entry.name}\t{entry.role}\t{entry.public_key}")
    return 0


def _admin_call(args: argparse.Namespace, method: str, path: str,
                body: Any = None) -> Any:
    """One admin request: the admin token (FEDMOR_ADMIN_TOKEN), or signed by an operator
    identity (``--key-file`` and ``--sender``)."""
    import json

    import httpx

    from sdk.wire import load_private_key, sign_headers, tls_verify

    content = b"" if body is None else json.dumps(body).encode()
    headers = {"content-type": "application/json"}
    if getattr(args, "key_file", None) is not None and getattr(args, "sender", None):
        from sdk.wire import key_passphrase

        key = load_private_key(args.key_file, key_passphrase())
        headers |= sign_headers(key, sender=args.sender, method=method, path=path, body=content)
    else:
        token = os.environ.get("FEDMOR_ADMIN_TOKEN")
        if not token:
            raise ValueError("set FEDMOR_ADMIN_TOKEN to the server's admin token (or give an "
                             "operator identity: --key-file and --sender)")
        headers["authorization"] = f"Bearer {token}"
    verify = tls_verify(args.ca, _client_cert(args))
    return httpx.request(method, args.server.rstrip("/") + path, content=content,
                         headers=headers, verify=verify, timeout=30)


def _client_cert(args: argparse.Namespace) -> tuple[str, str] | None:
    """The operator's client certificate and key for a server that requires one (mutual
    TLS), from ``--client-cert`` / ``--client-key``."""
    cert, key = args.client_cert, args.client_key
    if (cert is None) != (key is None):
        raise ValueError("give both --client-cert and --client-key, or neither")
    return None if cert is None else (str(cert), str(key))


def _members_list(args: argparse.Namespace) -> int:
    import datetime

    resp = _admin_call(args, "GET", "/v1/members")
    if resp.status_code != 200:
        raise ValueError(f"members list refused ({resp.status_code}): {resp.text[:300]}")

    def when(at: float | None) -> str:
        return "-" if at is None else datetime.datetime.fromtimestamp(
            at, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")

    rows = [("NAME", "ROLE", "STATE", "KEY", "LAST SEEN", "ROUNDS", "CLIENT ID")]
    rows += [(m["name"], m["role"], m["state"], m["fingerprint"] or "-", when(m["last_seen"]),
              str(m["rounds"]), m["client_id"] or "-") for m in resp.json()]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def _admin_rollback(args: argparse.Namespace) -> int:
    resp = _admin_call(args, "POST", "/v1/router/rollback", {"version": args.version})
    if resp.status_code != 200:
        raise ValueError(f"rollback refused ({resp.status_code}): {resp.text[:300]}")
    info = resp.json()
    print(f"router version {args.version} restored as version {info['version']} "
          f"(sha256 {info['sha256']})")
    return 0


def _settings() -> type[Any]:
    from server_app._settings import ServerSettings

    return ServerSettings


def _server_options(parser: argparse.ArgumentParser, *, required: bool) -> None:
    """The options of every admin command that talks to the server: where it is, how to
    verify it and present a client certificate (mutual TLS), and who signs."""
    parser.add_argument("--server", required=required, default=None,
                        help="server URL, e.g. https://host:8443")
    parser.add_argument("--ca", type=Path, default=None, help="CA bundle of the server")
    parser.add_argument("--client-cert", type=Path, default=None, help="the operator's client "
                        "certificate (PEM), for a server with require_client_cert")
    parser.add_argument("--client-key", type=Path, default=None,
                        help="the private key of --client-cert (PEM)")
    parser.add_argument("--key-file", type=Path, default=None, help="an operator identity's "
                        "key (else the admin token in FEDMOR_ADMIN_TOKEN)")
    parser.add_argument("--sender", default=None, help="that operator identity's client id")


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
    new.add_argument("--encrypt", action="store_true", help="encrypt the key (PKCS#8) with the "
                     "passphrase in FEDMOR_KEY_PASSPHRASE or --passphrase-file")
    new.add_argument("--passphrase-file", type=Path, default=None,
                     help="file whose first line is the passphrase (mode 0600)")
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
    who.add_argument("--public-key-file", type=Path, help="file holding the member's public "
                     "key (base64, as `fedmor keys new` prints it, or PEM)")
    add.set_defaults(handler=_roster_add)
    remove = roster.add_parser("remove", help="remove (revoke) a member: a running server "
                               "revokes it within a tick")
    remove.add_argument("--roster", type=Path, default=Path("roster.json"))
    remove.add_argument("--name", required=True)
    remove.set_defaults(handler=_roster_remove)
    listing = roster.add_parser("list", help="list the roster file, or with --server every "
                                "identity's state, key, last seen and rounds")
    listing.add_argument("--roster", type=Path, default=Path("roster.json"))
    _server_options(listing, required=False)
    listing.set_defaults(handler=_roster_list)

    admin = sub.add_parser("admin", help="operator commands over the server's admin API "
                           "(token in FEDMOR_ADMIN_TOKEN)").add_subparsers(dest="admin_command")
    rollback = admin.add_parser("rollback", help="publish an earlier router version again as "
                                "the newest")
    _server_options(rollback, required=True)
    rollback.add_argument("--version", type=int, required=True, help="version to restore")
    rollback.set_defaults(handler=_admin_rollback)
