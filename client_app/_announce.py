"""The member announces its scorer's clip bound once per run: after a reward model swapped for
one with another normalizer (or a changed ``clip`` setting) the broker would otherwise refuse
every answer outside the old bound.

Once per run rather than only on a change the member noticed: a server restored from a backup
may hold an older bound than the one this member last told it. The server writes nothing for an
unchanged bound, so the cost is one signed request per start.
"""

from __future__ import annotations

import logging

from client_app._connection import MemberConnection
from sdk.wire import ClipBoundAck

__all__ = ["announce_clip_bound"]

_log = logging.getLogger("fedmor.client")


def announce_clip_bound(runner: MemberConnection) -> bool:
    """Tell the server ``runner``'s scorer bound (enrolling first if need be); True if the
    server held another one."""
    if runner.service is None:  # a runner that answers no reward queries has no bound
        return False
    bound = float(runner.service.clip)
    runner.enroll()
    ack = ClipBoundAck.model_validate(
        runner.request("POST", "/v1/identity/clip-bound", {"clip_bound": bound}).json())
    if ack.previous == ack.clip_bound:
        return False
    _log.info("announced clip bound %g to the server (it held %s)", ack.clip_bound,
              "none" if ack.previous is None else f"{ack.previous:g}")
    return True
