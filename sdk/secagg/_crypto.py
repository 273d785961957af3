"""Primitives: Ed25519 identities (the roster), X25519 + HKDF key agreement, AES-GCM share
encryption, and the AES-128-CTR mask PRG writing uint32 words into preallocated buffers."""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

__all__ = [
    "Roster",
    "aead_open",
    "aead_seal",
    "apply_masks",
    "generate_identities",
    "hkdf",
    "pair_mask_key",
    "raw_public",
    "self_mask_key",
    "share_key",
]

_ZERO_NONCE = bytes(16)


def hkdf(secret: bytes, info: bytes, length: int = 16) -> bytes:
    """HKDF-SHA256 (no salt: every input already carries fresh entropy)."""
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=info).derive(secret)


def raw_public(key: X25519PrivateKey | Ed25519PrivateKey) -> bytes:
    """Raw 32-byte public key."""
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def pair_mask_key(own: X25519PrivateKey, peer_public: bytes, round_id: str, a: int, b: int) -> bytes:
    """AES-128 key of the pairwise mask between clients a and b (symmetric in a, b)."""
    shared = own.exchange(X25519PublicKey.from_public_bytes(peer_public))
    lo, hi = min(a, b), max(a, b)
    return hkdf(shared, b"fedmor-secagg/pair-mask/" + round_id.encode() + struct.pack("<II", lo, hi))


def self_mask_key(seed: bytes, round_id: str) -> bytes:
    """AES-128 key of a client's self mask, from its 32-byte seed b."""
    return hkdf(seed, b"fedmor-secagg/self-mask/" + round_id.encode())


def _aad(round_id: str, sender: int, recipient: int) -> bytes:
    return b"fedmor-secagg/share/" + round_id.encode() + struct.pack("<II", sender, recipient)


def share_key(own: X25519PrivateKey, peer_public: bytes, round_id: str) -> bytes:
    """AES-256-GCM key for shares between two clients (the same for both directions)."""
    shared = own.exchange(X25519PublicKey.from_public_bytes(peer_public))
    return hkdf(shared, b"fedmor-secagg/share-key/" + round_id.encode(), length=32)


def aead_seal(key: bytes, round_id: str, sender: int, recipient: int, plaintext: bytes) -> bytes:
    """AES-256-GCM encrypt, bound by AAD to (round, sender, recipient); returns nonce || ct."""
    nonce = os.urandom(12)
    return nonce + AESGCM(key).encrypt(nonce, plaintext, _aad(round_id, sender, recipient))


def aead_open(key: bytes, round_id: str, sender: int, recipient: int, blob: bytes) -> bytes | None:
    """Decrypt ``aead_seal`` output; None when the ciphertext or its binding was tampered with."""
    if len(blob) < 12 + 16:
        return None
    try:
        return AESGCM(key).decrypt(blob[:12], blob[12:], _aad(round_id, sender, recipient))
    except InvalidTag:
        return None


def apply_masks(acc: np.ndarray, masks: Sequence[tuple[bytes, int]], *, block: int = 1 << 15) -> None:
    """acc += sum of sign * AES-128-CTR(key) keystreams as uint32, mod 2^32, in place.

    Blocked: each (block,) slice of ``acc`` receives every mask while it sits in cache, with one
    live CTR encryptor per key (128 KiB keystream buffer reused), instead of one full pass over
    memory per mask. uint32 arithmetic wraps mod 2^32 for free.
    """
    n = acc.shape[0]
    encs = [(Cipher(algorithms.AES(key), modes.CTR(_ZERO_NONCE)).encryptor(), sign) for key, sign in masks]
    zeros = bytes(4 * block)
    out = bytearray(4 * block + 15)  # update_into wants block_size - 1 spare bytes
    words = np.frombuffer(out, dtype="<u4", count=block)
    for start in range(0, n, block):
        seg = acc[start : start + block]
        m = seg.shape[0]
        src = zeros if m == block else zeros[: 4 * m]
        for enc, sign in encs:
            enc.update_into(src, out)
            if sign > 0:
                np.add(seg, words[:m], out=seg)
            else:
                np.subtract(seg, words[:m], out=seg)


class Roster:
    """Consortium identities: client id -> Ed25519 public key, distributed out of band."""

    def __init__(self, identities: Mapping[int, Ed25519PublicKey]) -> None:
        self._keys = dict(identities)

    @classmethod
    def from_raw(cls, identities: Mapping[int, bytes]) -> Roster:
        """Build from raw 32-byte public keys."""
        return cls({cid: Ed25519PublicKey.from_public_bytes(raw) for cid, raw in identities.items()})

    def to_raw(self) -> dict[int, bytes]:
        """Raw 32-byte public keys, for storage or transport."""
        return {cid: k.public_bytes(Encoding.Raw, PublicFormat.Raw) for cid, k in self._keys.items()}

    def __contains__(self, client_id: object) -> bool:
        return client_id in self._keys

    def ids(self) -> list[int]:
        """Sorted enrolled client ids."""
        return sorted(self._keys)

    def verify(self, client_id: int, signature: bytes, data: bytes) -> bool:
        """True iff ``signature`` is ``client_id``'s valid signature of ``data``."""
        key = self._keys.get(client_id)
        if key is None:
            return False
        try:
            key.verify(signature, data)
        except InvalidSignature:
            return False
        return True


def generate_identities(client_ids: Iterable[int]) -> tuple[dict[int, Ed25519PrivateKey], Roster]:
    """Fresh identity keys for ``client_ids`` and the matching roster (tests, simulation)."""
    keys = {cid: Ed25519PrivateKey.generate() for cid in client_ids}
    return keys, Roster({cid: k.public_key() for cid, k in keys.items()})
