"""The attacks' captured rounds follow the consortium's round kinds: the weighted mean a server
sees, and under DP the kind's own rule (each member weighs 1), not a rule of their own."""

from __future__ import annotations

import numpy as np
import pytest

from attacks._analytic import AttackInputError
from attacks._capture import round_mean
from sdk.secagg import DPConfig

DELTAS = [np.full(50, 0.01 * (k + 1), np.float32) for k in range(3)]
SIZES = [1, 2, 3]
WEIGHTED = (0.01 * 1 + 0.02 * 2 + 0.03 * 3) / 6


def test_a_secure_round_shows_the_weighted_mean_and_under_dp_the_uniform_one() -> None:
    plain = round_mean(DELTAS, SIZES, kind="router_secagg", rng=np.random.default_rng(0))
    np.testing.assert_allclose(plain, WEIGHTED, atol=1e-5)
    # Noise far below the gap between the two means: what is left is the weight rule.
    dp = DPConfig(clip_norm=1.0, noise_multiplier=1e-4)
    private = round_mean(DELTAS, SIZES, kind="router_secagg", rng=np.random.default_rng(0),
                         dp=dp)
    np.testing.assert_allclose(private, 0.02, atol=1e-3)
    assert abs(float(private.mean()) - WEIGHTED) > 2e-3


def test_a_plaintext_round_is_the_update_itself_and_has_no_dp() -> None:
    one = round_mean(DELTAS[:1], [4], kind="rm_fedavg", rng=np.random.default_rng(0))
    np.testing.assert_array_equal(one, DELTAS[0])
    with pytest.raises(AttackInputError, match="no DP"):
        round_mean(DELTAS[:1], [4], kind="rm_fedavg", rng=np.random.default_rng(0),
                   dp=DPConfig(clip_norm=1.0, noise_multiplier=1.0))
