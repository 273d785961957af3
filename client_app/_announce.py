"""The member announces its scorer's clip bound once per run: after a reward model swapped for
one with another normalizer (or a changed ``clip`` setting) the broker would otherwise refuse
every answer outside the old bound. It announces its round terms (the rules of its site policy
that decide which rounds it takes part in) with it, and that it started (a restart the
operator sees even when the member resumed its round and nothing failed), for the operator's
views.

Once per run rather than only on a change the member noticed: a server restored from a backup
may hold an older bound than the one this member last told it. The server writes nothing for an
unchanged bound, so the cost is one signed request per start.
"""

from __future__ import annotations

import logging

from client_app._transport import ServerTransport, passed_on
from sdk.wire import ClipBoundAck, RequestRefused

__all__ = ["announce_clip_bound", "announce_round_terms", "announce_start"]

_log = logging.getLogger("fedmor.client")


def announce_clip_bound(runner: ServerTransport) -> bool:
    """Tell the server ``runner``'s scorer bound (enrolling first if need be); True if the
    server held another one."""
    if runner.service is None:  # a runner that answers no reward queries has no bound
        return False
    bound = float(runner.service.clip)
    runner.enroll()
    ack = runner.post("/v1/identity/clip-bound", {"clip_bound": bound}, ClipBoundAck)
    if ack.previous == ack.clip_bound:
        return False
    _log.info("announced clip bound %g to the server (it held %s)", ack.clip_bound,
              "none" if ack.previous is None else f"{ack.previous:g}")
    return True


def announce_start(runner: ServerTransport) -> None:
    """Tell the server this member started cleanly (it counts a restart and clears a problem
    it reported at a refused start). An older server without the endpoint is left alone."""
    runner.enroll()
    try:
        runner.post("/v1/identity/status", {}, attempts=3)
    except RequestRefused as exc:
        if passed_on(exc):
            raise
        if exc.status not in (404, 405):  # the operator's view only: the member works on
            _log.warning("the server refused this member's start announcement: %s", exc)


def announce_round_terms(runner: ServerTransport) -> None:
    """Tell the server which rounds this member's site policy takes part in (a member in no
    rounds announces none): the operator sees whom a round would lose before opening it. An
    older server without the endpoint is left alone."""
    if not runner.settings.run_rounds:
        return
    policy = runner.settings.policy
    terms = {"round_kinds": policy.round_kinds, "min_participants": policy.min_participants,
             "min_threshold": policy.min_threshold,
             "require_dp": policy.require_dp or policy.max_epsilon is not None,
             "allow_captured_rounds": policy.allow_captured_rounds}
    runner.enroll()
    try:
        runner.post("/v1/identity/round-terms", terms, attempts=3)
    except RequestRefused as exc:
        if passed_on(exc):
            raise
        if exc.status not in (404, 405):  # the operator's view only: the member works on
            _log.warning("the server refused this member's round terms: %s", exc)
