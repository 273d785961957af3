"""The member re-announces its clip bound when its scorer's bound changed since it last told
the server (a reward model swapped for one with another normalizer, or the ``clip`` setting
changed): otherwise the broker would refuse every answer outside the old bound.

What was announced is kept in the member's own store, so an unchanged bound costs no request.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sdk.wire import ClipBoundAck

if TYPE_CHECKING:
    from client_app._runner import ClientRunner

__all__ = ["ANNOUNCED_CLIP_BOUND", "announce_clip_bound"]

_log = logging.getLogger("fedmor.client")
ANNOUNCED_CLIP_BOUND = "announced_clip_bound"
"""The client store key of the bound the server last acknowledged."""


def announce_clip_bound(runner: ClientRunner) -> bool:
    """Tell the server ``runner``'s scorer bound if it differs from the one last announced
    (enrolling first if need be); True if it sent an announcement."""
    if runner.service is None:  # a runner that answers no reward queries has no bound
        return False
    bound = float(runner.service.clip)
    runner.enroll()  # a first enrollment announces the bound (and stores it) itself
    stored = runner.store.get(ANNOUNCED_CLIP_BOUND)
    if stored is not None and float(stored) == bound:
        return False
    ack = ClipBoundAck.model_validate(
        runner.request("POST", "/v1/identity/clip-bound", {"clip_bound": bound}).json())
    runner.store.put(ANNOUNCED_CLIP_BOUND, repr(ack.clip_bound))
    _log.info("announced clip bound %g to the server (it held %s)", ack.clip_bound,
              "none" if ack.previous is None else f"{ack.previous:g}")
    return True
