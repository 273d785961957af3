"""The identity lifecycle on the wire: key rotation, revocation and the operator's view of
the consortium's identities."""

from __future__ import annotations

import base64
import hashlib
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["KeyRotation", "MemberInfo", "MemberState", "Revocation", "RosterSync",
           "key_fingerprint", "rotation_message"]

MemberState = Literal["enrolled", "revoked", "not_enrolled"]
"""Where a roster identity stands: enrolled (its key signs requests), revoked (refused, and
dropped from every open round), or on the roster but not enrolled yet."""


def rotation_message(client_id: str, new_public_key: str) -> bytes:
    """What the new key signs to prove its holder asked for it (bound to the identity, so
    a proof cannot serve another member)."""
    return f"fedmor key rotation\n{client_id}\n{new_public_key}".encode()


def key_fingerprint(public_key: str) -> str:
    """The first 16 hex digits of the sha256 of a raw (base64) Ed25519 public key: short
    enough to read out on the phone when checking a member's key."""
    return hashlib.sha256(base64.b64decode(public_key)).hexdigest()[:16]


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


class KeyRotation(_Wire):
    """``POST /v1/identity/rotate``, signed with the current key: the new key and its proof
    of possession (the new key's signature of :func:`rotation_message`)."""

    public_key: str = Field(max_length=64, description="the new raw Ed25519 key, base64")
    proof: str = Field(max_length=128, description="base64 signature by the new key of "
                       "'fedmor key rotation\\n{client_id}\\n{public_key}'")


class Revocation(_Wire):
    """``POST /v1/members/{name}/revoke``: why (kept in the audit table)."""

    reason: str = Field(default="", max_length=500)


class MemberInfo(_Wire):
    """One roster identity as the operator sees it (``GET /v1/members``)."""

    name: str
    role: str
    state: MemberState
    client_id: str | None = None
    fingerprint: str | None = Field(default=None, description="sha256 of the raw public key, "
                                    "first 16 hex digits (the enrolled key once enrolled)")
    enrolled_at: float | None = None
    last_seen: float | None = Field(default=None, description="last signed request (Unix s)")
    rounds: int = Field(default=0, description="rounds it sent at least one message in")
    revoked_at: float | None = None


class RosterSync(_Wire):
    """What a roster reload changed (``POST /v1/roster/reload``)."""

    entries: int = Field(description="entries in the roster file")
    revoked: list[str] = Field(default_factory=list, description="names no longer in the "
                               "file, revoked now")
    skipped: list[str] = Field(default_factory=list, description="entries whose name and key "
                               "were revoked before (a revoked key never comes back)")
