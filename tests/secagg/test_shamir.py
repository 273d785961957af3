"""Shamir sharing over GF(2^31 - 1): any t shares rebuild, t - 1 do not."""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdk.secagg._shamir import ShamirError, reconstruct_many, share_secrets


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 12).flatmap(lambda n: st.tuples(st.just(n), st.integers(1, n))), st.binary(min_size=32, max_size=32))
def test_any_t_shares_reconstruct(nt: tuple[int, int], secret: bytes) -> None:
    n, t = nt
    holders = list(range(3, 3 + n))
    shares = share_secrets([secret, os.urandom(32)], holders, t)  # (n, 2, 16)
    rng = np.random.default_rng(n * 100 + t)
    pick = sorted(rng.choice(n, size=t, replace=False).tolist())
    got = reconstruct_many([([holders[i] for i in pick], shares[pick, 0])], t)
    assert got == [secret]


def test_t_minus_one_shares_do_not_reveal() -> None:
    secret = os.urandom(32)
    holders = list(range(7))
    shares = share_secrets([secret], holders, 4)
    for subset in itertools.combinations(range(7), 3):
        idx = list(subset)
        try:
            wrong = reconstruct_many([([holders[i] for i in idx], shares[idx, 0])], 3)
        except ShamirError:
            continue  # interpolates outside the secret space: detected as bad shares
        assert wrong != [secret]


def test_batched_reconstruction_with_different_holder_sets() -> None:
    secrets = [os.urandom(32) for _ in range(5)]
    items = []
    for i, s in enumerate(secrets):
        holders = list(range(i, i + 6))
        items.append((holders[1:], share_secrets([s], holders, 4)[1:, 0]))
    assert reconstruct_many(items, 4) == secrets


def test_bad_arguments() -> None:
    with pytest.raises(ShamirError, match="threshold"):
        share_secrets([bytes(32)], [0, 1], 3)
    shares = share_secrets([bytes(32)], [0, 1, 2], 2)
    with pytest.raises(ShamirError, match="duplicate"):
        reconstruct_many([([1, 1], shares[[1, 1], 0])], 2)
    with pytest.raises(ShamirError, match="< threshold"):
        reconstruct_many([([1], shares[[1], 0])], 2)
