"""A member follows key rotations only along endorsements by keys it already trusts: a record
the server could forge (signed by any other key), one that rebinds a key to another client id,
or a second rotation away from one key is refused."""

from __future__ import annotations

import base64
import time

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sdk.membership import follow_rotations
from sdk.wire import (
    RotationRecord,
    endorsement_message,
    generate_key,
    public_key_b64,
    sign_rotation,
)


def _record(client_id: str, old: Ed25519PrivateKey, new: Ed25519PrivateKey, *,
            signer: Ed25519PrivateKey | None = None, at: float | None = None) -> RotationRecord:
    """What the server publishes for one rotation; ``signer`` forges the endorsement."""
    message = endorsement_message(client_id, public_key_b64(old), public_key_b64(new))
    return RotationRecord(client_id=client_id, old_public_key=public_key_b64(old),
                          new_public_key=public_key_b64(new), at=at or time.time(),
                          endorsement=base64.b64encode((signer or old).sign(message)).decode())


def test_a_chain_of_endorsed_rotations_leads_to_the_current_key() -> None:
    k0, k1, k2, other = (generate_key() for _ in range(4))
    roster = [public_key_b64(k0), public_key_b64(other)]
    # Given out of order: the newer record waits until the older one reached its old key.
    records = [_record("c-b", k1, k2, at=2.0), _record("c-b", k0, k1, at=1.0)]
    chain = follow_rotations(roster, records)
    assert chain.refused == []
    assert [r.new_public_key for r in chain.accepted] == [public_key_b64(k1), public_key_b64(k2)]
    # The rotated-out keys are no longer trusted; the current one is bound to its client id.
    assert chain.keys == {public_key_b64(other): None, public_key_b64(k2): "c-b"}


def test_the_body_a_member_sends_is_the_record_it_endorses() -> None:
    old, new = generate_key(), generate_key()
    body = sign_rotation("c-a", old, new)
    record = RotationRecord(client_id="c-a", old_public_key=public_key_b64(old),
                            new_public_key=body.public_key, at=1.0,
                            endorsement=body.endorsement)
    assert follow_rotations([public_key_b64(old)], [record]).keys == {body.public_key: "c-a"}


def test_forged_records_are_refused_with_their_reason() -> None:
    k0, k1, mallory, m2 = (generate_key() for _ in range(4))
    trusted = [public_key_b64(k0)]
    forged = _record("c-b", k0, mallory, signer=mallory)  # not signed by the old key
    chain = follow_rotations(trusted, [forged])
    assert chain.accepted == [] and chain.keys == {public_key_b64(k0): None}
    assert chain.refused == [(forged, "its endorsement is not the old key's signature")]

    # A chain that starts from a key outside the roster copy leads nowhere.
    stranger = _record("c-x", mallory, m2)
    chain = follow_rotations(trusted, [stranger])
    assert chain.keys == {public_key_b64(k0): None}
    assert "roster copy" in chain.refused[0][1]

    # A valid first step, then an attempt to move the chain to another client id, then a fork
    # (the old key endorsing a second new key).
    step = _record("c-b", k0, k1, at=1.0)
    moved = _record("c-z", k1, mallory, at=2.0)
    fork = _record("c-b", k0, m2, at=3.0)
    chain = follow_rotations(trusted, [step, moved, fork])
    assert chain.accepted == [step] and chain.keys == {public_key_b64(k1): "c-b"}
    reasons = dict((r.new_public_key, why) for r, why in chain.refused)
    assert "moves c-b's key to c-z" in reasons[public_key_b64(mallory)]
    assert "already rotated" in reasons[public_key_b64(m2)]
    # Garbage in a record is a refusal, never an exception.
    junk = step.model_copy(update={"endorsement": "not base64!", "old_public_key":
                                   public_key_b64(k0)})
    assert follow_rotations(trusted, [junk]).accepted == []
