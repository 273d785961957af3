"""Honest-but-curious correctness: the server gets the weighted mean, with any dropouts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sdk.secagg import (
    ProtocolViolation,
    QuantizationConfig,
    RoundAborted,
    SecAggConfig,
    Stage,
    simulate_round,
)
from sdk.secagg._errors import ConfigError
from sdk.secagg._graph import check_majority_threshold, neighbour_graph, share_holders
from sdk.secagg._server import AggregateResult

LIVE = [Stage.ADVERTISE_KEYS, Stage.SHARE_KEYS, Stage.MASKED_INPUT_COLLECTION, Stage.CONSISTENCY_CHECK, Stage.UNMASKING]


def _reference(updates: list[np.ndarray], weights: list[int], ids: list[int]) -> np.ndarray:
    return sum(weights[i] * updates[i].astype(np.float64) for i in ids) / sum(weights[i] for i in ids)


def _check(res: AggregateResult, updates: list[np.ndarray], weights: list[int], quant: QuantizationConfig) -> None:
    ref = _reference(updates, weights, res.survivors)
    # Stochastic rounding errs < 1 unit of max_weight / scale per client on sum_k w_k x_k.
    bound = len(res.survivors) * quant.max_weight / (quant.scale * res.weight_sum)
    assert np.max(np.abs(res.mean - ref)) < bound
    assert res.weight_sum == sum(weights[i] for i in res.survivors)


@st.composite
def _rounds(draw: st.DrawFn) -> tuple:
    n = draw(st.integers(2, 60))
    degree = draw(st.integers(1, n - 1))
    threshold = draw(st.integers(share_holders(n, degree) // 2 + 1, degree + 1))  # a majority
    weights = draw(st.lists(st.integers(1, 1000), min_size=n, max_size=n))
    drops = {s: set(draw(st.lists(st.integers(0, n - 1), max_size=max(1, n // 5), unique=True))) for s in LIVE}
    seed = draw(st.integers(0, 2**32 - 1))
    return n, degree, threshold, weights, drops, seed


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_rounds())
def test_weighted_mean_or_clear_abort(case: tuple) -> None:
    n, degree, threshold, weights, drops, seed = case
    rng = np.random.default_rng(seed)
    updates = [rng.uniform(-1, 1, 3).astype(np.float32) for _ in range(n)]
    cfg = SecAggConfig(degree=degree, threshold=threshold)
    try:
        res = simulate_round(updates, weights, cfg, dropouts=drops, rng=rng)
    except RoundAborted as exc:
        assert exc.survivors < exc.threshold == threshold
        return
    early = drops[Stage.ADVERTISE_KEYS] | drops[Stage.SHARE_KEYS] | drops[Stage.MASKED_INPUT_COLLECTION]
    assert set(res.survivors) <= set(range(n)) - early
    _check(res, updates, weights, cfg.round_params(list(range(n)), 3).quantization)


@pytest.mark.parametrize("stage", LIVE)
def test_dropouts_at_each_stage(stage: Stage) -> None:
    rng = np.random.default_rng(1)
    n = 12
    updates = [rng.normal(0, 0.3, 20).astype(np.float32) for _ in range(n)]
    weights = [int(w) for w in rng.integers(1, 100, n)]
    cfg = SecAggConfig(degree=6, threshold=4)
    res = simulate_round(updates, weights, cfg, dropouts={stage: {2, 7}}, rng=rng)
    before_mask = stage in (Stage.ADVERTISE_KEYS, Stage.SHARE_KEYS, Stage.MASKED_INPUT_COLLECTION)
    assert (res.survivors == [c for c in range(n) if c not in (2, 7)]) == before_mask
    assert (res.dropped == [2, 7]) == (stage is Stage.MASKED_INPUT_COLLECTION)
    _check(res, updates, weights, cfg.round_params(list(range(n)), 20).quantization)


@pytest.mark.parametrize("stage", LIVE)
def test_below_threshold_aborts_and_reveals_nothing(stage: Stage) -> None:
    n = 6
    updates = [np.full(4, 0.5, dtype=np.float32) for _ in range(n)]
    with pytest.raises(RoundAborted) as info:
        simulate_round(updates, [1] * n, SecAggConfig(degree=5, threshold=4), dropouts={stage: {0, 1, 2}})
    assert info.value.survivors == 3 and info.value.threshold == 4
    assert stage.value in str(info.value)


def test_clients_masked_input_hides_the_update() -> None:
    from .conftest import Harness

    h = Harness(n=4, dim=64)
    h.step()
    h.step()
    replies = h.deliver()
    for c, msg in replies.items():
        q = h.server.params.quantization
        encoded = np.round(h.updates[c] * h.weights[c] / q.max_weight * q.scale).astype(np.int64)
        words = msg.vector()[:-1].view(np.int32).astype(np.int64)
        assert np.mean(np.abs(words - encoded) <= 1) < 0.1  # masked, not plain


def test_graph_is_deterministic_symmetric_and_regular() -> None:
    ids = list(range(40))
    g1, g2 = neighbour_graph(ids, 8, b"seed"), neighbour_graph(ids, 8, b"seed")
    assert g1 == g2 and g1 != neighbour_graph(ids, 8, b"other")
    assert all(len(v) == 8 and c not in v for c, v in g1.items())
    assert all(c in g1[d] for c, v in g1.items() for d in v)
    assert all(len(v) == 39 for v in neighbour_graph(ids, 39, b"s").values())






def test_refused_masked_inputs_stay_out_of_the_aggregate() -> None:
    from .conftest import Harness

    h = Harness(n=4, dim=32)
    h.step()
    h.step()
    replies = h.deliver(skip=frozenset({3}))  # the server sums each input as it accepts it
    forged = replies[0].model_copy(update={"masked": bytes(len(replies[0].masked))})
    with pytest.raises(ProtocolViolation, match="duplicate"):
        h.server.receive(forged)  # a second input from client 0
    late = h.clients[3].receive(h.outbox[3])
    with pytest.raises(ProtocolViolation, match="bytes"):
        h.server.receive(late.model_copy(update={"masked": late.masked[:-4]}))
    h.server.receive(late)
    h.outbox = h.server.close_stage()
    while h.server.result is None:
        h.step()
    _check(h.server.result, h.updates, h.weights, h.server.params.quantization)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 13])
def test_share_holders_are_each_clients_neighbourhood_and_the_rule_wants_a_majority(n: int) -> None:
    for degree in range(1, n + 1):
        graph = neighbour_graph(list(range(n)), degree, b"s")
        holders = share_holders(n, degree)  # odd degrees rounded up, as the graph does
        assert {len(v) + 1 for v in graph.values()} == {holders}
        check_majority_threshold(holders // 2 + 1, degree, n)
        with pytest.raises(ConfigError, match="2 x threshold > share holders"):
            check_majority_threshold(holders // 2, degree, n)
    with pytest.raises(ConfigError, match="not a majority"):  # the config refuses it too
        SecAggConfig(degree=n - 1, threshold=max(1, n // 2)).round_params(list(range(n)), 4)
