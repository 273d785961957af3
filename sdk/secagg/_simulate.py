"""In-memory driver: N clients and the server wired together, with dropouts per stage."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence

import numpy as np

from sdk.secagg._client import SecAggClient
from sdk.secagg._crypto import generate_identities
from sdk.secagg._errors import RoundAborted
from sdk.secagg._schema import ClientMessage, SecAggConfig, ServerMessage
from sdk.secagg._server import AggregateResult, SecAggServer
from sdk.secagg._stages import Stage

__all__ = ["simulate_round"]


def simulate_round(
    updates: Sequence[np.ndarray],
    weights: Sequence[int],
    config: SecAggConfig | None = None,
    *,
    dropouts: Mapping[Stage, set[int]] | None = None,
    rng: np.random.Generator | None = None,
    round_id: str = "sim-round",
    on_message: Callable[[ClientMessage], None] | None = None,
) -> AggregateResult:
    """Run one round with clients 0..N-1 and return the server's result.

    ``dropouts[stage]`` are clients whose reply at ``stage`` is never delivered (they are gone
    from then on). Raises ``RoundAborted`` when too few survive. ``on_message`` sees every
    client message the server receives (an auditor's capture of the wire).
    """
    cfg = config or SecAggConfig()
    n = len(updates)
    ids = list(range(n))
    keys, roster = generate_identities(ids)
    rng = rng or np.random.default_rng()
    clients = {
        c: SecAggClient(c, keys[c], roster, updates[c], weights[c], rng=np.random.default_rng(rng.integers(2**63)))
        for c in ids
    }
    server = SecAggServer(cfg.round_params(ids, int(updates[0].shape[0]), round_id=round_id), roster)
    return _drive_round(server, clients, dropouts=dropouts, on_message=on_message)


def _drive_round(
    server: SecAggServer,
    clients: Mapping[int, SecAggClient],
    *,
    dropouts: Mapping[Stage, Collection[int]] | None = None,
    on_message: Callable[[ClientMessage], None] | None = None,
) -> AggregateResult:
    """Deliver every message between ``server`` and ``clients`` in memory until the result.

    The protocol's own in-memory transport (a consortium's rounds run in memory through
    ``sdk.rounds.run_in_memory`` instead). ``dropouts[stage]``: clients whose reply at ``stage``
    is never delivered; they are gone from then on. A client that refuses to go on (too few
    live neighbours) is gone too. Raises ``RoundAborted`` when too few survive.
    ``on_message`` sees each delivered client message.
    """
    gone: set[int] = set()
    outbox: dict[int, ServerMessage] = server.start()
    while server.result is None:
        gone |= set((dropouts or {}).get(server.stage, ()))
        for c, msg in outbox.items():
            if c in gone:
                continue
            try:
                reply = clients[c].receive(msg)
            except RoundAborted:
                gone.add(c)  # the client refuses to go on (e.g. too few live neighbours)
                continue
            if on_message is not None:
                on_message(reply)
            server.receive(reply)
        outbox = server.close_stage()
    return server.result
