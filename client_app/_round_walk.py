"""The member's walk through one round: admit it under the site policy, start the local update
in the background, and send one message per stage until the round ends for this member.

Every message is stored locally before it is sent, so a retry (even after a crash) is
byte-identical and the server's idempotent ack applies; a round this member cannot finish is
ended here (never retried) and the server told why; a round that ended without this member
seeing it end is found by :func:`sweep_rounds`, so its secrets are forgotten either way. The
kind's client half is driven by ``MemberRound``: it waits for the local update (an
``UpdateSource``) only before the stage that carries it and runs the half's ``precompute``
(SecAgg+'s masking) in a background thread while the walk sends the key stages, so that masking
is off the round's critical path.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
from concurrent.futures import Future
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from client_app._causes import UpdateFailed, reported_cause
from client_app._policy import PolicyRefused, check_epsilon, check_round, check_update
from client_app._roster_copy import RosterCopy
from client_app._router_update import ConfiguredRouterUpdate, UpdateFn, unpack_update
from client_app._transport import ServerTransport, Unanswered
from sdk.rounds import ROUND_KINDS, ClientRound, RoundFailed, RoundTerms, as_delta
from sdk.wire import (
    PayloadError,
    RequestRefused,
    RotationRecord,
    RoundInfo,
    StageAck,
    StageBroadcast,
    StagePayload,
)

__all__ = ["FINISHED", "MemberRound", "UpdateSource", "ready_update", "reused", "run_round",
           "sweep_rounds"]

_log = logging.getLogger("fedmor.client")

FINISHED = ("done", "abandoned", "ended", "refused")
"""Local round statuses with nothing left to do."""


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


def _gave(update: dict[str, Any] | None) -> str:
    """What the member's update was made of, for its round log line."""
    if update is None:
        return ""
    before, after = update["loss_before"], update["loss_after"]
    losses = "" if before is None or after is None \
        else f", local router loss {before:.4f} -> {after:.4f}"
    return f" ({update['pairs']} local pairs{losses})"


def _base(member: ServerTransport, info: RoundInfo) -> np.ndarray | None:
    if info.base_version is None:
        return None
    resp = member.request("GET", f"/v1/router/{info.base_version}")
    if hashlib.sha256(resp.content).hexdigest() != resp.headers.get("x-fedmor-sha256"):
        raise RoundFailed(f"router version {info.base_version} fails its sha256: the "
                          f"download was changed on the way")
    return np.frombuffer(resp.content, dtype="<f4").copy()


def _check_roster(member: ServerTransport, info: RoundInfo) -> None:
    if member.settings.roster_file is not None:
        RosterCopy(member.settings.roster_file, member.store,
                   lambda: _rotations(member)).check(info)


def _rotations(member: ServerTransport) -> list[RotationRecord]:
    """The server's key rotation records (none from a server that cannot say)."""
    try:
        return member.get("/v1/identity/rotations", list[RotationRecord], attempts=3)
    except (RequestRefused, Unanswered, ValueError) as exc:
        _log.warning("could not fetch the key rotation records: %s", exc)
        return []


def _wait_input(member: ServerTransport, round_id: int, stage: str) -> StageBroadcast:
    # Long polling: the server answers as soon as the previous stage closes.
    wait = member.settings.long_poll_s
    path = f"/v1/rounds/{round_id}/stages/{stage}" + (f"?wait_s={wait:g}" if wait else "")
    while True:
        out = member.get(path, StageBroadcast)
        if out.ready or out.round_status != "open":
            return out
        if member.stop.wait(0 if wait else member.settings.poll_interval_s):
            raise Unanswered(f"GET {path}: runner stopping")


def _local_update(member: ServerTransport, info: RoundInfo, update_fn: UpdateFn) -> UpdateSource:
    """Start the base download and the local update in the background: stages that need
    no input (SecAgg+'s key agreement) go ahead meanwhile."""
    out: UpdateSource = Future()

    def run() -> None:  # whatever it raises goes to the stage that waits for the update
        try:
            base = _base(member, info)
            update = unpack_update(update_fn(member.settings.name, info, base))
            check_update(member.settings.policy, update.samples)
            member.store.record_update(info.round_id, update.samples, update.loss_before,
                                       update.loss_after)
            out.set_result((as_delta(update.params, base), update.samples))
        except (PolicyRefused, RoundFailed, RequestRefused, Unanswered) as exc:
            out.set_exception(exc)
        except Exception as exc:  # any failure of the site's own update: named, reported
            out.set_exception(UpdateFailed(exc))
        except BaseException as exc:
            out.set_exception(exc)

    threading.Thread(target=run, name=f"fedmor-update-{info.round_id}", daemon=True).start()
    return out


def run_round(member: ServerTransport, round_id: int, update_fn: UpdateFn) -> str:
    """Take part in one round until it ends for ``member``, its local update computed by
    ``update_fn``; returns its local status."""
    store = member.store
    status = store.round_status(round_id)
    if status in FINISHED and not reused(member, round_id):
        return status
    info = member.get(f"/v1/rounds/{round_id}", RoundInfo)
    me = member.client_id
    if me not in info.participants:
        return "not_participant"
    store.set_round(round_id, "checking", created_at=info.created_at)
    try:
        terms = _admit(member, info, update_fn)
    except PolicyRefused as exc:
        return _refuse(member, round_id, exc)
    except (ValueError, KeyError) as exc:
        return _abandon(member, round_id, RoundFailed(f"cannot read the round's terms: {exc}"))
    sent = store.sent(round_id)
    try:
        _check_roster(member, info)
        # A restart mid-round continues from the state saved with the last sent message.
        half = MemberRound.join(terms, client_id=me, key=member.key,
                                update=_local_update(member, info, update_fn),
                                state=store.round_state(round_id))
    except (RoundFailed, ValueError, KeyError) as exc:
        return _abandon(member, round_id, exc)
    store.set_round(round_id, "running", created_at=info.created_at)
    try:
        return _walk(member, round_id, info.stages, half, sent)
    except (RequestRefused, Unanswered) as exc:
        # Dropped or the round closed: this member leaves it; else (no answer, stopping,
        # revoked) the round resumes after the cause passed.
        if not isinstance(exc, RequestRefused) or exc.status not in (404, 409):
            raise
        return _end(member, round_id, "abandoned", str(exc))
    except PolicyRefused as exc:  # the local update may not leave (too few samples)
        return _refuse(member, round_id, exc)
    except Exception as exc:  # this member's half failed: it leaves and says why
        return _abandon(member, round_id, exc)


def _walk(member: ServerTransport, round_id: int, stages: list[str], half: MemberRound,
          sent: dict[str, StagePayload]) -> str:
    """Send ``half``'s message for each stage once its input is there (a message in ``sent``,
    stored before a restart, as it was); returns the local status the round ends with."""
    wait = member.settings.long_poll_s
    ahead: StageBroadcast | None = None  # the next stage's input, returned with an ack
    for stage in stages:
        server_input = ahead if ahead is not None and ahead.ready \
            else _wait_input(member, round_id, stage)
        status = server_input.round_status
        if status != "open" and stage not in sent:
            # Nothing sent after the round ended counts (a message sent before is sent again
            # below: the server acks it as it did).
            if status == "finished":
                return _dropped(member, round_id, stage, "the round finished without it")
            return _end(member, round_id, "ended", status)  # the round failed first
        if not server_input.ready:  # the round failed before this stage's input
            return _end(member, round_id, "ended", status)
        payload = sent.get(stage)
        if payload is None:
            payload = half.message(stage, server_input.payload or {})
            member.store.put_sent(round_id, stage, payload, half.state())
        query = f"?wait_next_s={wait:g}" if wait else ""
        try:
            ack = member.post(f"/v1/rounds/{round_id}/stages/{stage}{query}",
                              payload if isinstance(payload, bytes) else {"payload": payload},
                              StageAck)
        except RequestRefused as exc:
            if exc.status != 409:
                raise
            return _dropped(member, round_id, stage, exc.reason)
        ahead = ack.next
    _log.info("round %d: done%s", round_id, _gave(member.store.round_update(round_id)))
    return _end(member, round_id, "done")


def _end(member: ServerTransport, round_id: int, status: str, detail: str = "") -> str:
    _forget(member, round_id, status, detail)
    if status != "done":  # abandoned: this member left; ended: the round failed first
        _log.log(logging.WARNING if status == "abandoned" else logging.INFO,
                 "round %d: %s (%s)", round_id, status, detail)
    return status


def _forget(member: ServerTransport, round_id: int, status: str, detail: str) -> None:
    """Record how the round ended for ``member`` and forget its secrets."""
    member.store.set_round(round_id, status, detail)
    member.store.forget_round(round_id)


def _dropped(member: ServerTransport, round_id: int, stage: str, why: str) -> str:
    """``member``'s message for ``stage`` came after the stage closed (it was slow, stopped or
    cut off past the deadline): the server counts it out of that stage already, so it leaves
    the round with one line and reports nothing more."""
    said = f"stage {stage} closed before this member's answer arrived; dropped out ({why})"
    _forget(member, round_id, "abandoned", said)
    _log.warning("round %d: %s", round_id, said)
    return "abandoned"


def _abandon(member: ServerTransport, round_id: int, exc: Exception) -> str:
    """This member's half failed: end the round here (never retried), log the whole cause
    (WARNING), then tell the server its reportable part, as a refusal ``abandoned``."""
    if not isinstance(exc, (RoundFailed, PayloadError, ValueError)):
        _log.warning("round %d: unexpected failure of this member's half", round_id,
                     exc_info=exc)
    _end(member, round_id, "abandoned", str(exc))
    try:
        member.post(f"/v1/rounds/{round_id}/refusal",
                    {"reason": "abandoned", "detail": reported_cause(exc)}, attempts=3)
    except (RequestRefused, Unanswered) as err:
        # The local record stands; the server sees a dropout.
        _log.warning("round %d: could not report the abandonment: %s", round_id, err)
    return "abandoned"


def sweep_rounds(member: ServerTransport) -> None:
    """Forget the secrets of every round that ended without ``member`` seeing it end (it
    finished, failed or passed its deadline while this client was down or cut off):
    :func:`run_round` only forgets the rounds it runs to their end."""
    for round_id in member.store.rounds_with_secrets():
        try:
            info = member.get(f"/v1/rounds/{round_id}", RoundInfo, attempts=1)
        except (RequestRefused, Unanswered) as exc:
            if isinstance(exc, RequestRefused) and exc.status in (403, 404):
                # Unknown to the server (any more), or its id now names a round we are
                # not in (a server restored from a backup).
                _end(member, round_id, "abandoned", "unknown to the server")
            continue  # unreachable: try again on the next pass
        if info.status != "open":
            _end(member, round_id, "ended", f"round {info.status}")


def reused(member: ServerTransport, round_id: int) -> bool:
    """Whether the server lists a round this client ended under an id it reuses for a new
    one (a server restored from a backup older than the round); then forget the old one."""
    known = member.store.round_created(round_id)
    if known is None:  # recorded before creation times were kept
        return False
    info = member.get(f"/v1/rounds/{round_id}", RoundInfo)
    if info.created_at == known:
        return False
    _log.warning("round %d: the server reuses the id for a new round (restored from a "
                 "backup?); taking part in the new one", round_id)
    member.store.drop_round(round_id)
    return True


def _admit(member: ServerTransport, info: RoundInfo, update_fn: UpdateFn) -> RoundTerms:
    """Check the round against the site policy and return its terms; a DP round is counted
    against the site's epsilon budget before anything is sent (a failed round still
    counts: never less)."""
    policy = member.settings.policy
    terms = check_round(policy, info)
    privacy = terms.privacy
    if isinstance(update_fn, ConfiguredRouterUpdate):  # the round's router is the one fetched
        update_fn.config_for(info)
    if privacy.dp is not None:
        here = (info.round_id, info.created_at)
        epsilon = check_epsilon(policy, member.store.dp_spent(besides=here), privacy.dp)
        member.store.record_dp(*here, privacy.dp.noise_multiplier, epsilon)
        _log.info("round %d: DP (noise multiplier %.3g); this site's epsilon %.3g",
                  info.round_id, privacy.dp.noise_multiplier, epsilon)
    return terms


def _refuse(member: ServerTransport, round_id: int, refusal: PolicyRefused) -> str:
    """Record a policy refusal locally (so it is never retried), then tell the server."""
    _log.warning("round %d refused: %s", round_id, refusal)
    _end(member, round_id, "refused", f"{refusal.reason}: {refusal.detail}")
    try:
        member.post(f"/v1/rounds/{round_id}/refusal",
                    {"reason": refusal.reason, "detail": refusal.detail[:1000]})
    except (RequestRefused, Unanswered) as exc:
        # The local record stands; the server sees a dropout.
        _log.warning("round %d: could not report the refusal: %s", round_id, exc)
    return "refused"
