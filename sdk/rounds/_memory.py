"""The in-memory driver of a round kind: both halves of one round in one process, no I/O.

The third driver beside the server's round manager and the member's runner: it runs the very
``ServerRound`` and ``ClientRound`` halves they run, hands each typed message straight from one
half to the other, and does the member's and the server's delta arithmetic with the same
``as_delta`` / ``from_delta``. Simulations (the router's federated training) use it, so a
round computed in memory is the round a consortium computes over REST.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sdk.rounds._kinds import ROUND_KINDS
from sdk.rounds._protocols import (
    ClientRound,
    RoundFailed,
    RoundKind,
    UpdateRejected,
    as_delta,
    from_delta,
)
from sdk.wire import RoundSpec, public_key_b64

__all__ = ["MemoryRound", "memory_spec", "run_in_memory"]


@dataclass(frozen=True)
class MemoryRound:
    """What one in-memory round produced; ``params`` is None when the round failed."""

    params: np.ndarray | None  # (P,) float32: base + the weighted mean of the deltas
    survivors: list[str]  # the client ids whose updates ``params`` combines
    weight_sum: float
    bytes_up: int  # every delivered client message, in its wire size
    bytes_down: int  # every delivered server message, in its wire size
    failed: str | None = None


def memory_spec(kind: str, keys: Mapping[str, Ed25519PrivateKey], vector_length: int,
                params: Mapping[str, Any] | None = None, *, round_id: int = 0,
                min_clients: int = 1) -> RoundSpec:
    """The spec of an in-memory round of ``kind`` among the holders of ``keys`` (client id ->
    identity key, in protocol order), as a server would announce it: the kind's creation-time
    params (``prepare``: SecAgg+'s graph seed unless ``params`` fixes it) filled in."""
    return RoundSpec(round_id=round_id, kind=kind, participants=list(keys),
                     public_keys=[public_key_b64(k) for k in keys.values()],
                     vector_length=vector_length, min_clients=min_clients, stage_deadline_s=0.0,
                     params=ROUND_KINDS[kind].prepare(dict(params or {})))


def run_in_memory(
    kind: RoundKind[Any],
    spec: RoundSpec,
    keys: Mapping[str, Ed25519PrivateKey],
    updates: Mapping[str, tuple[np.ndarray, float]],
    base: np.ndarray | None,
    *,
    dropouts: Mapping[str, Collection[str]] | None = None,
    rngs: Mapping[str, np.random.Generator] | None = None,
    on_message: Callable[[str, object], None] | None = None,
) -> MemoryRound:
    """Run round ``spec`` of ``kind`` between its participants' client halves and its server
    half; ``updates[client_id]`` is (phi_k (P,), n_k) trained from ``base`` (P,).

    ``dropouts[stage]``: the clients whose reply at ``stage`` never arrives (they are gone
    from then on); a client half that refuses to go on (``RoundFailed``) is gone too. A local
    update the kind rejects raises ``UpdateRejected``: in memory the caller owns every update.
    ``on_message(client_id, message)`` sees each typed message the server half receives (an
    auditor's view of the wire).
    """
    try:
        terms = kind.terms(spec)
    except ValueError as exc:
        raise RoundFailed(str(exc)) from exc
    server = kind.server(terms)
    clients: dict[str, ClientRound[Any, Any]] = {
        cid: kind.client(terms, client_id=cid, key=keys[cid], state=None,
                         rng=None if rngs is None else rngs[cid])
        for cid in spec.participants
    }
    gone: set[str] = set()
    up = down = 0
    outbox: dict[str, object] = {cid: server.opening(cid) for cid in spec.participants}
    try:
        for stage in server.stages:
            gone |= set((dropouts or {}).get(stage, ()))
            for cid, msg in outbox.items():
                if cid in gone:
                    continue
                down += kind.wire_size(msg)
                half = clients[cid]
                if stage == half.update_stage:  # every update is at hand: nothing to wait on
                    half.provide(as_delta(updates[cid][0], base), updates[cid][1])
                try:
                    reply = half.reply(stage, msg)
                except UpdateRejected:
                    raise
                except RoundFailed:
                    gone.add(cid)
                    continue
                up += kind.wire_size(reply)
                if on_message is not None:
                    on_message(cid, reply)
                server.accept(stage, cid, reply)
            outbox = server.close_stage(stage)
    except UpdateRejected:
        raise
    except RoundFailed as exc:
        return MemoryRound(None, [], 0.0, up, down, failed=str(exc))
    survivors, weight_sum = server.survivors()
    return MemoryRound(from_delta(server.result(), base), survivors, weight_sum, up, down)
