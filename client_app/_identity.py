"""The member's side of key rotation: ``fedmor client rotate-key`` and the running app's
switch to the new key file.

The new key is written (0600, encrypted when a passphrase is configured) next to the old one as
``<identity_key>.next``, announced to the server signed by the old key with a proof of
possession and the old key's endorsement (published for the other members' roster copies), and
only then moved over the old file. A rotation interrupted after the server
switched is finished by running the command again (the pending key is reused). A running client
app notices at its next refused request that the key file changed and signs with the new key
(``client_app._transport``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from client_app._transport import ServerTransport, Unanswered
from sdk.wire import (
    RequestRefused,
    key_passphrase,
    load_or_create_key,
    sign_rotation,
)

__all__ = ["pending_key_path", "rotate_key"]

_log = logging.getLogger("fedmor.client")
_ROTATE = "/v1/identity/rotate"


def pending_key_path(identity_key: Path) -> Path:
    """Where a rotation keeps the new key until the server accepted it."""
    return identity_key.with_name(identity_key.name + ".next")


def rotate_key(runner: ServerTransport) -> str:
    """Rotate ``runner``'s identity key at the server and on disk; returns the new public
    key. Raises ``ValueError`` before enrollment, ``RequestRefused`` when the server refuses."""
    cfg = runner.settings
    client_id = runner.store.get("client_id")
    if client_id is None:
        raise ValueError("not enrolled yet: a key is rotated after enrollment (start the "
                         "client app once)")
    pending = pending_key_path(cfg.identity_key)
    new = load_or_create_key(pending, key_passphrase(cfg.identity_key_passphrase_file))
    rotation = sign_rotation(client_id, runner.key, new)
    public, body = rotation.public_key, rotation.model_dump()
    try:
        runner.post(_ROTATE, body)
    except RequestRefused as exc:
        if exc.status not in (401, 403):
            raise
        # A rotation may have been interrupted after the server switched: the pending key
        # then signs, and the server answers the repeated rotation as done.
        old, runner.key = runner.key, new
        try:
            runner.post(_ROTATE, body, attempts=1)
        except (RequestRefused, Unanswered):
            runner.key = old
            raise exc from None
    os.replace(pending, cfg.identity_key)  # atomic: the file holds the old key or the new one
    runner.key = new
    _log.info("identity key rotated; the old key is refused by the server from now on")
    return public
