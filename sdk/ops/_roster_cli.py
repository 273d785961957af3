"""``fedmor roster add|remove|list``: on the running server (signed operator requests, no
restart), or on a roster file with ``--roster FILE`` (before the server first starts; a
running server follows its file within a tick). An existing name is refused unless
``--replace``: the old identity is then revoked and the new key is a new identity (a member
that keeps its identity rotates its own key: ``fedmor client rotate-key``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from sdk.ops._connection import add_connection_options
from sdk.ops._operator_client import client_from_args
from sdk.wire import ROLES, RosterAdd

__all__ = ["public_key_from_file", "register_roster"]


def public_key_from_file(path: Path) -> str:
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


def _add(args: argparse.Namespace) -> int:
    from sdk.membership import RosterFile, add_to_roster
    from sdk.wire import parse_public_key

    public = args.public_key or public_key_from_file(args.public_key_file)
    parse_public_key(public)
    if args.roster is not None:
        exists = [c for c in RosterFile.load(args.roster).clients if c.name == args.name]
        if exists and not args.replace:
            raise ValueError(f"{args.name!r} is in {args.roster} already (role "
                             f"{exists[0].role}): give --replace to revoke it and add the new "
                             f"key as a new identity, or have the member rotate its own key "
                             f"(`fedmor client rotate-key`)")
        token = add_to_roster(args.roster, name=args.name, public_key=public, role=args.role)
        replaced = " (replacing the old identity)" if exists else ""
    else:
        added = client_from_args(args).add_to_roster(RosterAdd(
            name=args.name, public_key=public, role=args.role, replace=args.replace))
        token = added.token
        replaced = "" if not args.replace else (
            f" (revoked {added.replaced})" if added.replaced else " (replaced)")
    print(f"added {args.name} ({args.role}){replaced}; one-time enrollment token (give it to "
          f"the site): {token}")
    return 0


def _remove(args: argparse.Namespace) -> int:
    from sdk.membership._roster import remove_from_roster

    if args.roster is None:
        from sdk.ops._members_cli import revoke

        return revoke(args, "removed")
    if not remove_from_roster(args.roster, args.name):
        raise ValueError(f"{args.name!r} is not in {args.roster}")
    print(f"removed {args.name} from {args.roster}; a running server revokes it within a tick")
    return 0


def _list(args: argparse.Namespace) -> int:
    from sdk.membership import RosterFile
    from sdk.ops._members_cli import _list as members_list
    from sdk.ops._tables import emit

    if args.roster is None:
        args.role = None
        return members_list(args)
    entries = RosterFile.load(args.roster).clients
    return emit([e.model_dump() for e in entries], args.json, ["NAME", "ROLE", "PUBLIC KEY"],
                [[e.name, e.role, e.public_key] for e in entries], title=str(args.roster))


def register_roster(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``fedmor roster ...``."""
    group = sub.add_parser("roster", help="the consortium roster: on the running "
                           "server, or a file with --roster")
    commands = group.add_subparsers(dest="roster_command", metavar="COMMAND", required=True)
    add = commands.add_parser("add", help="add an identity, print its one-time enrollment "
                              "token")
    add.add_argument("--name", required=True)
    add.add_argument("--role", default="member", choices=ROLES,
                     help="member (default), aligner (the GRPO job), auditor or operator")
    who = add.add_mutually_exclusive_group(required=True)
    who.add_argument("--public-key", help="base64 Ed25519 public key")
    who.add_argument("--public-key-file", type=Path, help="file holding the public key "
                     "(base64, as `fedmor keys new` prints it, or PEM)")
    add.add_argument("--replace", action="store_true", help="the name exists: revoke its "
                     "identity and add this key as a new one")
    add.set_defaults(handler=_add)
    remove = commands.add_parser("remove", help="remove (revoke) an identity")
    remove.add_argument("--name", required=True)
    remove.add_argument("--reason", default="", help="kept in the audit log")
    remove.set_defaults(handler=_remove)
    listing = commands.add_parser("list", help="the roster file (--roster), else every "
                                  "identity at the server")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(handler=_list)
    for parser in (add, remove, listing):
        parser.add_argument("--roster", type=Path, default=None,
                            help="work on this roster file instead of the running server")
        add_connection_options(parser)
