import numpy as np
import pytest
import torch

from sdk.router import NeuralThompsonRouter, NeuralTSConfig, Router, RouterConfig
from sdk.router._errors import RouterShapeError

from ._helpers import tiny_router

K, T, LAST = 4, 600, 200


def _bandit(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """K clusters of token sequences; arm k pays 1 w.p. 0.9 on cluster k, 0.1 elsewhere."""
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(K, 3, 16, generator=g)  # (K, T_tok, D)
    cluster = torch.randint(0, K, (T,), generator=g)
    hidden = centers[cluster] + 0.3 * torch.randn(T, 3, 16, generator=g)  # (T, 3, D)
    return hidden, torch.ones(T, 3, dtype=torch.bool), cluster, torch.rand(T, generator=g)


def _play(seed: int, *, diagonal: bool, random_policy: bool = False) -> tuple[float, int]:
    """(fraction of optimal picks in the last LAST rounds, total non-optimal picks)."""
    hidden, mask, cluster, u = _bandit(seed)
    # a random (untrained) trunk: wide enough that the K clusters are linearly separable in z
    cfg = RouterConfig(
        input_dim=16, d_model=32, num_layers=1, num_heads=2, dim_feedforward=64, seed=seed
    )
    router = Router(cfg, list("abcd"), encoder_id="test-encoder")
    nts = NeuralThompsonRouter(router, NeuralTSConfig(diagonal=diagonal, seed=seed))
    z = nts.context(hidden, mask)  # (T, d): the frozen trunk's features
    pick_rng = np.random.default_rng(seed)
    optimal = []
    for t in range(T):
        arm = int(pick_rng.integers(K)) if random_policy else int(nts.select(z[t])[0])
        reward = float(u[t] < (0.9 if arm == cluster[t] else 0.1))
        if not random_policy:
            nts.update(z[t], torch.tensor([arm]), torch.tensor([reward]))
        optimal.append(arm == int(cluster[t]))
    return float(np.mean(optimal[-LAST:])), T - int(np.sum(optimal))


@pytest.mark.parametrize("diagonal", [True, False])
def test_neural_ts_reaches_low_regret_where_random_does_not(diagonal: bool) -> None:
    for seed in range(3):
        frac, mistakes = _play(seed, diagonal=diagonal)
        rand_frac, rand_mistakes = _play(seed, diagonal=diagonal, random_policy=True)
        # measured over 10 seeds: min 0.98 (diagonal and full); random ~ 1/K
        assert frac >= 0.9, (seed, frac)
        assert rand_frac <= 0.4
        # cumulative regret (in optimal-arm picks) at most a third of random's (~450 of 600)
        assert mistakes < rand_mistakes / 3, (seed, mistakes, rand_mistakes)


def test_only_the_head_moves_and_u_grows() -> None:
    router = tiny_router()
    nts = NeuralThompsonRouter(router, NeuralTSConfig(diagonal=True))
    trunk = {
        n: p.detach().clone() for n, p in router.named_parameters() if not n.startswith("head")
    }
    head_before = router.head.weight.detach().clone()
    z = nts.context(torch.randn(4, 3, 16), torch.ones(4, 3, dtype=torch.bool))
    _, sigma_before = nts.scores(z)
    nts.update(z, torch.tensor([0, 0, 1, 1]), torch.tensor([1.0, 1.0, 0.0, 1.0]))
    for n, p in router.named_parameters():
        if not n.startswith("head"):
            assert torch.equal(p, trunk[n]), n
    assert not torch.equal(router.head.weight, head_before)
    assert nts.u.shape == (2, 17)
    _, sigma_after = nts.scores(z)
    assert bool((sigma_after < sigma_before).all())  # both arms were observed: less uncertain
    assert nts.num_updates == 4


def test_reward_one_raises_the_arm_mean_and_zero_lowers_it() -> None:
    nts = NeuralThompsonRouter(tiny_router(), NeuralTSConfig(lr=0.5))
    z = nts.context(torch.randn(1, 3, 16), torch.ones(1, 3, dtype=torch.bool))
    r0 = nts.scores(z)[0][0]
    nts.update(z, torch.tensor([0]), torch.tensor([1.0]))
    nts.update(z, torch.tensor([1]), torch.tensor([0.0]))
    r1 = nts.scores(z)[0][0]
    assert r1[0] > r0[0] and r1[1] < r0[1]


@pytest.mark.parametrize("diagonal", [True, False])
def test_state_dict_round_trip_replays_the_same_choices(diagonal: bool) -> None:
    cfg = NeuralTSConfig(diagonal=diagonal, nu=1.0, seed=3)
    a = NeuralThompsonRouter(tiny_router(), cfg)
    z = a.context(torch.randn(8, 3, 16), torch.ones(8, 3, dtype=torch.bool))
    a.update(z[:4], a.select(z[:4]), torch.tensor([1.0, 0.0, 1.0, 0.0]))
    b = NeuralThompsonRouter(tiny_router(seed=5), cfg)
    b.load_state_dict(a.state_dict())
    for _ in range(3):
        arms_a, arms_b = a.select(z), b.select(z)
        assert torch.equal(arms_a, arms_b)
        a.update(z, arms_a, torch.ones(8))
        b.update(z, arms_b, torch.ones(8))
    torch.testing.assert_close(a.u, b.u)
    other = NeuralThompsonRouter(tiny_router(), cfg.model_copy(update={"diagonal": not diagonal}))
    with pytest.raises(RouterShapeError, match="diagonal"):
        other.load_state_dict(a.state_dict())


def test_full_u_matches_explicit_inverse() -> None:
    nts = NeuralThompsonRouter(tiny_router(), NeuralTSConfig(diagonal=False, lam=0.5))
    z = nts.context(torch.randn(5, 3, 16), torch.ones(5, 3, dtype=torch.bool))
    _, g = nts._mean_and_grad(z)
    arms = torch.tensor([0, 1, 0, 0, 1])
    nts.update(z, arms, torch.ones(5))
    u0 = 0.5 * torch.eye(17) + sum(torch.outer(g[i, 0], g[i, 0]) for i in (0, 2, 3))
    torch.testing.assert_close(nts.u[0], torch.linalg.inv(u0), atol=1e-4, rtol=1e-4)


def test_bad_inputs_are_clear_errors() -> None:
    nts = NeuralThompsonRouter(tiny_router())
    with pytest.raises(RouterShapeError, match="contexts"):
        nts.select(torch.zeros(2, 5))
    z = torch.zeros(2, 16)
    with pytest.raises(RouterShapeError, match="out of range"):
        nts.update(z, torch.tensor([0, 2]), torch.tensor([1.0, 0.0]))
    with pytest.raises(RouterShapeError, match="differ in length"):
        nts.update(z, torch.tensor([0]), torch.tensor([1.0, 0.0]))
