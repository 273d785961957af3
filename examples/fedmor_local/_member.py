"""``python -m fedmor_local._member MODULE:FUNCTION --config FILE``: a member app whose router
update is the Python function named, a test's stand-in for local training (one gradient step,
updates on the fixed-point grid). It reaches the app through ``create_client_app``'s
``update_fn``, the Python hook a program that embeds the app uses: a settings file names no
code, so this runs as its own process beside the harness, which imports neither app."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def main() -> int:
    """Load the settings and the function, then serve as ``fedmor client`` does."""
    from client_app._app import create_client_app
    from client_app._scorer import load_object
    from client_app._settings import ClientSettings
    from sdk.serving import configure_logging, load_settings, serve

    parser = argparse.ArgumentParser(prog="python -m fedmor_local._member")
    parser.add_argument("update", help="module:function computing the member's update")
    parser.add_argument("--config", type=Path, required=True, help="the member's settings")
    args = parser.parse_args()
    cfg = load_settings(ClientSettings, args.config)
    configure_logging(cfg.log_level, cfg.log_format)
    update: Any = load_object(args.update)  # create_client_app calls it as an UpdateFn
    app = create_client_app(cfg, start_runner=True, update_fn=update)
    serve(app, host=cfg.host, port=cfg.port, tls_cert=cfg.tls_cert, tls_key=cfg.tls_key,
          log_level=cfg.log_level, log_format=cfg.log_format, connections=cfg.connections)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
