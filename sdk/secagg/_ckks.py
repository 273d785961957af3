"""CKKS aggregation mode (TenSEAL): clients encrypt, the server adds ciphertexts, the key
holders (clients sharing one secret key) decrypt only the aggregate.

Trust model: the server holds the public context only and sees ciphertexts; any key holder
could decrypt an individual ciphertext, so the server must never forward one, and a server
colluding with a single client learns everything. SecAgg+ does not have that weakness.
"""

from __future__ import annotations

import numpy as np
import tenseal as ts
from pydantic import BaseModel, ConfigDict, Field

from sdk.secagg._errors import InvalidUpdateError, SecAggError
from sdk.secagg._quantize import validate_update

__all__ = ["CKKSAggregator", "CKKSConfig", "CKKSContext", "CKKSUpdate"]


class CKKSConfig(BaseModel):
    """CKKS parameters: ring degree N (N/2 slots per ciphertext), modulus chain, scale."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    poly_modulus_degree: int = 8192
    coeff_mod_bit_sizes: tuple[int, ...] = (60, 40, 60)  # additions only: no spare level
    scale_bits: int = Field(default=40, ge=20, le=60)
    max_weight: int = Field(default=1000, ge=1)


class CKKSUpdate(BaseModel):
    """One client's encrypted ``[n_k * x_k, n_k]``, split into ciphertexts of N/2 slots."""

    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_bytes="base64", val_json_bytes="base64")

    round_id: str
    sender: int
    length: int  # P + 1
    chunks: list[bytes]

    def nbytes(self) -> int:
        """Bytes of ciphertext on the wire."""
        return sum(len(c) for c in self.chunks)


class CKKSContext:
    """A TenSEAL context; with the secret key at key holders, public-only at the server."""

    def __init__(self, context: ts.Context, config: CKKSConfig) -> None:
        self._ctx = context
        self.config = config

    @classmethod
    def generate(cls, config: CKKSConfig | None = None) -> CKKSContext:
        """A fresh key pair (done once by the consortium, shared among key holders)."""
        cfg = config or CKKSConfig()
        ctx = ts.context(ts.SCHEME_TYPE.CKKS, poly_modulus_degree=cfg.poly_modulus_degree, coeff_mod_bit_sizes=list(cfg.coeff_mod_bit_sizes))
        ctx.global_scale = 2.0**cfg.scale_bits
        return cls(ctx, cfg)

    @classmethod
    def load(cls, data: bytes, config: CKKSConfig | None = None) -> CKKSContext:
        """Load a serialized context (public or secret)."""
        return cls(ts.context_from(data), config or CKKSConfig())

    def public_bytes(self) -> bytes:
        """The context without the secret key: what the server gets."""
        return bytes(self._ctx.serialize(save_secret_key=False, save_galois_keys=False, save_relin_keys=False))

    def secret_bytes(self) -> bytes:
        """The full context, for other key holders only."""
        return bytes(self._ctx.serialize(save_secret_key=True, save_galois_keys=False, save_relin_keys=False))

    @property
    def has_secret_key(self) -> bool:
        """True at key holders."""
        return bool(self._ctx.has_secret_key())

    @property
    def slots(self) -> int:
        """Values per ciphertext (N / 2)."""
        return self.config.poly_modulus_degree // 2

    def encrypt(self, update: np.ndarray, weight: int, *, round_id: str, sender: int) -> CKKSUpdate:
        """Encrypt ``[weight * update, weight]`` (validated first, nothing leaks on bad input)."""
        x, w = validate_update(update, weight, length=None, max_weight=self.config.max_weight)
        flat = np.append(x.astype(np.float64) * w, float(w))  # (P+1,)
        chunks = [ts.ckks_vector(self._ctx, flat[i : i + self.slots]).serialize() for i in range(0, flat.shape[0], self.slots)]
        return CKKSUpdate(round_id=round_id, sender=sender, length=flat.shape[0], chunks=[bytes(c) for c in chunks])

    def vector(self, data: bytes) -> ts.CKKSVector:
        """Deserialize one ciphertext chunk against this context."""
        return ts.ckks_vector_from(self._ctx, data)

    def decrypt_mean(self, aggregate: CKKSUpdate) -> tuple[np.ndarray, float]:
        """Key holders only: (weighted mean (P,), weight sum) of an aggregate."""
        if not self.has_secret_key:
            raise SecAggError("this context has no secret key: only key holders decrypt")
        flat = np.concatenate([np.asarray(self.vector(c).decrypt()) for c in aggregate.chunks])[: aggregate.length]
        return flat[:-1] / flat[-1], float(flat[-1])


class CKKSAggregator:
    """Server side: adds ciphertexts homomorphically under the public context."""

    def __init__(self, public: CKKSContext, *, round_id: str) -> None:
        if public.has_secret_key:
            raise SecAggError("the aggregator must not hold the secret key")
        self._ctx = public
        self.round_id = round_id
        self._sum: list[ts.CKKSVector] | None = None
        self._length: int | None = None
        self.senders: list[int] = []

    def add(self, update: CKKSUpdate) -> None:
        """Fold one client's ciphertexts into the running sum."""
        if update.round_id != self.round_id:
            raise InvalidUpdateError(f"update of round {update.round_id!r} in round {self.round_id!r}")
        if update.sender in self.senders:
            raise InvalidUpdateError(f"client {update.sender} already contributed")
        if self._length is not None and update.length != self._length:
            raise InvalidUpdateError(f"update has {update.length} values, expected {self._length}")
        vecs = [self._ctx.vector(c) for c in update.chunks]
        self._sum = vecs if self._sum is None else [a + b for a, b in zip(self._sum, vecs, strict=True)]
        self._length = update.length
        self.senders.append(update.sender)

    def aggregate(self) -> CKKSUpdate:
        """The encrypted sum, to send to a key holder for decryption."""
        if self._sum is None or self._length is None:
            raise SecAggError("no update received")
        return CKKSUpdate(round_id=self.round_id, sender=-1, length=self._length, chunks=[bytes(v.serialize()) for v in self._sum])
