"""Enrollment tokens are pasted into command lines (`fedmor align --token TOKEN`)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from sdk.membership import add_to_roster
from sdk.wire import generate_key, public_key_b64


def test_tokens_never_read_as_an_option_and_only_their_hash_is_kept(tmp_path: Path) -> None:
    roster = tmp_path / "roster.json"
    # 300 draws: URL-safe base64 tokens start with '-' once in 64, so this would see several.
    tokens = [add_to_roster(roster, name=f"m{i}", public_key=public_key_b64(generate_key()))
              for i in range(300)]  # one key per name: a key is one identity
    assert not [t for t in tokens if t.startswith("-")]
    assert len(set(tokens)) == len(tokens) and all(len(t) == 48 for t in tokens)  # 24 bytes
    text = roster.read_text()
    assert not any(t in text for t in tokens)
    assert {c["token_sha256"] for c in json.loads(text)["clients"]} == {
        hashlib.sha256(t.encode()).hexdigest() for t in tokens}
