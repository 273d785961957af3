"""A client exported after any stage and restored in a 'new process' finishes the round."""

from __future__ import annotations

import numpy as np
import pytest

from sdk.secagg import ClientState, SecAggClient, Stage
from sdk.secagg._errors import MaliciousServerError

from .conftest import Harness

LIVE = [Stage.ADVERTISE_KEYS, Stage.SHARE_KEYS, Stage.MASKED_INPUT_COLLECTION,
        Stage.CONSISTENCY_CHECK, Stage.UNMASKING]


def _restart(h: Harness, c: int, *, update: np.ndarray | None = None) -> None:
    """Replace client ``c`` by one rebuilt from its JSON state (as a restarted app does)."""
    text = h.clients[c].export_state().model_dump_json()
    fresh = h.updates[c] if update is None else update
    h.clients[c] = SecAggClient.restore(ClientState.model_validate_json(text), h.keys[c],
                                        h.roster, fresh, h.weights[c])


@pytest.mark.parametrize("after", range(len(LIVE)))
def test_restored_clients_finish_the_round(after: int) -> None:
    h = Harness(n=5, dim=32)
    for _ in range(after):
        h.step()
    for c in (0, 3):
        # After the masked input was produced the update is no longer used: prove it.
        late = after > LIVE.index(Stage.MASKED_INPUT_COLLECTION)
        _restart(h, c, update=np.zeros(32, np.float32) if late else None)
        assert h.clients[c].stage is LIVE[after]
    while h.outbox:
        h.step()
    h.assert_weighted_mean_of_all()


def test_fresh_keys_after_advertising_are_caught() -> None:
    """Without its saved keys a restarted client could not decrypt its shares: the round's
    other clients would see tampered ciphertexts. With them, the state round-trips exactly."""
    h = Harness(n=4, dim=8)
    h.step()
    state = h.clients[1].export_state()
    assert ClientState.model_validate_json(state.model_dump_json()) == state
    stranger = Harness(n=4, dim=8).clients[1].export_state()
    mixed = state.model_copy(update={"enc_sk": stranger.enc_sk})
    with pytest.raises(ValueError, match="do not match"):
        SecAggClient.restore(mixed, h.keys[1], h.roster, h.updates[1], h.weights[1])


def test_restored_terminal_client_stays_terminal() -> None:
    h = Harness(n=3, dim=4)
    while h.outbox:
        h.step()
    _restart(h, 0)
    assert h.clients[0].stage is Stage.DONE
    with pytest.raises(MaliciousServerError):
        h.clients[0].receive(h.server.start()[0])
