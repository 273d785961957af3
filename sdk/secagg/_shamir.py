"""Shamir secret sharing over GF(p), p = 2^31 - 1, vectorized with numpy int64.

A 32-byte secret is split into 16 little-endian uint16 chunks, each shared independently, so a
share is 16 field elements (64 bytes). Products of two elements are < 2^62 and fit int64, so
evaluation and Lagrange interpolation are plain numpy arithmetic, batched over many secrets.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

__all__ = ["PRIME", "SECRET_BYTES", "ShamirError", "reconstruct_many", "share_secrets"]

PRIME = 2**31 - 1
SECRET_BYTES = 32
_CHUNKS = SECRET_BYTES // 2  # uint16 chunks per secret


class ShamirError(ValueError):
    """Shares are malformed, too few, or reconstruct to a value that is not a secret."""


def _random_field(shape: tuple[int, ...]) -> np.ndarray:
    """Uniform-ish field elements from the OS CSPRNG (bias < 2^-32)."""
    raw = np.frombuffer(os.urandom(8 * int(np.prod(shape))), dtype=np.uint64)
    return (raw % np.uint64(PRIME)).astype(np.int64).reshape(shape)


def _x_of(holder: int) -> int:
    # Holder ids start at 0; x = 0 is where the secret lives.
    if not 0 <= holder < PRIME - 1:
        raise ShamirError(f"holder id {holder} outside [0, {PRIME - 2}]")
    return holder + 1


def share_secrets(secrets: Sequence[bytes], holders: Sequence[int], threshold: int) -> np.ndarray:
    """Split each secret among ``holders``; any ``threshold`` shares reconstruct it.

    Returns int64 shares of shape (len(holders), len(secrets), 16).
    """
    if not 1 <= threshold <= len(holders):
        raise ShamirError(f"threshold {threshold} outside [1, {len(holders)} holders]")
    if any(len(s) != SECRET_BYTES for s in secrets):
        raise ShamirError(f"every secret must be {SECRET_BYTES} bytes")
    m = len(secrets)
    const = np.frombuffer(b"".join(secrets), dtype="<u2").astype(np.int64).reshape(m, _CHUNKS)
    coeffs = _random_field((threshold - 1, m, _CHUNKS))  # degree t-1 polynomials
    xs = np.array([_x_of(h) for h in holders], dtype=np.int64)[:, None, None]  # (H, 1, 1)
    acc = np.zeros((len(holders), m, _CHUNKS), dtype=np.int64)
    for c in coeffs[::-1]:  # Horner: acc = acc * x + c
        acc = (acc * xs + c) % PRIME
    return (acc * xs + const) % PRIME


def _lagrange_at_zero(xs: Sequence[int]) -> list[int]:
    lams = []
    for j, xj in enumerate(xs):
        num, den = 1, 1
        for m, xm in enumerate(xs):
            if m != j:
                num = num * xm % PRIME
                den = den * (xm - xj) % PRIME
        if den == 0:
            raise ShamirError(f"duplicate share holder x={xj}")
        lams.append(num * pow(den, -1, PRIME) % PRIME)
    return lams


def reconstruct_many(items: Sequence[tuple[Sequence[int], np.ndarray]], threshold: int) -> list[bytes]:
    """Reconstruct secrets from ``(holders, shares (n>=t, 16))`` pairs, using the first t shares.

    All secrets are interpolated in one batched numpy pass: (S, t, 16) shares times (S, t)
    Lagrange coefficients.
    """
    if not items:
        return []
    lam = np.empty((len(items), threshold), dtype=np.int64)
    shares = np.empty((len(items), threshold, _CHUNKS), dtype=np.int64)
    for i, (holders, sh) in enumerate(items):
        if len(holders) < threshold or sh.shape[0] < threshold:
            raise ShamirError(f"secret {i}: {len(holders)} shares < threshold {threshold}")
        if sh.shape[1:] != (_CHUNKS,) or np.any((sh < 0) | (sh >= PRIME)):
            raise ShamirError(f"secret {i}: malformed share")
        lam[i] = _lagrange_at_zero([_x_of(h) for h in holders[:threshold]])
        shares[i] = sh[:threshold]
    vals = ((lam[:, :, None] * shares) % PRIME).sum(axis=1) % PRIME  # (S, 16), sum < t * 2^31
    bad = np.flatnonzero((vals >= 2**16).any(axis=1))
    if bad.size:
        raise ShamirError(f"secret(s) {bad.tolist()} reconstruct outside the secret space (bad shares)")
    return [row.astype("<u2").tobytes() for row in vals]
