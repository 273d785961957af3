"""``fedmor console``: mint a one-time login link to the server's operator console, signed by
the operator's identity, and print it (or open it in the browser with ``--open``)."""

from __future__ import annotations

import argparse
import json
import time

from sdk.ops._connection import add_connection_options, connection_from_args
from sdk.ops._operator_client import OperatorClient

__all__ = ["register_console"]


def _console(args: argparse.Namespace) -> int:
    conn = connection_from_args(args)
    if conn.key_file is None or not conn.sender:
        raise ValueError("fedmor console signs with an operator identity: give --profile (an "
                         "operator's) or --key-file and --sender; the admin token cannot open "
                         "the console")
    link = OperatorClient(conn).console_link()
    url = conn.server.rstrip("/") + link.path
    if args.json:
        print(json.dumps({"url": url, "expires_at": link.expires_at,
                          "session_s": link.session_s}))
    else:
        left = max(0, round(link.expires_at - time.time()))
        print(f"operator console login link (opens one session; expires in {left} s):")
        print(url)
    if args.open:
        import webbrowser

        webbrowser.open(url)
    return 0


def register_console(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``fedmor console``."""
    p = sub.add_parser("console", help="operator: a one-time login link to the server's web "
                       "console (members, rounds, router versions, alignment, capture)")
    add_connection_options(p)
    p.add_argument("--open", action="store_true", help="also open the link in the default "
                   "browser")
    p.add_argument("--json", action="store_true", help="print {url, expires_at, session_s} "
                   "as JSON")
    p.set_defaults(handler=_console)
