"""The identity lifecycle on the wire: roles, key rotation, revocation and the operator's view
of the consortium's identities."""

from __future__ import annotations

import base64
import hashlib
from typing import Annotated, Any, Literal, get_args

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import Field

from sdk.wire._auth import public_key_b64
from sdk.wire._schemas import _OneLine, _PublicKey, _Reply, _Wire

__all__ = ["ROLES", "KeyRotation", "MemberInfo", "MemberState", "Revocation", "Role",
           "RosterSync", "RotationRecord", "endorsement_message", "key_fingerprint",
           "rotation_message", "sign_rotation"]

Role = Literal["member", "aligner", "auditor", "operator"]
"""What an enrolled identity may do at the server. ``member``: an institution (rounds, reward
queries addressed to it); ``aligner``: the GRPO job (``/v1/rewards``); ``auditor`` and
``operator``: the consortium's audit and operations staff. One identity has one role."""

ROLES: tuple[str, ...] = get_args(Role)
"""Every :data:`Role` in order, for command-line choices and validation messages."""

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

    public_key: _PublicKey  # the new key
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


class Revocation(_Wire):
    """``POST /v1/members/{name}/revoke``: why (kept in the audit table)."""

    reason: Annotated[_OneLine, Field(max_length=500)] = Field(default="")


class RoundTerms(_Wire):
    """The part of a member's site policy that decides which rounds it takes part in, as it
    announces it (``POST /v1/identity/round-terms``) so that the operator sees before opening
    a round whom it would lose. The member still checks every round itself."""

    round_kinds: list[str] = Field(max_length=16, description="round kinds it takes part in")
    min_participants: int = Field(ge=1, description="fewest members a round may list")
    min_threshold: int = Field(ge=1, description="fewest survivors a masked aggregate may "
                               "combine")
    require_dp: bool = Field(description="it refuses router rounds without client-level DP")
    allow_captured_rounds: bool = Field(description="it takes part in captured rounds")


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
    round_terms: RoundTerms | None = Field(default=None, description="which rounds its site "
                                           "policy takes part in, as it last announced them "
                                           "(null: not announced)")
    started_at: float | None = Field(default=None, description="when it last started cleanly, "
                                     "as it announced (Unix s)")
    restarts: int = Field(default=0, description="clean starts after its first")
    restarted_in_round: int | None = Field(default=None, description="the round open when it "
                                           "last restarted (null: none, or no restart)")
    problem: str | None = Field(default=None, description="what kept it from starting, as it "
                                "reported (setting keys and the kind of problem); cleared at "
                                "its next clean start")

    @staticmethod
    def announced_terms(data: Any) -> RoundTerms:
        """A member's round terms as it announces them (``POST /v1/identity/round-terms``);
        a pydantic ``ValidationError`` (a ``ValueError``) when they are malformed."""
        return RoundTerms.model_validate(data)


class RosterSync(_Reply):
    """What a roster reload changed (``POST /v1/roster/reload``)."""

    entries: int = Field(description="entries in the roster file")
    revoked: list[str] = Field(default_factory=list, description="names no longer in the "
                               "file, revoked now")
    skipped: list[str] = Field(default_factory=list, description="entries whose name and key "
                               "were revoked before (a revoked key never comes back)")
