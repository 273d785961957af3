"""Client-level DP calibration and accounting; the CKKS mode's round trip and trust split."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sdk.secagg import (
    CKKSAggregator,
    CKKSContext,
    DPConfig,
    SecAggConfig,
    SecAggError,
    Stage,
    client_noise_std,
    clip_and_noise,
    simulate_round,
)
from sdk.secagg._errors import InvalidUpdateError


def test_clipping_and_per_client_noise_scale() -> None:
    cfg = DPConfig(clip_norm=0.5, noise_multiplier=1.2)
    big = np.full(400, 3.0)
    no_noise = clip_and_noise(big, cfg.model_copy(update={"noise_multiplier": 1e-12}), min_survivors=9, max_weight=1, rng=np.random.default_rng(0))
    assert math.isclose(float(np.linalg.norm(no_noise)), 0.5, rel_tol=1e-6)
    std = client_noise_std(cfg, min_survivors=9, max_weight=1)
    assert math.isclose(std, 1.2 * 0.5 / 3)
    noise = clip_and_noise(np.zeros(200_000), cfg, min_survivors=9, max_weight=1, rng=np.random.default_rng(1))
    assert abs(noise.std() / std - 1) < 0.01


def test_sum_over_threshold_survivors_has_target_noise() -> None:
    # Sum over exactly t clients of their noise: std z * C (here C=1, z=2, t=4).
    cfg = DPConfig(clip_norm=1.0, noise_multiplier=2.0)
    rng = np.random.default_rng(2)
    total = sum(clip_and_noise(np.zeros(50_000), cfg, min_survivors=4, max_weight=1, rng=rng) for _ in range(4))
    assert abs(total.std() - 2.0) < 0.05


def test_epsilon_from_rdp_accountant_is_monotone_and_targetable() -> None:
    base = DPConfig(noise_multiplier=1.0, rounds=100, sample_rate=0.1)
    e10, e100 = base.epsilon(10), base.epsilon()
    assert 0 < e10 < e100 < DPConfig(noise_multiplier=0.7, rounds=100, sample_rate=0.1).epsilon()
    target = DPConfig(target_epsilon=3.0, rounds=100, sample_rate=0.1)
    z = target.resolved_noise_multiplier()
    assert 0.3 < z < 5 and target.epsilon() <= 3.0 + 1e-2
    with pytest.raises(ValueError, match="exactly one"):
        DPConfig(noise_multiplier=1.0, target_epsilon=1.0)


def test_dp_round_survives_dropouts() -> None:
    n, dim = 10, 2000
    rng = np.random.default_rng(3)
    updates = [np.full(dim, 0.01, dtype=np.float32) for _ in range(n)]
    dp = DPConfig(clip_norm=1.0, noise_multiplier=0.5)
    cfg = SecAggConfig(degree=9, threshold=6, max_weight=1, clip_range=4.0, dp=dp)
    res = simulate_round(updates, [1] * n, cfg, dropouts={Stage.MASKED_INPUT_COLLECTION: {0, 1}}, rng=rng)
    assert len(res.survivors) == 8
    # Noise of the mean: std sqrt(8) * z*C/sqrt(t) / 8 = 0.5 * sqrt(8/6) / 8.
    expect = 0.5 * math.sqrt(8 / 6) / 8
    assert abs(np.std(res.mean - 0.01) / expect - 1) < 0.1


def test_ckks_round_trip_weighted_mean() -> None:
    keyholder = CKKSContext.generate()
    server_ctx = CKKSContext.load(keyholder.public_bytes())
    assert not server_ctx.has_secret_key
    rng = np.random.default_rng(4)
    updates = [rng.uniform(-1, 1, 5000).astype(np.float32) for _ in range(3)]
    agg = CKKSAggregator(server_ctx, round_id="c1")
    for i, u in enumerate(updates):
        agg.add(keyholder.encrypt(u, i + 2, round_id="c1", sender=i))
    mean, wsum = keyholder.decrypt_mean(agg.aggregate())
    ref = sum((i + 2) * u.astype(np.float64) for i, u in enumerate(updates)) / 9
    assert abs(wsum - 9) < 1e-4 and np.max(np.abs(mean - ref)) < 1e-5
    with pytest.raises(SecAggError, match="secret key"):
        server_ctx.decrypt_mean(agg.aggregate())
    with pytest.raises(SecAggError, match="must not hold"):
        CKKSAggregator(keyholder, round_id="c1")
    with pytest.raises(InvalidUpdateError, match="already"):
        agg.add(keyholder.encrypt(updates[0], 1, round_id="c1", sender=0))
    with pytest.raises(InvalidUpdateError, match="NaN"):
        keyholder.encrypt(np.array([np.nan], dtype=np.float32), 1, round_id="c1", sender=5)
