"""``fedmor enroll`` (any role: spend a one-time token, write a profile) and ``fedmor profile
list|show|use``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sdk.ops._profiles import Profile, ProfileBook, check_owner_only, profiles_path
from sdk.ops._tables import print_table
from sdk.wire import ROLES

__all__ = ["register_enroll", "register_profile"]


def _enroll(args: argparse.Namespace) -> int:
    from sdk.ops._connection import Connection
    from sdk.ops._operator_client import OperatorClient
    from sdk.wire import EnrollRequest, key_passphrase, load_private_key

    name = args.name or args.profile
    if name is None:
        raise ValueError("give --name (the roster name the operator added you under)")
    profile_name = args.profile or name
    book = ProfileBook.load()
    if profile_name in book.profiles and not args.force:
        raise ValueError(f"profile {profile_name!r} exists; give --force to replace it or "
                         f"another --profile NAME")
    absolute = {k: (None if v is None else Path(v).expanduser().resolve())
                for k, v in (("ca", args.ca), ("client_cert", args.client_cert),
                             ("client_key", args.client_key), ("identity", args.identity))}
    for option, path in absolute.items():
        if path is not None and not path.exists() and option != "identity":
            raise FileNotFoundError(f"--{option.replace('_', '-')} {path} does not exist")
    identity = absolute["identity"]
    assert identity is not None
    if not identity.exists():
        raise FileNotFoundError(f"--identity {identity} does not exist: create it with `fedmor "
                                f"keys new --out {args.identity}` and send the public key it "
                                f"prints to the operator")
    insecure = args.server.lower().startswith("http://") and args.insecure_http
    conn = Connection(server=args.server, ca=absolute["ca"], insecure_http=insecure,
                      client_cert=absolute["client_cert"], client_key=absolute["client_key"])
    for private in (identity, absolute["client_key"]):
        if private is not None:
            check_owner_only(private)
    key = load_private_key(identity, key_passphrase())
    enrolled = OperatorClient(conn).enroll(EnrollRequest.of(key, name=name, token=args.token))
    if args.role is not None and enrolled.role != args.role:
        raise ValueError(f"{name!r} is on the roster as {enrolled.role!r}, not {args.role!r}: "
                         f"ask the operator")
    profile = Profile(server=args.server.rstrip("/"), ca=absolute["ca"],
                      client_cert=absolute["client_cert"], client_key=absolute["client_key"],
                      identity=identity, client_id=enrolled.client_id, name=name,
                      role=enrolled.role, insecure_http=insecure)  # type: ignore[arg-type]
    book.add(profile_name, profile)
    path = book.save()
    print(f"enrolled {name} as {enrolled.client_id} ({enrolled.role}); profile "
          f"{profile_name!r} written to {path}")
    return 0


def _list(args: argparse.Namespace) -> int:
    book = ProfileBook.load()
    rows = [{"profile": name, "default": name == book.default, "role": p.role, "name": p.name,
             "client_id": p.client_id, "server": p.server}
            for name, p in sorted(book.profiles.items())]
    if args.json:
        print(json.dumps(rows))
        return 0
    if not rows:
        print(f"no profiles in {profiles_path()}: `fedmor enroll` creates one")
        return 0
    print_table(["", "PROFILE", "ROLE", "NAME", "CLIENT ID", "SERVER"],
                [["*" if r["default"] else "", r["profile"], r["role"], r["name"],
                  r["client_id"], r["server"]] for r in rows], title=str(profiles_path()))
    return 0


def _show(args: argparse.Namespace) -> int:
    name, profile = ProfileBook.load().pick(args.name)
    data = {"profile": name} | profile.model_dump(mode="json")
    if args.json:
        print(json.dumps(data))
    else:
        print_table(["FIELD", "VALUE"], [[k, "-" if v is None else str(v)]
                                         for k, v in data.items()])
    return 0


def _use(args: argparse.Namespace) -> int:
    book = ProfileBook.load()
    book.pick(args.name)  # names the known profiles if it does not exist
    book.default = args.name
    book.save()
    print(f"default profile: {args.name}")
    return 0


def register_enroll(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``fedmor enroll``."""
    p = sub.add_parser("enroll", help="spend a one-time enrollment token and "
                       "write a profile (server, CA, identity, client id, role)")
    p.add_argument("--server", required=True, help="server URL, e.g. https://host:8443")
    p.add_argument("--identity", type=Path, required=True,
                   help="your identity key (`fedmor keys new`)")
    p.add_argument("--token", required=True, help="the one-time token the operator sent")
    p.add_argument("--name", default=None, help="your roster name (default: the profile name)")
    p.add_argument("--role", choices=ROLES, default=None,
                   help="check that the roster gives this role (default: take the roster's)")
    p.add_argument("--profile", default=None, help="profile name (default: --name)")
    p.add_argument("--ca", type=Path, default=None, help="CA bundle that verifies the server")
    p.add_argument("--client-cert", type=Path, default=None,
                   help="client certificate (PEM), for a server with require_client_cert")
    p.add_argument("--client-key", type=Path, default=None, help="the key of --client-cert")
    p.add_argument("--force", action="store_true", help="replace a profile of that name")
    p.add_argument("--insecure-http", action="store_true", help="allow a plain http:// "
                   "server and record it in the profile (local tests only)")
    p.set_defaults(handler=_enroll)


def register_profile(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``fedmor profile list|show|use``."""
    group = sub.add_parser("profile", help="the profiles `fedmor enroll` wrote")
    commands = group.add_subparsers(dest="profile_command", metavar="COMMAND", required=True)
    listing = commands.add_parser("list", help="every profile; * marks the default")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(handler=_list)
    show = commands.add_parser("show", help="one profile's settings")
    show.add_argument("name", nargs="?", default=None, help="default: the default profile")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(handler=_show)
    use = commands.add_parser("use", help="make a profile the default")
    use.add_argument("name")
    use.set_defaults(handler=_use)
