"""A client may join the key stages before its update exists and provide it later."""

from __future__ import annotations

import numpy as np
import pytest

from sdk.secagg import SecAggClient, Stage
from sdk.secagg._errors import InvalidUpdateError

from .conftest import Harness


def _deferred(h: Harness) -> None:
    """Rebuild every client of ``h`` without its update."""
    h.clients = {c: SecAggClient(c, h.keys[c], h.roster, None, None,
                                 rng=np.random.default_rng(c)) for c in h.clients}


def test_updates_provided_after_the_key_stages_aggregate_as_usual() -> None:
    h = Harness(n=5, dim=32)
    _deferred(h)
    h.step()  # advertise keys
    h.clients[0].provide_input(h.updates[0], h.weights[0])  # early for one: prepared ahead
    h.clients[0].prepare_masked_input()
    h.step()  # share keys
    for c in range(1, 5):
        assert not h.clients[c].has_input
        h.clients[c].provide_input(h.updates[c], h.weights[c])
    while h.outbox:
        h.step()
    h.assert_weighted_mean_of_all()


def test_a_masked_input_request_without_the_update_is_an_error() -> None:
    h = Harness(n=3, dim=4)
    _deferred(h)
    h.step()
    h.step()
    with pytest.raises(InvalidUpdateError, match="before provide_input"):
        h.clients[1].receive(h.outbox[1])
    assert h.clients[1].stage is Stage.ERROR


def test_provide_input_checks_the_round_and_comes_once() -> None:
    h = Harness(n=3, dim=4)
    _deferred(h)
    h.step()  # the round's parameters are known from here on
    client = h.clients[0]
    with pytest.raises(InvalidUpdateError, match="expects 4"):
        client.provide_input(np.zeros(5, np.float32), 1)
    with pytest.raises(InvalidUpdateError, match="max_weight"):
        client.provide_input(np.zeros(4, np.float32), 10**9)
    client.provide_input(np.zeros(4, np.float32), 1)
    with pytest.raises(InvalidUpdateError, match="already given"):
        client.provide_input(np.zeros(4, np.float32), 1)


def test_an_update_after_the_masked_input_is_refused() -> None:
    h = Harness(n=3, dim=4)
    _deferred(h)
    h.step()
    h.step()
    for c in h.clients:
        h.clients[c].provide_input(h.updates[c], h.weights[c])
    h.step()  # masked input sent
    late = SecAggClient.restore(h.clients[2].export_state(), h.keys[2], h.roster, None, None)
    with pytest.raises(InvalidUpdateError, match="too late"):
        late.provide_input(h.updates[2], h.weights[2])
