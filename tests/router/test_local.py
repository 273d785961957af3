import numpy as np
import pytest
import torch

from sdk.router import (
    EncodedBatch,
    HashingEncoder,
    HashingEncoderConfig,
    LocalTrainingConfig,
    Router,
    RouterConfig,
    fedavg_plain,
    route,
    train_router_locally,
)
from sdk.router._aggregators import LocalRouterUpdate
from sdk.router._errors import RouterShapeError

from ._helpers import client_responses, tiny_router

ENC = HashingEncoder(HashingEncoderConfig(dim=16))


def _routing_accuracy(router: Router, batches: list[EncodedBatch]) -> float:
    router.eval()
    with torch.no_grad():
        hits = [
            (route(router(b.hidden, b.mask)) == k).float().mean() for k, b in enumerate(batches)
        ]
    return float(torch.stack(hits).mean())


def test_local_training_prefers_own_client_and_leaves_input_router_alone() -> None:
    router = tiny_router(clients=("color", "chart"))
    before = router.get_flat_params()
    data = client_responses(ENC, "chart", num_pairs=8, seed=0)
    # the untrained router sends this data to client 1; local training as client 0 flips it
    upd = train_router_locally(router, data, 0, LocalTrainingConfig(epochs=3, lr=3e-3))
    assert upd.num_samples == 16  # chosen and rejected of 8 pairs
    assert np.array_equal(router.get_flat_params(), before)
    trained = tiny_router(clients=("color", "chart"))
    trained.set_flat_params(upd.params)
    trained.eval()
    with torch.no_grad():
        assert bool((route(router.eval()(data.hidden, data.mask)) == 1).all())
        assert bool((route(trained(data.hidden, data.mask)) == 0).all())
    assert upd.loss > 0


def test_local_training_is_deterministic_and_accepts_tensor_tuples() -> None:
    router = tiny_router()
    data = client_responses(ENC, "color", num_pairs=8, seed=1)
    cfg = LocalTrainingConfig(epochs=1, batch_size=4, seed=7)
    a = train_router_locally(router, data, 0, cfg)
    b = train_router_locally(router, (data.hidden, data.mask), 0, cfg)
    c = train_router_locally(router, data, 0, cfg.model_copy(update={"seed": 8}))
    assert np.array_equal(a.params, b.params) and a.loss == b.loss
    assert not np.array_equal(a.params, c.params)
    with pytest.raises(RouterShapeError, match="client_index"):
        train_router_locally(router, data, 2, cfg)


def test_fedavg_plain_is_the_sample_weighted_mean() -> None:
    ups = [
        LocalRouterUpdate(params=np.array([1.0, 2.0], np.float32), num_samples=1, loss=0.0),
        LocalRouterUpdate(params=np.array([4.0, 8.0], np.float32), num_samples=3, loss=0.0),
    ]
    out = fedavg_plain(ups)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [3.25, 6.5])
    with pytest.raises(RouterShapeError, match="different shapes"):
        fedavg_plain([*ups, LocalRouterUpdate(np.zeros(3, np.float32), 1, 0.0)])
    with pytest.raises(RouterShapeError, match="at least one"):
        fedavg_plain([])


def test_in_process_fedavg_rounds_reach_high_routing_accuracy() -> None:
    kinds = ("color", "chart")
    cfg = RouterConfig(input_dim=16, d_model=16, num_layers=2, num_heads=2, dim_feedforward=32)
    router = Router(cfg, list(kinds), ENC.encoder_id)
    train = [client_responses(ENC, kind, num_pairs=16, seed=10 + k) for k, kind in enumerate(kinds)]
    evals = [client_responses(ENC, kind, num_pairs=16, seed=99 + k) for k, kind in enumerate(kinds)]
    assert _routing_accuracy(router, evals) <= 0.6  # untrained
    local = LocalTrainingConfig(epochs=2, batch_size=16, lr=3e-3)
    for rnd in range(5):
        updates = [
            train_router_locally(router, train[k], k, local.model_copy(update={"seed": rnd}))
            for k in range(len(kinds))
        ]
        router.set_flat_params(fedavg_plain(updates))
    assert _routing_accuracy(router, evals) >= 0.9
