"""Mask PRG and key agreement: masks cancel, blocking does not change the stream."""

from __future__ import annotations

import os

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from sdk.secagg._crypto import (
    aead_open,
    aead_seal,
    apply_masks,
    pair_mask_key,
    raw_public,
    share_key,
)


def test_mask_is_the_aes_ctr_keystream_whatever_the_block() -> None:
    key = os.urandom(16)
    ref = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor().update(bytes(4 * 1001))
    for block in (7, 64, 1 << 15):
        acc = np.zeros(1001, dtype=np.uint32)
        apply_masks(acc, [(key, 1)], block=block)
        assert acc.tobytes() == ref


def test_pairwise_masks_cancel_mod_2_32() -> None:
    a, b = X25519PrivateKey.generate(), X25519PrivateKey.generate()
    k_ab = pair_mask_key(a, raw_public(b), "r", 3, 9)
    assert k_ab == pair_mask_key(b, raw_public(a), "r", 9, 3)
    assert k_ab != pair_mask_key(a, raw_public(b), "r2", 3, 9)  # fresh per round
    rng = np.random.default_rng(0)
    xu, xv = (rng.integers(0, 2**32, 5000, dtype=np.uint64).astype(np.uint32) for _ in range(2))
    yu, yv = xu.copy(), xv.copy()
    apply_masks(yu, [(k_ab, 1)])  # client 3 < 9 adds, client 9 subtracts the same stream
    apply_masks(yv, [(pair_mask_key(b, raw_public(a), "r", 9, 3), -1)])
    assert np.mean(yu == xu) < 0.01
    assert np.array_equal(yu + yv, xu + xv)


def test_aead_binding() -> None:
    a, b = X25519PrivateKey.generate(), X25519PrivateKey.generate()
    k_a, k_b = share_key(a, raw_public(b), "r"), share_key(b, raw_public(a), "r")
    assert k_a == k_b != share_key(b, raw_public(a), "other")
    ct = aead_seal(k_a, "r", 1, 2, b"secret share")
    assert aead_open(k_b, "r", 1, 2, ct) == b"secret share"
    assert aead_open(k_b, "r", 1, 3, ct) is None  # other recipient
    assert aead_open(k_b, "other", 1, 2, ct) is None  # other round
    assert aead_open(k_b, "r", 1, 2, ct[:-1] + bytes([ct[-1] ^ 1])) is None
