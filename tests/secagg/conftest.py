"""An in-memory N-party harness whose messages a test can drop, replay or corrupt."""

from __future__ import annotations

import numpy as np
import pytest

from sdk.secagg import (
    ClientMessage,
    Roster,
    SecAggClient,
    SecAggConfig,
    SecAggServer,
    generate_identities,
)
from sdk.secagg._schema import ServerMessage


class Harness:
    """Clients 0..n-1 and a server; ``step()`` runs one stage honestly."""

    def __init__(self, n: int = 5, dim: int = 6, *, config: SecAggConfig | None = None, round_id: str = "r1", identities: tuple[dict, Roster] | None = None, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.keys, self.roster = identities or generate_identities(range(n))
        self.updates = [rng.uniform(-1, 1, dim).astype(np.float32) for _ in range(n)]
        self.weights = [int(w) for w in rng.integers(1, 50, n)]
        self.clients = {
            c: SecAggClient(c, self.keys[c], self.roster, self.updates[c], self.weights[c], rng=np.random.default_rng(seed + c))
            for c in range(n)
        }
        cfg = config or SecAggConfig(degree=n - 1, threshold=max(2, n // 2 + 1))
        self.server = SecAggServer(cfg.round_params(list(range(n)), dim, round_id=round_id), self.roster)
        self.outbox: dict[int, ServerMessage] = self.server.start()

    def deliver(self, skip: frozenset[int] = frozenset()) -> dict[int, ClientMessage]:
        """Hand the pending server messages to the clients and their replies to the server."""
        replies = {c: self.clients[c].receive(m) for c, m in self.outbox.items() if c not in skip}
        for r in replies.values():
            self.server.receive(r)
        return replies

    def assert_weighted_mean_of_all(self) -> None:
        """The round finished with every client and published their weighted mean (to within
        the quantization error)."""
        res = self.server.result
        assert res is not None and res.survivors == sorted(self.clients)
        ref = sum(w * u.astype(np.float64) for u, w in zip(self.updates, self.weights, strict=True))
        q = self.server.params.quantization
        bound = len(self.clients) * q.max_weight / (q.scale * res.weight_sum)
        assert np.max(np.abs(res.mean - ref / sum(self.weights))) < bound

    def step(self, skip: frozenset[int] = frozenset()) -> dict[int, ServerMessage]:
        """One full honest stage; returns the messages that were delivered."""
        sent = self.outbox
        self.deliver(skip)
        self.outbox = self.server.close_stage()
        return sent


@pytest.fixture
def harness() -> Harness:
    return Harness()
