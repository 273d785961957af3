"""An ASGI app served by uvicorn on 127.0.0.1 in a thread of the test process, for a test
that needs a real HTTP server whose objects it can reach (a gated scorer, a stub)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import uvicorn

from fedmor_local import free_port
from fedmor_local._local import wait_healthy


@contextlib.contextmanager
def served(app: Any, port: int | None = None) -> Iterator[str]:
    """``app`` listening on ``port`` (default: a free one) of 127.0.0.1 (its URL), once its
    ``/v1/health`` answers; stopped on exit. A fedmor app whose settings name that port
    accepts the requests signed for it."""
    port = free_port() if port is None else port
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, verify=False, timeout_s=60)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)
