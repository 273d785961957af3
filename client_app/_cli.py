"""``fedmor client`` (registered by sdk.cli)."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["register"]


def _client(args: argparse.Namespace) -> int:
    from client_app._app import create_client_app
    from client_app._settings import ClientSettings
    from sdk.wire import load_settings, serve

    cfg = load_settings(ClientSettings, args.config)
    if args.port is not None:
        cfg = cfg.model_copy(update={"port": args.port})
    serve(create_client_app(cfg, start_runner=not args.no_rounds), host=cfg.host,
          port=cfg.port, tls_cert=cfg.tls_cert, tls_key=cfg.tls_key)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``fedmor client``."""
    p = sub.add_parser("client", help="run a member's client app (reward queries + rounds)")
    p.add_argument("--config", type=Path, default=None, help="TOML/JSON settings file")
    p.add_argument("--port", type=int, default=None)
    p.add_argument("--no-rounds", action="store_true", help="serve reward queries only")
    p.set_defaults(handler=_client)
