"""Ports for processes started on 127.0.0.1, chosen below the kernel's ephemeral range.

A port from ``bind(("127.0.0.1", 0))`` is an ephemeral one: until the process it was given to
binds it, the kernel may hand the same port to any outgoing connection on the host, and an app
started minutes later (a guide's fourth member) then fails with "address already in use". A
port below the ephemeral range is never handed out that way, so only another listener can take
it; each one handed out is first bound once to check it is free, and never handed out twice
by this process.
"""

from __future__ import annotations

import secrets
import socket
from pathlib import Path

__all__ = ["free_port"]

_LOWEST = 10000  # above the well-known and most registered service ports
_EPHEMERAL_FROM = 32768  # Linux's default start; also below macOS's and Windows' 49152
_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_handed: set[int] = set()


def _ephemeral_from() -> int:
    """The first port of this host's ephemeral range (Linux says; elsewhere the default)."""
    try:
        return min(int(_RANGE_FILE.read_text().split()[0]), _EPHEMERAL_FROM)
    except (OSError, ValueError, IndexError):
        return _EPHEMERAL_FROM


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(n: int = 1) -> int:
    """A port free on 127.0.0.1 now, below the ephemeral range and not handed out before by
    this process; with ``n`` > 1, the first of ``n`` consecutive such ports."""
    top = _ephemeral_from() - n
    if top <= _LOWEST:
        raise RuntimeError(f"this host's ephemeral port range starts at {top + n}: no room "
                           f"below it for {n} fixed port(s) (see {_RANGE_FILE})")
    for _ in range(200):
        base = _LOWEST + secrets.randbelow(top - _LOWEST)
        ports = range(base, base + n)
        if _handed.isdisjoint(ports) and all(_bindable(p) for p in ports):
            _handed.update(ports)
            return base
    raise RuntimeError(f"no run of {n} free port(s) below {top + n} on 127.0.0.1")
