"""The member's own roster copy: the keys it accepts in a round, following its peers' key
rotations without trusting the server.

A round that lists a key outside the copy makes the member fetch the server's rotation records
(``GET /v1/identity/rotations``) and accept the key only along a chain of endorsements from a
key in its copy (``sdk.membership.follow_rotations``); the records it followed are kept in its
store, so they survive a restart. A record the chain refuses (a forgery: signed by a key outside
the copy) is logged with the reason, and the round is refused as before.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

from client_app._store import ClientStore
from sdk.membership import RosterFile, RotationChain, follow_rotations
from sdk.rounds import RoundFailed
from sdk.wire import (
    RotationRecord,
    RoundInfo,
    key_fingerprint,
)

__all__ = ["RosterCopy"]

_log = logging.getLogger("fedmor.client")
_FOLLOWED = "followed_rotations"  # the store's key for the rotation records accepted so far


class RosterCopy:
    """Checks a round's participants against the roster file at ``path``; ``fetch`` returns
    the server's rotation records (JSON objects), asked only when a round names a key the copy
    and the rotations followed so far do not reach."""

    def __init__(self, path: Path, store: ClientStore,
                 fetch: Callable[[], list[RotationRecord]]) -> None:
        self.path, self.store, self.fetch = path, store, fetch

    def _followed(self) -> list[RotationRecord]:
        raw = self.store.get(_FOLLOWED)
        return [] if raw is None else [RotationRecord.model_validate(r) for r in json.loads(raw)]

    @staticmethod
    def _strangers(info: RoundInfo, chain: RotationChain) -> list[str]:
        """Participants whose key is not trusted, or is bound to another client id."""
        return [p for p, k in zip(info.participants, info.public_keys, strict=True)
                if k not in chain.keys or chain.keys[k] not in (None, p)]

    def check(self, info: RoundInfo) -> None:
        """Raise ``RoundFailed`` unless every key ``info`` lists is in the copy or reached from
        it by endorsed rotations."""
        roster = [c.public_key for c in RosterFile.load(self.path).clients]
        followed = self._followed()
        chain = follow_rotations(roster, followed)
        strangers = self._strangers(info, chain)
        if strangers:
            chain = self._follow(roster, followed)
            strangers = self._strangers(info, chain)
        if strangers:
            raise RoundFailed(f"round {info.round_id} lists keys outside the roster for "
                              f"{strangers}")

    def _follow(self, roster: list[str], followed: list[RotationRecord]) -> RotationChain:
        """Extend the chain with the server's records; keep what it accepted."""
        known = {(r.client_id, r.old_public_key, r.new_public_key) for r in followed}
        fetched = self.fetch()
        chain = follow_rotations(roster, followed + [
            r for r in fetched if (r.client_id, r.old_public_key, r.new_public_key) not in known])
        for record, why in chain.refused:
            _log.warning("rotation record of %s (%s -> %s) refused: %s", record.client_id,
                         _fingerprint(record.old_public_key),
                         _fingerprint(record.new_public_key), why)
        fresh = [r for r in chain.accepted
                 if (r.client_id, r.old_public_key, r.new_public_key) not in known]
        for record in fresh:
            _log.info("following the key rotation of %s: %s -> %s (endorsed by the old key)",
                      record.client_id, _fingerprint(record.old_public_key),
                      _fingerprint(record.new_public_key))
        if fresh:
            self.store.put(_FOLLOWED, json.dumps([r.model_dump() for r in chain.accepted]))
        return chain


def _fingerprint(public_key: str) -> str:
    """A key's fingerprint for a log line; a record may carry anything."""
    try:
        return key_fingerprint(public_key)
    except ValueError:  # binascii.Error is one
        return "(not a key)"
