"""The member's driver of a round kind's client half over REST: the waits and the thread.

A kind's client half takes messages in and gives messages out; this driver feeds it the local
update, which the runner computes in the background (an ``UpdateSource``), waiting on it only
before the stage that carries it (``ClientRound.update_stage``), and runs the half's
``precompute`` (SecAgg+'s masking) in a background thread while the runner persists and sends
the key stages' replies, so that masking is off the round's critical path.
"""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import Future
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sdk.rounds import ROUND_KINDS, ClientRound, RoundTerms
from sdk.wire import StagePayload

__all__ = ["MemberRound", "UpdateSource", "ready_update"]

UpdateSource = Future[tuple[np.ndarray, float]]
"""A member's local update for a round, computed in the background: (vector (vector_length,),
weight n_k), or what computing it raised."""


def ready_update(vector: np.ndarray, weight: float) -> UpdateSource:
    """An ``UpdateSource`` that is already computed."""
    out: UpdateSource = Future()
    out.set_result((vector, weight))
    return out


class MemberRound:
    """One member's client ``half`` of one round, driven through its kind's ``stages`` and
    fed ``update`` when a stage needs it."""

    def __init__(self, half: ClientRound[Any, Any], update: UpdateSource,
                 stages: tuple[str, ...]) -> None:
        self.half = half
        self._update = update
        self._stages = stages
        self._ahead: threading.Thread | None = None

    @classmethod
    def join(cls, terms: RoundTerms, *, client_id: str, key: Ed25519PrivateKey,
             update: UpdateSource, state: dict[str, Any] | None,
             rng: np.random.Generator | None = None) -> MemberRound:
        """The client half of the round ``terms`` describes (restored from ``state``, what
        ``state()`` returned before a restart, if any), fed ``update`` when a stage needs it."""
        kind = ROUND_KINDS[terms.spec.kind]
        return cls(kind.client(terms, client_id=client_id, key=key, state=state, rng=rng),
                   update, kind.stages)

    def message(self, stage: str, server_input: dict[str, Any]) -> StagePayload:
        """The wire message for ``stage``; waits for the local update if this stage carries it
        and raises what computing it raised."""
        self._join()  # the half is not to be used by two threads at once
        if stage == self.half.update_stage:
            self._provide()
        out = self.half.message(stage, server_input)
        self._start_ahead(stage)
        return out

    def state(self) -> dict[str, Any]:
        """The half's state to persist with the message just sent."""
        return self.half.state()

    def _provide(self) -> None:
        if not self.half.has_update:
            vector, weight = self._update.result()
            self.half.provide(vector, weight)

    def _start_ahead(self, stage: str) -> None:
        """After a key stage, mask in the background: right away if the update is there, or
        waiting for it after the stage just before the one that carries it (waiting any
        earlier would hold the half while its next key stage is due)."""
        half = self.half
        if not half.precomputes or half.update_stage not in self._stages \
                or stage not in self._stages:
            return
        index, carrier = self._stages.index(stage), self._stages.index(half.update_stage)
        if index >= carrier or not (index + 1 == carrier or self._update.done()):
            return

        def run() -> None:
            with contextlib.suppress(Exception):  # ``message`` redoes whatever failed, and raises
                self._provide()
                half.precompute()

        self._ahead = threading.Thread(target=run, name="fedmor-round-ahead", daemon=True)
        self._ahead.start()

    def _join(self) -> None:
        if self._ahead is not None:
            self._ahead.join()
            self._ahead = None
