"""The identity lifecycle at the server: key rotation, revocation, roster reloads and the
operator's view of every identity.

The roster file is the operator's list; the server keeps its ``roster`` table in step with it
(at start, whenever the file changes, and on ``POST /v1/roster/reload``). A name that leaves
the file is revoked at once: its identity is refused (403), it is dropped from every open round
(recorded as a refusal with reason ``revoked``, so its stages stop waiting for it), and default
rounds no longer list it. A revoked (name, key) pair never comes back from a stale file; the
institution returns under a new key (``fedmor roster add`` with a new key file).

Each rotation is kept with the old key's endorsement of the new one and published (``GET
/v1/identity/rotations``): a member that checks rounds against its own roster copy follows a
chain of endorsements from a key it knows, without trusting the server. A request signed by a
rotated-out key gets 401.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path

from cryptography.exceptions import InvalidSignature

from sdk.membership import RosterEntry, RosterFile
from sdk.serving import NotFoundError
from sdk.storage import replace_file
from sdk.wire import (
    KeyRotation,
    MemberInfo,
    PayloadError,
    RosterAdd,
    RosterAdded,
    RosterSync,
    RotationRecord,
    endorsement_message,
    key_fingerprint,
    parse_public_key,
    rotation_message,
)
from server_app._identity._access import Access
from server_app._identity._usage import MemberUsage
from server_app._rewards._broker import RewardBroker
from server_app._rounds._manager import RoundManager
from server_app._store import ClientRow, ConflictError, RevokedRow, RosterRow, Store

__all__ = ["Identities"]

_log = logging.getLogger("fedmor.server")
_SEEN_FLUSH_S = 10.0  # last-seen times reach the store at most this often (not per request)


def _signs(public_key: str, signature: str, message: bytes) -> bool:
    """Whether base64 ``signature`` is ``public_key``'s over ``message``."""
    try:
        parse_public_key(public_key).verify(base64.b64decode(signature, validate=True), message)
    except (ValueError, binascii.Error, InvalidSignature):
        return False
    return True


class Identities:
    """Rotation, revocation, roster sync and the members view over one server's store."""

    def __init__(self, store: Store, access: Access, rounds: RoundManager,
                 roster_file: Path | None, broker: RewardBroker) -> None:
        self.store, self.access, self.rounds, self.roster_file = store, access, rounds, roster_file
        self.broker = broker
        self._lock = threading.RLock()
        self._stamp: tuple[int, int] | None = None  # (mtime_ns, size) of the file last synced
        self._bad: tuple[int, int] | None = None  # the file's stamp when it failed to load
        self._seen_flushed = time.monotonic()
        access.revoked_key_of = self._revoked_key
        access.retired_keys_of = store.retired_keys

    # -- the roster file -----------------------------------------------------------------------
    def _file_stamp(self) -> tuple[int, int] | None:
        assert self.roster_file is not None
        try:
            st = self.roster_file.stat()
        except FileNotFoundError:
            return None
        return st.st_mtime_ns, st.st_size

    def sync_roster(self, actor: str = "roster-file") -> RosterSync:
        """Bring the roster table in step with the file: add and re-key its entries, revoke
        the names it no longer lists."""
        if self.roster_file is None:
            raise ConflictError("no roster_file is configured: the server has no roster to "
                                "reload")
        with self._lock:
            stamp = self._file_stamp()
            if stamp is None:  # moved away, not emptied: revoking everyone would be wrong
                raise ConflictError(f"roster file {self.roster_file} is missing: nothing "
                                    "changed")
            try:
                roster = RosterFile.load(self.roster_file)
            except ValueError as exc:  # it names the file, the line and the mend
                raise PayloadError(str(exc)) from None
            revoked = self.store.revoked_pairs()
            skipped = []
            known = {r.name: r for r in self.store.roster()}
            for entry in roster.clients:
                if (entry.name, entry.public_key) in revoked:
                    skipped.append(entry.name)
                    continue
                self._rekeyed(entry, actor)
                self.store.upsert_roster(entry.name, entry.public_key, entry.token_sha256,
                                         entry.role)
                before = known.get(entry.name)
                if before is None or (before.public_key, before.token_sha256,
                                      before.role) != (entry.public_key, entry.token_sha256,
                                                       entry.role):
                    self.store.audit(actor, "roster_entry_added" if before is None
                                     else "roster_entry_changed", name=entry.name,
                                     role=entry.role, key=key_fingerprint(entry.public_key))
            listed = {e.name for e in roster.clients}
            gone = [r.name for r in self.store.roster() if r.name not in listed]
            for name in gone:
                self.revoke(name, actor=actor, reason="removed from the roster file",
                            edit_file=False)
            self._stamp = stamp
        if skipped:
            _log.warning("roster file lists revoked keys (ignored): %s", ", ".join(skipped))
        return RosterSync(entries=len(roster.clients), revoked=gone, skipped=skipped)

    def _rekeyed(self, entry: RosterEntry, actor: str) -> None:
        """An enrolled name listed under a new key (``fedmor roster add --replace`` on the
        file) is a new identity: the enrolled one is revoked, so its old key stops signing. A
        key it rotated away from (a stale file) changes nothing."""
        client = self.store.client_named(entry.name)
        if client is None or client.public_key == entry.public_key:
            return
        if entry.public_key in self.store.retired_keys(client.client_id):
            return
        self.revoke(entry.name, actor=actor, reason="re-keyed in the roster file",
                    edit_file=False)

    def tick(self) -> None:
        """Called by the server's ticker: reload a changed roster file, keep last-seen
        times."""
        stamp = None if self.roster_file is None else self._file_stamp()
        if stamp is not None and stamp not in (self._stamp, self._bad):
            try:
                found = self.sync_roster()
            except (ValueError, OSError) as exc:  # half-written by an editor: its next change
                self._bad = stamp
                _log.warning("roster file %s not reloaded: %s", self.roster_file, exc)
            else:
                _log.info("roster reloaded: %d entries, revoked: %s", found.entries,
                          ", ".join(found.revoked) or "none")
        if time.monotonic() - self._seen_flushed >= _SEEN_FLUSH_S:
            self.flush_seen()

    def _edit_file(self, name: str, public_key: str | None) -> None:
        """Write a rotation (``public_key``) or a revocation (None) into the roster file, so
        the operator's list and the members' copies of it name the keys the server uses."""
        if self.roster_file is None or not self.roster_file.exists():
            return
        with self._lock:
            try:
                roster = RosterFile.load(self.roster_file)
                if public_key is None:
                    roster.clients = [c for c in roster.clients if c.name != name]
                else:
                    roster.clients = [c.model_copy(update={"public_key": public_key})
                                      if c.name == name else c for c in roster.clients]
                roster.save(self.roster_file)
                self._stamp = self._file_stamp()
            except (OSError, ValueError) as exc:
                _log.warning("could not update the roster file %s for %s: %s",
                             self.roster_file, name, exc)

    def _roster_with(self, entry: RosterEntry) -> RosterFile | None:
        """The roster file's entries with ``entry`` in place of its name's, validated (a
        clash with the file or the server's roster raises ``ConflictError``); None without a
        roster file."""
        folded = entry.name.casefold()
        for row in self.store.roster():
            if row.name != entry.name and row.name.casefold() == folded:
                raise ConflictError(f"roster names {row.name!r} and {entry.name!r} differ "
                                    "only by case: choose another name")
        if self.roster_file is None:
            return None
        try:
            return RosterFile.load(self.roster_file).with_entry(entry)
        except ValueError as exc:  # the file is invalid, or the entry clashes with it
            raise ConflictError(f"{entry.name!r} cannot join roster file "
                                f"{self.roster_file}: {exc}") from None

    def _write_with_store(self, roster: RosterFile | None, write: Callable[[], object]) -> None:
        """Write ``roster`` to the roster file (atomically) and run ``write`` in one store
        transaction: if the store refuses, the file's old bytes are put back, so the two
        change together or not at all."""
        if roster is None or self.roster_file is None:
            with self.store.transaction():
                write()
            return
        old = self.roster_file.read_bytes() if self.roster_file.exists() else None
        roster.save(self.roster_file)
        try:
            with self.store.transaction():
                write()
        except BaseException:
            if old is None:
                self.roster_file.unlink(missing_ok=True)
            else:
                replace_file(self.roster_file, old, mode=RosterFile.FILE_MODE)
            raise
        self._stamp = self._file_stamp()

    def add(self, req: RosterAdd, *, actor: str) -> RosterAdded:
        """Add ``req``'s identity to the running roster (and to the roster file, which the
        server follows) and return its one-time token. A name that exists is refused unless
        ``req.replace``: then the old identity is revoked first, so the new key is a new
        identity and never a silent re-key (a member keeping its identity rotates its own key
        instead, endorsed by the old one)."""
        parse_public_key(req.public_key)  # names the problem if it is not a key
        with self._lock:
            entry, client = self.store.roster_entry(req.name), self.store.client_named(req.name)
            current = entry or client
            if current is not None and not req.replace:
                raise ConflictError(
                    f"{req.name!r} exists (role {current.role}): give replace (--replace) "
                    f"to revoke it and add the new key as a new identity, or have the member "
                    f"rotate its own key (`fedmor client rotate-key`)")
            if current is not None and current.public_key == req.public_key:
                raise ConflictError(f"{req.name!r} already has that key: a replacement "
                                    f"needs a new key")
            owner = self.store.key_owner(req.public_key, besides=req.name)
            if owner is not None or (req.name, req.public_key) in self.store.revoked_pairs():
                raise ConflictError("that key belongs to another identity or was revoked: "
                                    "the site must generate a new one (`fedmor keys new`)")
            token = secrets.token_hex(24)
            digest = hashlib.sha256(token.encode()).hexdigest()
            # Validated whole before anything changes: a refused add leaves file and store be.
            roster = self._roster_with(RosterEntry(name=req.name, public_key=req.public_key,
                                                   token_sha256=digest, role=req.role))
            replaced = None if client is None else client.client_id
            if current is not None:
                self.revoke(req.name, actor=actor, reason="replaced by the operator")

            def write() -> None:
                self.store.upsert_roster(req.name, req.public_key, digest, req.role)
                self.store.audit(actor, "roster_entry_added", name=req.name, role=req.role,
                                 key=key_fingerprint(req.public_key), replaced=replaced)

            self._write_with_store(roster, write)
        _log.info("%s added %s (%s) to the roster%s", actor, req.name, req.role,
                  "" if current is None else ", replacing the old identity")
        return RosterAdded(name=req.name, role=req.role, token=token, replaced=replaced)

    # -- revocation ----------------------------------------------------------------------------
    def _revoked_key(self, client_id: str) -> str | None:
        return self.store.revoked_client_key(client_id)

    def revoke(self, name: str, *, actor: str, reason: str = "",
               edit_file: bool = True) -> MemberInfo:
        """Revoke ``name`` now: refused from its next request on, dropped from every open
        round, listed in no later default round (idempotent)."""
        with self._lock:
            entry = self.store.roster_entry(name)
            client = self.store.client_named(name)
            current = entry or client
            if current is None:
                if self.store.revocation(name) is None:
                    raise NotFoundError(f"{name!r} is neither on the roster nor enrolled")
                return self._info(name)
            client_id = None if client is None else client.client_id
            with self.store.transaction():
                self.store.revoke(name, roster_key=current.public_key, client=client,
                                  role=current.role, actor=actor, reason=reason)
                self.store.audit(actor, "member_revoked", name=name, client_id=client_id,
                                 reason=reason)
        _log.warning("%s revoked %s (%s): %s", actor, name, client_id or "not enrolled",
                     reason or "no reason given")
        if client_id is not None:
            self.access.forget(client_id)
            self.broker.forget(client_id)  # no more reward queries (data) go to it
            self._drop_from_open_rounds(client_id, actor)
        if edit_file:
            self._edit_file(name, None)
        return self._info(name)

    def _drop_from_open_rounds(self, client_id: str, actor: str) -> None:
        for info in self.rounds.list("open"):
            refused = {r.client_id for r in info.refusals}
            if client_id in info.participants and client_id not in refused:
                self.rounds.refuse(info.round_id, client_id, "revoked",
                                   f"identity revoked by {actor}")

    # -- rotation ------------------------------------------------------------------------------
    def rotate(self, client_id: str, body: KeyRotation) -> MemberInfo:
        """Switch ``client_id`` to the new key of ``body`` (checked: the new key signed the
        rotation message); the old key is refused from the next request on. Repeating a
        rotation that already happened returns the same answer."""
        if not _signs(body.public_key, body.proof, rotation_message(client_id, body.public_key)):
            raise PayloadError("proof must be the new key's base64 signature of 'fedmor key "
                               "rotation\\n{client_id}\\n{public_key}'")
        with self._lock:
            client = self.store.client(client_id)
            if client is None:
                raise NotFoundError(f"{client_id} is not enrolled")
            old, name = client.public_key, client.name
            if old == body.public_key:
                return self._info(name)
            if not _signs(old, body.endorsement,
                          endorsement_message(client_id, old, body.public_key)):
                raise PayloadError("endorsement must be the current key's base64 signature of "
                                   "'fedmor key endorsement\\n{client_id}\\n{current key}\\n"
                                   "{public_key}'")
            if self.store.key_owner(body.public_key, besides=name) is not None:
                raise ConflictError("that key belongs to another identity: generate a new one")
            with self.store.transaction():
                self.store.set_public_key(client_id, name, old=old,
                                          new=body.public_key, endorsement=body.endorsement)
                self.store.audit(client_id, "key_rotated", name=name,
                                 old=key_fingerprint(old), new=key_fingerprint(body.public_key))
            self.access.forget(client_id)
            self._edit_file(name, body.public_key)
        _log.info("%s (%s) rotated its key: %s -> %s", name, client_id,
                  key_fingerprint(old), key_fingerprint(body.public_key))
        return self._info(name)

    def rotations(self) -> list[RotationRecord]:
        """Every rotation the server switched, oldest first, with its endorsement."""
        return self.store.key_rotations()

    # -- the operator's view -------------------------------------------------------------------
    def flush_seen(self) -> None:
        """Keep the last-seen times of the identities heard from since the last flush."""
        self._seen_flushed = time.monotonic()
        seen = self.access.take_seen()
        if seen:
            self.store.note_seen(seen)

    def members(self) -> list[MemberInfo]:
        """Every identity on the roster, enrolled, or revoked, by name."""
        self.flush_seen()
        rounds = self.store.rounds_joined()
        seen = self.store.last_seen()
        out: dict[str, MemberInfo] = {}
        for gone in self.store.revocations():
            out[gone.name] = self._row_info(gone, rounds, seen)
        for entry in self.store.roster():
            out[entry.name] = self._row_info(entry, rounds, seen)
        for client in self.store.clients(None):
            out[client.name] = self._row_info(client, rounds, seen)
        usage = MemberUsage(self.store, [self.rounds.info(i)
                                         for i in self.store.finished_dp_rounds()])
        return [out[name].model_copy(update=usage.of(out[name].client_id))
                for name in sorted(out)]

    @staticmethod
    def _row_info(row: RevokedRow | RosterRow | ClientRow, rounds: dict[str, int],
                  seen: dict[str, float]) -> MemberInfo:
        """The identity of ``row`` (the table it is in says its state) with its last-seen
        time and rounds joined; an enrolled one with what it announced since."""
        if isinstance(row, RosterRow):
            return MemberInfo(name=row.name, role=row.role, state="not_enrolled",
                              fingerprint=key_fingerprint(row.public_key))
        cid = row.client_id or ""
        if isinstance(row, RevokedRow):
            return MemberInfo(name=row.name, role=row.role, state="revoked",
                              client_id=row.client_id,
                              fingerprint=key_fingerprint(row.client_key or row.roster_key),
                              enrolled_at=row.enrolled_at, last_seen=seen.get(cid),
                              rounds=rounds.get(cid, 0), revoked_at=row.at)
        terms = row.round_terms
        return MemberInfo(name=row.name, role=row.role, state="enrolled",
                          client_id=row.client_id, fingerprint=key_fingerprint(row.public_key),
                          enrolled_at=row.enrolled_at, last_seen=seen.get(cid),
                          rounds=rounds.get(cid, 0),
                          round_terms=MemberInfo.announced_terms(json.loads(terms)) if terms
                          else None,
                          started_at=row.started_at, restarts=row.restarts,
                          restarted_in_round=row.restarted_in_round, problem=row.problem)

    def _info(self, name: str) -> MemberInfo:
        found = [m for m in self.members() if m.name == name]
        if not found:
            raise NotFoundError(f"no identity named {name!r}")
        return found[0]
