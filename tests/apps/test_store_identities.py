"""The identity methods of the server's store on a real SQLite file: what a rotation may not
take, what a revocation records and drops, and last-seen times that only move forward."""

from __future__ import annotations

import hashlib
from pathlib import Path

from server_app import Store
from server_app._store import ClientRow


def _enrolled(store: Store, name: str, key: str) -> ClientRow:
    store.upsert_roster(name, key, hashlib.sha256(b"tok-" + name.encode()).hexdigest())
    client, created = store.enroll(name=name, token=f"tok-{name}", public_key=key,
                                   reward_url=None, new_id=f"id-{name}")
    assert created
    return client


def test_a_key_held_by_another_identity_is_named_and_a_rotation_moves_both_rows(
        tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    _enrolled(store, "a", "key-a")
    _enrolled(store, "b", "key-b")
    store.upsert_roster("listed", "key-l", None)  # on the roster, never enrolled
    assert store.key_owner("key-b", besides="a") == "b"
    assert store.key_owner("key-l", besides="a") == "listed"
    assert store.key_owner("key-a", besides="a") == "a"  # its own enrolled key
    assert store.key_owner("fresh", besides="a") is None
    store.set_public_key("id-a", "a", old="key-a", new="fresh", endorsement="sig")
    client, entry, named = store.client("id-a"), store.roster_entry("a"), store.client_named("a")
    assert client is not None and client.public_key == "fresh"
    assert entry is not None and entry.public_key == "fresh"
    assert named is not None and named.client_id == "id-a"
    assert store.roster_entry("nobody") is None and store.client_named("nobody") is None
    # the rotation is kept (published to members) and the old key is retired, not forgotten
    assert store.retired_keys("id-a") == ["key-a"]
    assert [(r.client_id, r.old_public_key, r.new_public_key, r.endorsement)
            for r in store.key_rotations()] == [("id-a", "key-a", "fresh", "sig")]


def test_a_revocation_keeps_the_keys_and_drops_the_identity(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    client = _enrolled(store, "a", "key-a")
    store.upsert_roster("listed", "key-l", None)
    store.revoke("a", roster_key="key-a", client=client, role="member", actor="op",
                 reason="left")
    store.revoke("listed", roster_key="key-l", client=None, role="member", actor="op",
                 reason="")
    assert store.roster_entry("a") is None and store.client("id-a") is None
    assert store.revoked_pairs() == {("a", "key-a"), ("listed", "key-l")}
    assert store.revoked_client_key("id-a") == "key-a"
    assert store.revoked_client_key("id-other") is None
    gone = store.revocation("a")
    assert gone is not None and (gone.actor, gone.reason, gone.client_id, gone.client_key) == (
        "op", "left", "id-a", "key-a")
    assert [r.name for r in store.revocations()] == ["a", "listed"]
    listed = store.revocation("listed")  # revoked before it enrolled: its NULL columns are None
    assert listed is not None and (listed.client_id, listed.client_key, listed.enrolled_at) == (
        None, None, None)


def test_last_seen_only_moves_forward(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    store.note_seen({"id-a": 10.0, "id-b": 5.0})
    store.note_seen({"id-a": 7.0, "id-b": 6.0})
    assert store.last_seen() == {"id-a": 10.0, "id-b": 6.0}
    assert store.rounds_joined() == {}
