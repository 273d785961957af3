"""Following key rotations from a trusted roster copy: which keys a member may trust once the
server publishes rotations, checked against the old keys' endorsements, not against the server."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from cryptography.exceptions import InvalidSignature

from sdk.wire import RotationRecord, endorsement_message, parse_public_key

__all__ = ["RotationChain", "follow_rotations"]


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
