"""A TLS app stops promptly on SIGTERM though a peer keeps an idle connection open: closing a
TLS connection waits for the peer's close_notify, which an idle keep-alive client never sends
(asyncio would wait 30 s for it), so the app cuts such a connection after a moment."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx

from fedmor_local import OPEN_POLICY, LocalConsortium

# Above a stop's own time on a loaded machine, below the 30 s the idle peer would cost.
_STOP_WITHIN_S = 25


def test_a_tls_server_stops_with_an_idle_keep_alive_peer(tmp_path: Path) -> None:
    with LocalConsortium(tmp_path, 1, tls=True, demo=True, policy=OPEN_POLICY) as c:
        c.start()
        c.wait_enrolled()
        with httpx.Client(verify=c.verify) as idle:
            assert idle.get(f"{c.server_url}/v1/health").status_code == 200  # then idle
            server = c.procs.pop("server")
            server.terminate()
            # uvicorn ends by raising the signal it stopped for, after its shutdown
            assert server.wait(timeout=_STOP_WITHIN_S) == -signal.SIGTERM
    assert "Application shutdown complete" in (c.dir / "server.log").read_text()
