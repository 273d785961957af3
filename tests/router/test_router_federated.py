"""Federated router training: secure vs plain FedAvg, dropouts, bad clients, DP, routing."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from sdk.router import (
    FederatedConfig,
    FederatedRouterTrainer,
    HashingEncoder,
    HashingEncoderConfig,
    LocalTrainingConfig,
    PlainAggregator,
    Router,
    RouterClient,
    RouterConfig,
    RouterError,
    SecureAggregator,
    fedavg_plain,
    route,
)
from sdk.router._aggregators import LocalRouterUpdate
from sdk.router._errors import RouterMismatchError, RouterShapeError
from sdk.secagg import DPConfig, QuantizationConfig, SecAggConfig, Stage, client_noise_std
from tests.router._helpers import client_responses

IDS = ("a", "b", "c")
KINDS = {"a": "color", "b": "chart", "c": "color"}
ENC = HashingEncoder(HashingEncoderConfig(dim=16))
DATA = {c: client_responses(ENC, KINDS[c], 24, seed=i) for i, c in enumerate(IDS)}


def _router(ids: tuple[str, ...] = IDS) -> Router:
    cfg = RouterConfig(input_dim=16, d_model=16, num_layers=1, num_heads=2, dim_feedforward=32)
    return Router(cfg, list(ids), ENC.encoder_id)


def _clients(ids: tuple[str, ...] = IDS) -> list[RouterClient]:
    return [RouterClient(c, DATA[c], ENC.encoder_id, ids) for c in ids]


def _fast(rounds: int = 2, **kw: object) -> FederatedConfig:
    local = LocalTrainingConfig(epochs=1, batch_size=16, lr=3e-3)
    return FederatedConfig(rounds=rounds, local=local, **kw)  # type: ignore[arg-type]


def _updates(router: Router) -> dict[str, LocalRouterUpdate]:
    from sdk.router import train_router_locally

    cfg = LocalTrainingConfig(epochs=1, batch_size=16, lr=3e-3)
    return {c: train_router_locally(router, DATA[c], k, cfg) for k, c in enumerate(IDS)}


def _bound(agg: SecureAggregator, n: int, weight_sum: int) -> float:
    # docs/secure-aggregation.md: |error| < N * max_weight / (2^scale_bits * sum n_k)
    q = agg.config.round_params(list(range(n)), 1).quantization
    return n * q.max_weight / (2**q.scale_bits * weight_sum) + 1e-6  # + float32 rounding


def test_secure_aggregate_equals_plain_fedavg_within_quantization_error() -> None:
    router = _router()
    updates = _updates(router)
    g = router.get_flat_params()
    agg = SecureAggregator()
    agg.bind(IDS, rounds=1, sample_rate=1.0)
    secure = agg.aggregate(0, g, updates, {})
    plain = PlainAggregator().aggregate(0, g, updates, {})
    assert secure.params is not None and plain.params is not None
    assert secure.survivors == plain.survivors == list(IDS)
    assert secure.weight_sum == plain.weight_sum == sum(len(DATA[c]) for c in IDS)
    err = float(np.abs(secure.params - plain.params).max())
    assert err < _bound(agg, 3, secure.weight_sum)
    moved = float(np.abs(plain.params - g).max())
    assert moved > 100 * err  # the comparison is not trivially between two unchanged routers


def test_secure_and_plain_training_stay_together_over_rounds() -> None:
    routers = {}
    for name, agg in (("secure", SecureAggregator()), ("plain", PlainAggregator())):
        routers[name] = _router()
        FederatedRouterTrainer(routers[name], _clients(), _fast(3), agg, log=None).run()
    # Quantization errors (~1e-7) grow through Adam's normalized steps, but stay tiny next to
    # the distance training moved the parameters, and the routing decisions agree.
    diff = np.abs(routers["secure"].get_flat_params() - routers["plain"].get_flat_params())
    moved = np.abs(routers["plain"].get_flat_params() - _router().get_flat_params())
    assert float(diff.max()) < 1e-3 < float(moved.max())
    batch = DATA["b"]
    with torch.no_grad():
        picks = [route(r(batch.hidden, batch.mask)) for r in routers.values()]
    assert torch.equal(picks[0], picks[1])


def test_deterministic_by_seed_and_progress_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    params = []
    for _ in range(2):
        r = _router()
        FederatedRouterTrainer(r, _clients(), _fast(2)).run()
        params.append(r.get_flat_params())
    np.testing.assert_array_equal(params[0], params[1])
    out = capsys.readouterr().out
    assert "[router secure] round 1/2: 3/3 clients" in out
    assert "round 2/2" in out


@pytest.mark.parametrize("stage", [Stage.MASKED_INPUT_COLLECTION, Stage.UNMASKING])
def test_dropout_mid_round_still_completes(stage: Stage) -> None:
    router = _router()
    updates = _updates(router)
    g = router.get_flat_params()
    agg = SecureAggregator()
    agg.bind(IDS, rounds=1, sample_rate=1.0)
    res = agg.aggregate(0, g, updates, {stage: {"b"}})
    assert res.params is not None and res.aborted is None
    if stage is Stage.MASKED_INPUT_COLLECTION:
        # b never sent its masked input: the result is the FedAvg of a and c only.
        assert res.survivors == ["a", "c"] and res.dropped == ["b"]
        expected = fedavg_plain([updates["a"], updates["c"]])
    else:
        # b's masked input arrived; losing it at unmasking does not remove it from the sum.
        assert res.survivors == list(IDS)
        expected = fedavg_plain(list(updates.values()))
    assert float(np.abs(res.params - expected).max()) < _bound(agg, 3, res.weight_sum)


def test_trainer_survives_dropouts_and_aborted_rounds() -> None:
    router = _router()
    cfg = SecAggConfig(clip_range=1.0, max_weight=10_000, threshold=2)
    trainer = FederatedRouterTrainer(router, _clients(), _fast(3), SecureAggregator(cfg), log=None)
    trainer.run({0: {Stage.SHARE_KEYS: {"c"}}})
    before = router.get_flat_params()
    aborted = trainer.run_round(3, {Stage.ADVERTISE_KEYS: {"a", "b"}})  # 1 < threshold 2 left
    assert aborted.aborted is not None and "threshold" in aborted.aborted
    np.testing.assert_array_equal(router.get_flat_params(), before)  # unchanged
    h = trainer.history
    assert h[0].survivors == ["a", "b"] and h[0].dropped == ["c"] and h[0].aborted is None
    assert [len(s.survivors) for s in h[1:3]] == [3, 3]
    again = trainer.run_round(4)
    assert again.aborted is None and not np.array_equal(router.get_flat_params(), before)


def test_client_disagreeing_on_k_is_refused_before_training() -> None:
    clients = _clients()
    clients[1] = RouterClient("b", DATA["b"], ENC.encoder_id, ("a", "b"))
    with pytest.raises(RouterMismatchError, match=r"'b' expects K=2.*router has K=3"):
        FederatedRouterTrainer(_router(), clients, _fast())


def test_client_on_another_encoder_is_refused_before_training() -> None:
    clients = _clients()
    clients[2] = RouterClient("c", DATA["c"], "hashing-encoder-v1:other", IDS)
    with pytest.raises(RouterMismatchError, match="'c' encodes with 'hashing-encoder-v1:other'"):
        FederatedRouterTrainer(_router(), clients, _fast())


def test_client_with_other_feature_size_or_unknown_id_is_refused() -> None:
    clients = _clients()
    wide = HashingEncoder(HashingEncoderConfig(dim=8))
    clients[0] = RouterClient("a", client_responses(wide, "color", 4, 0), ENC.encoder_id, IDS)
    with pytest.raises(RouterShapeError, match="'a' data has feature size D=8"):
        FederatedRouterTrainer(_router(), clients, _fast())
    with pytest.raises(RouterMismatchError, match="'z' is not in the router"):
        FederatedRouterTrainer(
            _router(), [*_clients()[:2], RouterClient("z", DATA["c"], ENC.encoder_id, IDS)]
        )


class _TruncatingClient(RouterClient):
    def local_update(
        self, router: Router, client_index: int, config: LocalTrainingConfig
    ) -> LocalRouterUpdate:
        u = super().local_update(router, client_index, config)
        return LocalRouterUpdate(params=u.params[:-1], num_samples=u.num_samples, loss=u.loss)


def test_update_of_wrong_shape_is_a_clear_error() -> None:
    clients = _clients()
    clients[1] = _TruncatingClient("b", DATA["b"], ENC.encoder_id, IDS)
    router = _router()
    p = router.num_params()
    trainer = FederatedRouterTrainer(router, clients, _fast(), log=None)
    with pytest.raises(
        RouterShapeError, match=rf"client 'b' has shape \({p - 1},\), expected \({p},\)"
    ):
        trainer.run()


def test_sampling_fraction_is_seeded_and_secure_needs_two_per_round() -> None:
    cfg = _fast(4, fraction=0.67, seed=3)
    sampled = []
    for _ in range(2):
        t = FederatedRouterTrainer(_router(), _clients(), cfg, PlainAggregator(), log=None)
        sampled.append([s.sampled for s in t.run()])
    assert sampled[0] == sampled[1]
    assert all(len(s) == 2 for s in sampled[0])
    assert len({tuple(s) for s in sampled[0]}) > 1  # rounds differ
    with pytest.raises(RouterError, match="needs >= 2 clients per round"):
        FederatedRouterTrainer(_router(), _clients(), _fast(clients_per_round=1))
    with pytest.raises(ValueError, match="not both"):
        FederatedConfig(clients_per_round=2, fraction=0.5)


def test_bytes_are_counted_from_the_messages() -> None:
    p = _router().num_params()
    stats = {}
    for agg in (SecureAggregator(), PlainAggregator()):
        t = FederatedRouterTrainer(_router(), _clients(), _fast(1), agg, log=None)
        stats[agg.name] = t.run()[0]
    # Plain: float32 params + an int64 n_k per client; both: phi_t broadcast to each client.
    assert stats["plain"].bytes_up == 3 * (4 * p + 8)
    assert stats["plain"].bytes_down == 3 * 4 * p
    # Secure: at least the masked uint32 vector (P + 1 words) per client, plus keys and shares.
    assert stats["secure"].bytes_up > 3 * 4 * (p + 1)
    assert stats["secure"].bytes_up < 3 * 4 * (p + 1) + 20_000
    assert stats["secure"].bytes_down > stats["plain"].bytes_down


def test_client_level_dp_clips_adds_noise_and_reports_epsilon() -> None:
    dp = DPConfig(clip_norm=0.05, noise_multiplier=1.0)
    agg = SecureAggregator(SecAggConfig(clip_range=1.0, dp=dp), seed=1)
    router = _router()
    g = router.get_flat_params()
    trainer = FederatedRouterTrainer(router, _clients(), _fast(2, fraction=0.67), agg, log=None)
    stats = trainer.run()
    assert agg.config.max_weight == 1  # uniform weights under DP
    assert all(s.weight_sum == 2 for s in stats)
    expected = dp.model_copy(update={"rounds": 2, "sample_rate": 2 / 3})
    assert stats[0].epsilon == pytest.approx(expected.epsilon(1))
    assert stats[1].epsilon == pytest.approx(expected.epsilon(2))
    eps = [s.epsilon for s in stats]
    assert eps[0] is not None and eps[1] is not None and eps[1] > eps[0]
    # Noise std per coordinate of the mean: z * C / sqrt(t) * sqrt(survivors) / survivors.
    p = g.size
    moved = np.linalg.norm(router.get_flat_params() - g)
    assert moved > 0.5 * 0.05 * np.sqrt(p) / np.sqrt(2)  # noise dominates a clipped update
    with pytest.raises(RouterError, match="max_weight"):
        small = SecureAggregator(SecAggConfig(max_weight=10))
        FederatedRouterTrainer(_router(), _clients(), _fast(1), small, log=None).run()


def test_dp_noise_is_uniform_weight_noise_with_an_explicit_quantization() -> None:
    # docs/router.md: under DP max_weight = 1, so each client adds noise of std z * C / sqrt(t),
    # also when the config names a quantization made for weighted rounds (max_weight 1000).
    dp = DPConfig(clip_norm=1.0, noise_multiplier=1.0)
    quant = QuantizationConfig(clip_range=4.0, scale_bits=16, max_weight=1000)
    agg = SecureAggregator(SecAggConfig(threshold=2, quantization=quant, dp=dp), seed=3)
    params = agg.config.round_params(list(range(3)), 1)
    assert params.quantization.max_weight == 1
    std = client_noise_std(dp, min_survivors=2, max_weight=params.quantization.max_weight)
    assert std == pytest.approx(1 / np.sqrt(2))
    # The round itself: zero deltas, so the mean over 3 clients is pure noise of std
    # std / sqrt(3) per coordinate (it was clip_range-bounded garbage with max_weight 1000).
    p = 20_000
    g = np.zeros(p, dtype=np.float32)
    agg.bind(IDS, rounds=1, sample_rate=1.0)
    zero = {c: LocalRouterUpdate(g.copy(), 5, 0.0) for c in IDS}
    out = agg.aggregate(0, g, zero, {})
    assert out.params is not None and out.weight_sum == 3
    assert float(np.std(out.params)) == pytest.approx(std / np.sqrt(3), rel=0.05)


def test_federated_router_routes_two_distinguishable_clients() -> None:
    ids = ("colors", "charts")
    kinds = {"colors": "color", "charts": "chart"}
    clients = [
        RouterClient(c, client_responses(ENC, kinds[c], 40, seed=10 + i), ENC.encoder_id, ids)
        for i, c in enumerate(ids)
    ]
    router = _router(ids)

    def accuracy() -> float:
        hits = total = 0
        with torch.no_grad():
            for k, c in enumerate(ids):
                fresh = client_responses(ENC, kinds[c], 30, seed=100 + k)  # unseen samples
                hits += int((route(router(fresh.hidden, fresh.mask)) == k).sum())
                total += len(fresh)
        return hits / total

    before = accuracy()
    local = LocalTrainingConfig(epochs=2, batch_size=16, lr=3e-3)
    FederatedRouterTrainer(router, clients, FederatedConfig(rounds=5, local=local), log=None).run()
    assert before <= 0.75
    assert accuracy() >= 0.9


def test_cosine_schedule_decays_the_local_lr_over_the_rounds() -> None:
    local = LocalTrainingConfig(lr=1e-2, seed=5)
    cosine = FederatedConfig(rounds=5, local=local, lr_schedule="cosine", final_lr_fraction=0.1)
    lrs = [cosine.local_config(r, 0).lr for r in range(5)]
    assert lrs[0] == pytest.approx(1e-2) and lrs[-1] == pytest.approx(1e-3)
    assert all(a > b for a, b in itertools.pairwise(lrs))
    assert lrs[2] == pytest.approx(0.5 * (1e-2 + 1e-3))  # halfway down the cosine
    flat = FederatedConfig(rounds=5, local=local)
    assert {flat.local_config(r, 1).lr for r in range(5)} == {1e-2}
    # Every (round, client) trains from its own seed, reproducibly.
    seeds = {cosine.local_config(r, k).seed for r in range(5) for k in range(3)}
    assert len(seeds) == 15 and cosine.local_config(2, 1).seed == flat.local_config(2, 1).seed


def test_federated_names_are_exported() -> None:
    import sdk.router

    new = {
        "Aggregator",
        "AverageRM",
        "FederatedConfig",
        "FederatedRouterTrainer",
        "PlainAggregator",
        "RandomRM",
        "RouterClient",
        "RouterSelection",
        "SecureAggregator",
        "SelectionMethod",
        "SingleRM",
        "Table4",
        "encode_pairs",
        "reward_scores",
        "route_pairs",
        "table4",
    }
    assert new <= set(sdk.router.__all__)
    assert all(hasattr(sdk.router, name) for name in new)


def test_train_federated_router_takes_a_configured_aggregator() -> None:
    from sdk.router import train_federated_router
    from sdk.secagg import dp_clip_range

    dp = DPConfig(clip_norm=0.05, noise_multiplier=1.0)
    # The clip range the benchmark gives: a member's noised coordinates fit it.
    clip_range = dp_clip_range(dp, min_survivors=2)
    assert clip_range == pytest.approx(0.05 + 4 * client_noise_std(dp, min_survivors=2,
                                                                    max_weight=1))
    agg = SecureAggregator(SecAggConfig(clip_range=clip_range, dp=dp))
    _, stats = train_federated_router(_clients(), ENC, aggregation=agg, config=_fast(2),
                                      num_layers=1, log=None)
    assert [s.epsilon for s in stats] == pytest.approx(
        [dp.model_copy(update={"rounds": 2}).epsilon(r) for r in (1, 2)])
    with pytest.raises(ValueError, match="aggregation must be one of"):
        train_federated_router(_clients(), ENC, aggregation="dp", log=None)
