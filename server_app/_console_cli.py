"""``fedmor console``: mint a one-time login link to the server's operator console, signed by
the operator's identity, and print it (or open it in the browser with ``--open``)."""

from __future__ import annotations

import argparse
import json

__all__ = ["register"]


def _console(args: argparse.Namespace) -> int:
    from server_app._cli import _admin_call

    if args.key_file is None or not args.sender:
        raise ValueError("fedmor console signs with an operator identity: give --key-file "
                         "and --sender (the admin token cannot open the console)")
    resp = _admin_call(args, "POST", "/v1/console/links")
    if resp.status_code != 200:
        raise ValueError(f"console link refused ({resp.status_code}): {resp.text[:300]}")
    link = resp.json()
    url = args.server.rstrip("/") + link["path"]
    if args.json:
        print(json.dumps({"url": url, "expires_at": link["expires_at"],
                          "session_s": link["session_s"]}))
    else:
        import time

        left = max(0, round(link["expires_at"] - time.time()))
        print(f"operator console login link (opens one session; expires in {left} s):")
        print(url)
    if args.open:
        import webbrowser

        webbrowser.open(url)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``fedmor console``."""
    from server_app._cli import _server_options

    p = sub.add_parser("console", help="operator: a one-time login link to the server's web "
                       "console (members, rounds, router versions, alignment, capture)")
    _server_options(p, required=True)
    p.add_argument("--open", action="store_true", help="also open the link in the default "
                   "browser")
    p.add_argument("--json", action="store_true", help="print {url, expires_at, session_s} "
                   "as JSON")
    p.set_defaults(handler=_console)
