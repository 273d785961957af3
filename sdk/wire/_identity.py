"""The identity lifecycle on the wire: key rotation, revocation and the operator's view of
the consortium's identities."""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterable, Sequence
from typing import Literal, NamedTuple

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import Field

from sdk.wire._auth import parse_public_key, public_key_b64
from sdk.wire._schemas import _Reply, _Wire

__all__ = ["KeyRotation", "MemberInfo", "MemberState", "Revocation", "RosterSync",
           "RotationChain", "RotationRecord", "endorsement_message", "follow_rotations",
           "key_fingerprint", "rotation_message", "sign_rotation"]

MemberState = Literal["enrolled", "revoked", "not_enrolled"]
"""Where a roster identity stands: enrolled (its key signs requests), revoked (refused, and
dropped from every open round), or on the roster but not enrolled yet."""


def rotation_message(client_id: str, new_public_key: str) -> bytes:
    """What the new key signs to prove its holder asked for it (bound to the identity, so
    a proof cannot serve another member)."""
    return f"fedmor key rotation\n{client_id}\n{new_public_key}".encode()


def endorsement_message(client_id: str, old_public_key: str, new_public_key: str) -> bytes:
    """What the old key signs to hand its identity over to the new key: kept by the server
    and published, so anyone who trusted the old key can check the new one without trusting
    the server (the prefix keeps it apart from any signed request, which starts with a method)."""
    return (f"fedmor key endorsement\n{client_id}\n{old_public_key}\n"
            f"{new_public_key}").encode()


def key_fingerprint(public_key: str) -> str:
    """The first 16 hex digits of the sha256 of a raw (base64) Ed25519 public key: short
    enough to read out on the phone when checking a member's key."""
    return hashlib.sha256(base64.b64decode(public_key)).hexdigest()[:16]


class KeyRotation(_Wire):
    """``POST /v1/identity/rotate``, signed with the current key: the new key, its proof of
    possession (the new key's signature of :func:`rotation_message`) and the current key's
    endorsement of it (its signature of :func:`endorsement_message`, which the server
    publishes for members that keep their own roster copy)."""

    public_key: str = Field(max_length=64, description="the new raw Ed25519 key, base64")
    proof: str = Field(max_length=128, description="base64 signature by the new key of "
                       "'fedmor key rotation\\n{client_id}\\n{public_key}'")
    endorsement: str = Field(max_length=128, description="base64 signature by the current "
                             "key of 'fedmor key endorsement\\n{client_id}\\n{current key}"
                             "\\n{public_key}'")


def sign_rotation(client_id: str, current: Ed25519PrivateKey,
                  new: Ed25519PrivateKey) -> KeyRotation:
    """The body of ``POST /v1/identity/rotate`` moving ``client_id`` from ``current`` to
    ``new``: the new key's proof of possession and the current key's endorsement."""
    public = public_key_b64(new)

    def b64(signature: bytes) -> str:
        return base64.b64encode(signature).decode()

    return KeyRotation(public_key=public, proof=b64(new.sign(rotation_message(client_id, public))),
                       endorsement=b64(current.sign(endorsement_message(
                           client_id, public_key_b64(current), public))))


class RotationRecord(_Reply):
    """One key rotation as the server keeps and publishes it (``GET
    /v1/identity/rotations``): checkable by anyone who knows the old key."""

    client_id: str
    old_public_key: str
    new_public_key: str
    at: float = Field(description="when the server switched (Unix s)")
    endorsement: str = Field(description="base64 signature by the old key of "
                             ":func:`endorsement_message`")


class RotationChain(NamedTuple):
    """What :func:`follow_rotations` concluded."""

    keys: dict[str, str | None]
    """The keys to trust now -> the client id a rotation bound them to (None: a key of the
    roster copy no rotation moved away from)."""
    accepted: list[RotationRecord]
    """The records that extend the chain, oldest first."""
    refused: list[tuple[RotationRecord, str]]
    """The records that do not, each with the reason."""


def _endorsed(record: RotationRecord) -> bool:
    try:
        parse_public_key(record.new_public_key)
        parse_public_key(record.old_public_key).verify(
            base64.b64decode(record.endorsement, validate=True),
            endorsement_message(record.client_id, record.old_public_key,
                                record.new_public_key))
    except (ValueError, binascii.Error, InvalidSignature):
        return False
    return True


def follow_rotations(trusted: Iterable[str], records: Sequence[RotationRecord]) -> RotationChain:
    """The keys a member may trust, starting from its roster copy (``trusted``) and following
    only rotations endorsed by a key it already trusts: a record signed by any other key, one
    that rebinds a chain to another client id, or a second rotation away from one key (a fork)
    is refused. A key rotated away from is no longer trusted."""
    keys: dict[str, str | None] = dict.fromkeys(trusted)
    retired: set[str] = set()
    waiting = sorted(records, key=lambda r: r.at)
    accepted: list[RotationRecord] = []
    refused: list[tuple[RotationRecord, str]] = []
    moved = True
    while moved:  # a record may extend a chain only once an earlier one reached its old key
        moved = False
        for record in list(waiting):
            old = record.old_public_key
            if old not in keys and old not in retired:
                continue
            waiting.remove(record)
            moved = True
            bound = keys.get(old)
            if old in retired:
                refused.append((record, "its old key was already rotated to another key"))
            elif bound is not None and bound != record.client_id:
                refused.append((record, f"it moves {bound}'s key to {record.client_id}"))
            elif not _endorsed(record):
                refused.append((record, "its endorsement is not the old key's signature"))
            else:
                del keys[old]
                retired.add(old)
                keys[record.new_public_key] = record.client_id
                accepted.append(record)
    refused += [(r, "its old key is neither in the roster copy nor reached by an endorsed "
                 "rotation") for r in waiting]
    return RotationChain(keys, accepted, refused)


class Revocation(_Wire):
    """``POST /v1/members/{name}/revoke``: why (kept in the audit table)."""

    reason: str = Field(default="", max_length=500)


class MemberInfo(_Reply):
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
    clip_bound: float | None = Field(default=None, description="the clip bound it announced "
                                     "(enrolled members)")
    reward_items_24h: int = Field(default=0, description="reward items the server asked of it "
                                  "in the last 24 hours (what its site policy's reward_budget "
                                  "counts, with reward_window = day)")
    epsilon_spent: float | None = Field(default=None, description="client-level DP epsilon of "
                                        "the finished DP rounds its update went into, composed "
                                        "(null: none)")


class RosterSync(_Reply):
    """What a roster reload changed (``POST /v1/roster/reload``)."""

    entries: int = Field(description="entries in the roster file")
    revoked: list[str] = Field(default_factory=list, description="names no longer in the "
                               "file, revoked now")
    skipped: list[str] = Field(default_factory=list, description="entries whose name and key "
                               "were revoked before (a revoked key never comes back)")
