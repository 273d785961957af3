"""The client's side of every round, against the server over httpx.

Enrolls once (the client id survives restarts in the client's SQLite), then for each open
round it takes part in: starts downloading the base router (checked against its sha256) and
computing its update in the background, and walks the stages (a kind waits for the update only
at the stage that needs it) — every message is stored locally before it is sent, so a retry
(even after a crash) is byte-identical and the server's idempotent ack applies.
"""

from __future__ import annotations

import hashlib
import json
import logging
import ssl
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar, overload

import httpx
import numpy as np
import tenacity
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import TypeAdapter

from client_app._announce import announce_clip_bound, announce_round_terms, announce_start
from client_app._causes import UpdateFailed, reported_cause
from client_app._connection import (
    RETRYABLE,
    MemberRevoked,
    ServerLink,
    Unanswered,
    passed_on,
    revoked,
)
from client_app._identity import reload_key
from client_app._member_round import MemberRound, UpdateSource
from client_app._policy import (
    PolicyDenied,
    PolicyRefused,
    check_epsilon,
    check_round,
    check_update,
)
from client_app._roster_copy import RosterCopy
from client_app._router_update import ConfiguredRouterUpdate, RoundUpdate, unpack_update
from client_app._service import RateLimited, RewardService
from client_app._settings import ClientSettings
from client_app._store import ClientStore
from sdk.rounds import RoundFailed, RoundTerms, as_delta
from sdk.wire import (
    EnrollResponse,
    MissingImages,
    PayloadError,
    PendingQuery,
    RequestRefused,
    RewardRequest,
    RotationRecord,
    RoundInfo,
    RouterConfigInfo,
    SignedClient,
    StageAck,
    StageBroadcast,
    Work,
    check_private_files,
    key_passphrase,
    load_or_create_key,
    public_key_b64,
    tls_verify,
)

__all__ = ["ClientRunner", "UpdateFn", "resolve_update_fn"]

_log = logging.getLogger("fedmor.client")
T = TypeVar("T")

UpdateFn = Callable[[str, RoundInfo, "np.ndarray | None"], "tuple[np.ndarray, int] | RoundUpdate"]
"""A Python update function (the demo's, or one a program hands :class:`ClientRunner` or
``create_client_app``): ``(name, round, base router or None) -> (update, n_k)`` (or a
``RoundUpdate``, which also gives the local loss before and after)."""
_FINISHED = ("done", "abandoned", "ended", "refused")  # local round statuses with nothing left to do


def _again(exc: BaseException) -> bool:
    """Whether an attempt that raised ``exc`` is worth repeating: no connection, or a refusal
    for the server's load or trouble."""
    return isinstance(exc, httpx.TransportError) or (
        isinstance(exc, RequestRefused) and exc.status in RETRYABLE)


def resolve_update_fn(settings: ClientSettings) -> UpdateFn:
    """The site's local router update when it has no ``[router_training]``: the random demo
    update (demo only); otherwise a ``ValueError`` naming the setting."""
    if not settings.demo:
        raise ValueError("no router update configured: add a [router_training] section naming "
                         "this member's training pairs (pairs_dir) to the client settings, or "
                         "run with --no-rounds; demo = true (--demo) sends random updates "
                         "instead")
    from client_app._demo import demo_update

    return demo_update


def _gave(update: dict[str, Any] | None) -> str:
    """What the member's update was made of, for its round log line."""
    if update is None:
        return ""
    before, after = update["loss_before"], update["loss_after"]
    losses = "" if before is None or after is None \
        else f", local router loss {before:.4f} -> {after:.4f}"
    return f" ({update['pairs']} local pairs{losses})"


def _no_update(name: str, info: RoundInfo, base: np.ndarray | None) -> tuple[np.ndarray, int]:
    raise ValueError("this client takes part in no rounds (run_rounds = false)")


def _verify(settings: ClientSettings) -> ssl.SSLContext | bool:
    """The TLS context for the server: its CA, and this member's certificate when it names
    one (mutual TLS)."""
    return tls_verify(settings.server_ca, _client_cert(settings))


def _client_cert(settings: ClientSettings) -> tuple[str, str] | None:
    """This member's certificate and key for a server that requires them (mutual TLS)."""
    cert, key = settings.tls_client_cert, settings.tls_client_key
    if (cert is None) != (key is None):
        raise ValueError("give both tls_client_cert and tls_client_key, or neither")
    if cert is None or key is None:
        return None
    if not settings.allow_readable_files:
        check_private_files(key)
    return str(cert), str(key)


class ClientRunner:
    """Runs this client's side of rounds and answers pull-mode reward queries."""

    def __init__(self, settings: ClientSettings, *, store: ClientStore | None = None,
                 key: Ed25519PrivateKey | None = None, update_fn: UpdateFn | None = None,
                 service: RewardService | None = None) -> None:
        self.settings = settings
        self.store = store or ClientStore(settings.db_path)
        self.key = key or load_or_create_key(
            settings.identity_key, key_passphrase(settings.identity_key_passphrase_file))
        training = settings.router_training if settings.run_rounds else None
        self.configured = None if update_fn is not None or training is None \
            else ConfiguredRouterUpdate(training, self._router_config)
        self.update_fn: UpdateFn = update_fn or self.configured or (
            resolve_update_fn(settings) if settings.run_rounds else _no_update)
        self.service = service
        self.stop = threading.Event()
        self.http = SignedClient(settings.server_url, verify=_verify(settings),
                                 timeout_s=settings.request_timeout_s)
        self.bytes_sent = 0
        self.link = ServerLink(settings.server_url)
        self.revoked = False  # set when the server said this identity is revoked: it stops
        self._last_failure = ""  # the cause of the last failed work pass, logged once
        self._long_poll_works = True  # until the server answers /v1/work with 404
        self._announced = False  # the scorer's clip bound, once per run (see poll_once)

    def close(self) -> None:
        """Close the HTTP client."""
        self.http.close()

    # -- transport -----------------------------------------------------------------------------
    def request(self, method: str, path: str, payload: Any = None, *, signed: bool = True,
                attempts: int = 30) -> httpx.Response:
        """Send one request (``payload``: JSON-able, or ``bytes`` sent as an octet-stream body)
        and return its 2xx response. An unreachable server, 5xx and 429 are tried again, up to
        ``attempts`` in all, after the refusal's ``Retry-After`` or else an exponential
        backoff; each attempt is signed afresh (new nonce). Raises ``RequestRefused`` on a
        final refusal (``MemberRevoked`` for a revoked identity) or the last retried one,
        ``Unanswered`` when no attempt reached the server or the runner is stopping."""
        binary = isinstance(payload, bytes)
        body = payload if binary else b"" if payload is None else json.dumps(payload).encode()
        media = "application/octet-stream" if binary else "application/json"
        backoff = tenacity.wait_exponential(multiplier=0.05, max=self.settings.retry_max_s)

        def wait(state: tenacity.RetryCallState) -> float:
            refused = state.outcome.exception() if state.outcome is not None else None
            if isinstance(refused, RequestRefused) and refused.retry_after is not None:
                return refused.wait_s
            return backoff(state)

        retrying = tenacity.Retrying(stop=tenacity.stop_after_attempt(attempts), wait=wait,
                                     retry=tenacity.retry_if_exception(_again),
                                     sleep=self._backoff, reraise=True)
        try:
            return retrying(self._send, method, path, body, media, signed=signed)
        except httpx.TransportError as exc:
            raise Unanswered(f"{method} {path}: the server at {self.settings.server_url} did "
                             f"not answer {attempts} attempts ({exc})") from exc

    def get(self, path: str, model: type[T], *, attempts: int = 30) -> T:
        """``GET path`` (see :meth:`request`), its answer read as ``model``."""
        return TypeAdapter(model).validate_json(self.request("GET", path,
                                                             attempts=attempts).content)

    @overload
    def post(self, path: str, payload: Any, model: type[T], *, signed: bool = True,
             attempts: int = 30) -> T: ...
    @overload
    def post(self, path: str, payload: Any, model: None = None, *, signed: bool = True,
             attempts: int = 30) -> None: ...
    def post(self, path: str, payload: Any, model: type[T] | None = None, *,
             signed: bool = True, attempts: int = 30) -> T | None:
        """``POST path`` (see :meth:`request`), its answer read as ``model`` (without one, not
        read)."""
        resp = self.request("POST", path, payload, signed=signed, attempts=attempts)
        return None if model is None else TypeAdapter(model).validate_json(resp.content)

    def _backoff(self, seconds: float) -> None:
        self.stop.wait(seconds)  # a stopping runner does not sit out its backoff

    def _send(self, method: str, path: str, body: bytes, media: str, *,
              signed: bool) -> httpx.Response:
        """One attempt: the 2xx response, else the refusal (``MemberRevoked`` for a revoked
        identity); ``Unanswered`` when the runner is stopping. A signed request refused
        401/403 just after the key file changed (a rotation) is sent again with the new key."""
        if self.stop.is_set():
            raise Unanswered(f"{method} {path}: runner stopping")
        resp = self._attempt(method, path, body, media, signed=signed)
        if signed and resp.status_code in (401, 403) and reload_key(self):
            resp = self._attempt(method, path, body, media, signed=signed)
        if resp.is_success:
            return resp
        refused = RequestRefused.of(resp)
        if signed and revoked(refused.status, refused.reason):
            raise MemberRevoked.of(resp)
        raise refused

    def _attempt(self, method: str, path: str, body: bytes, media: str, *,
                 signed: bool) -> httpx.Response:
        # The identity is read per attempt: enrollment sets the id, a rotation the key.
        auth = self.http.signer(self.key, self.client_id) if signed else None
        try:
            resp = self.http.request(method, path, body, media=media, auth=auth)
        except httpx.TransportError as exc:
            self.link.down(exc)
            raise
        self.link.up()
        self.bytes_sent += len(body)
        return resp

    # -- enrollment ----------------------------------------------------------------------------
    @property
    def client_id(self) -> str:
        """The id the server gave us (enrolls on first use)."""
        stored = self.store.get("client_id")
        return stored if stored is not None else self.enroll()

    def enroll(self) -> str:
        """Enroll with the one-time token unless already enrolled; returns the client id."""
        stored = self.store.get("client_id")
        if stored is not None:
            return stored
        token = self.settings.enrollment_token
        if token is None:
            raise ValueError("not enrolled yet and no enrollment_token configured")
        body = {"name": self.settings.name, "token": token.get_secret_value(),
                "public_key": public_key_b64(self.key), "reward_url": self.settings.public_url,
                "clip_bound": None if self.service is None else self.service.clip}
        resp = self.post("/v1/enroll", body, EnrollResponse, signed=False)
        self.store.put("server_public_key", resp.server_public_key)
        self.store.put("client_id", resp.client_id)
        _log.info("enrolled with %s as %s", self.settings.server_url, resp.client_id)
        return resp.client_id

    # -- rounds --------------------------------------------------------------------------------
    def _router_config(self) -> RouterConfigInfo:
        """The server's signed ``GET /v1/router/config``."""
        return self.get("/v1/router/config", RouterConfigInfo, attempts=3)

    def _base(self, info: RoundInfo) -> np.ndarray | None:
        if info.base_version is None:
            return None
        resp = self.request("GET", f"/v1/router/{info.base_version}")
        if hashlib.sha256(resp.content).hexdigest() != resp.headers.get("x-fedmor-sha256"):
            raise RoundFailed(f"router version {info.base_version} fails its sha256: the "
                              f"download was changed on the way")
        return np.frombuffer(resp.content, dtype="<f4").copy()

    def _check_roster(self, info: RoundInfo) -> None:
        if self.settings.roster_file is not None:
            RosterCopy(self.settings.roster_file, self.store, self._rotations).check(info)

    def _rotations(self) -> list[RotationRecord]:
        """The server's key rotation records (none from a server that cannot say)."""
        try:
            return self.get("/v1/identity/rotations", list[RotationRecord], attempts=3)
        except (RequestRefused, Unanswered, ValueError) as exc:
            _log.warning("could not fetch the key rotation records: %s", exc)
            return []

    def _wait_input(self, round_id: int, stage: str) -> StageBroadcast:
        # Long polling: the server answers as soon as the previous stage closes.
        wait = self.settings.long_poll_s
        path = f"/v1/rounds/{round_id}/stages/{stage}" + (f"?wait_s={wait:g}" if wait else "")
        while True:
            out = self.get(path, StageBroadcast)
            if out.ready or out.round_status != "open":
                return out
            if self.stop.wait(0 if wait else self.settings.poll_interval_s):
                raise Unanswered(f"GET {path}: runner stopping")

    def _local_update(self, info: RoundInfo) -> UpdateSource:
        """Start the base download and the local update in the background: stages that need
        no input (SecAgg+'s key agreement) go ahead meanwhile."""
        out: UpdateSource = Future()

        def run() -> None:  # whatever it raises goes to the stage that waits for the update
            try:
                base = self._base(info)
                update = unpack_update(self.update_fn(self.settings.name, info, base))
                check_update(self.settings.policy, update.samples)
                self.store.record_update(info.round_id, update.samples, update.loss_before,
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

    def run_round(self, round_id: int) -> str:
        """Take part in one round until it ends for us; returns our local status."""
        status = self.store.round_status(round_id)
        if status in _FINISHED and not self._reused(round_id):
            return status
        info = self.get(f"/v1/rounds/{round_id}", RoundInfo)
        me = self.client_id
        if me not in info.participants:
            return "not_participant"
        self.store.set_round(round_id, "checking", created_at=info.created_at)
        try:
            terms = self._admit(info)
        except PolicyRefused as exc:
            return self._refuse(round_id, exc)
        except (ValueError, KeyError) as exc:
            return self._abandon(round_id, RoundFailed(f"cannot read the round's terms: {exc}"))
        sent = self.store.sent(round_id)
        try:
            self._check_roster(info)
            # A restart mid-round continues from the state saved with the last sent message.
            half = MemberRound.join(terms, client_id=me, key=self.key,
                                    update=self._local_update(info),
                                    state=self.store.round_state(round_id))
        except (RoundFailed, ValueError, KeyError) as exc:
            return self._abandon(round_id, exc)
        self.store.set_round(round_id, "running", created_at=info.created_at)
        wait = self.settings.long_poll_s
        ahead: StageBroadcast | None = None  # the next stage's input, returned with an ack
        try:
            for stage in info.stages:
                server_input = ahead if ahead is not None and ahead.ready \
                    else self._wait_input(round_id, stage)
                if not server_input.ready:  # the round ended (failed) before our stage
                    return self._end(round_id, "ended", server_input.round_status)
                payload = sent.get(stage)
                if payload is None:
                    payload = half.message(stage, server_input.payload or {})
                    self.store.put_sent(round_id, stage, payload, half.state())
                query = f"?wait_next_s={wait:g}" if wait else ""
                ack = self.post(f"/v1/rounds/{round_id}/stages/{stage}{query}",
                                payload if isinstance(payload, bytes) else {"payload": payload},
                                StageAck)
                ahead = ack.next
        except (RequestRefused, Unanswered) as exc:
            # Dropped or the round closed: this member leaves it; else (no answer, stopping,
            # revoked) the round resumes after the cause passed.
            if not isinstance(exc, RequestRefused) or exc.status not in (404, 409):
                raise
            return self._end(round_id, "abandoned", str(exc))
        except PolicyRefused as exc:  # the local update may not leave (too few samples)
            return self._refuse(round_id, exc)
        except Exception as exc:  # this member's half failed: it leaves and says why
            return self._abandon(round_id, exc)
        _log.info("round %d: done%s", round_id, _gave(self.store.round_update(round_id)))
        return self._end(round_id, "done")

    def _end(self, round_id: int, status: str, detail: str = "") -> str:
        self.store.set_round(round_id, status, detail)
        self.store.forget_round(round_id)
        if status != "done":  # abandoned: this member left; ended: the round failed first
            _log.log(logging.WARNING if status == "abandoned" else logging.INFO,
                     "round %d: %s (%s)", round_id, status, detail)
        return status

    def _abandon(self, round_id: int, exc: Exception) -> str:
        """This member's half failed: end the round here (never retried), log the whole cause
        (WARNING), then tell the server its reportable part, as a refusal ``abandoned``."""
        if not isinstance(exc, (RoundFailed, PayloadError, ValueError)):
            _log.warning("round %d: unexpected failure of this member's half", round_id,
                         exc_info=exc)
        self._end(round_id, "abandoned", str(exc))
        try:
            self.post(f"/v1/rounds/{round_id}/refusal",
                      {"reason": "abandoned", "detail": reported_cause(exc)}, attempts=3)
        except (RequestRefused, Unanswered) as err:
            # The local record stands; the server sees a dropout.
            _log.warning("round %d: could not report the abandonment: %s", round_id, err)
        return "abandoned"

    def sweep_rounds(self) -> None:
        """Forget the secrets of every round that ended without us seeing it end (it finished,
        failed or passed its deadline while this client was down or cut off): ``run_round``
        only forgets the rounds it runs to their end."""
        for round_id in self.store.rounds_with_secrets():
            try:
                info = self.get(f"/v1/rounds/{round_id}", RoundInfo, attempts=1)
            except (RequestRefused, Unanswered) as exc:
                if isinstance(exc, RequestRefused) and exc.status in (403, 404):
                    # Unknown to the server (any more), or its id now names a round we are
                    # not in (a server restored from a backup).
                    self._end(round_id, "abandoned", "unknown to the server")
                continue  # unreachable: try again on the next pass
            if info.status != "open":
                self._end(round_id, "ended", f"round {info.status}")

    def _reused(self, round_id: int) -> bool:
        """Whether the server lists a round this client ended under an id it reuses for a new
        one (a server restored from a backup older than the round); then forget the old one."""
        known = self.store.round_created(round_id)
        if known is None:  # recorded before creation times were kept
            return False
        info = self.get(f"/v1/rounds/{round_id}", RoundInfo)
        if info.created_at == known:
            return False
        _log.warning("round %d: the server reuses the id for a new round (restored from a "
                     "backup?); taking part in the new one", round_id)
        self.store.drop_round(round_id)
        return True

    def _admit(self, info: RoundInfo) -> RoundTerms:
        """Check the round against the site policy and return its terms; a DP round is counted
        against the site's epsilon budget before anything is sent (a failed round still
        counts: never less)."""
        policy = self.settings.policy
        terms = check_round(policy, info)
        privacy = terms.privacy
        if self.configured is not None:  # the round's router is the one this member fetched
            self.configured.config_for(info)
        if privacy.dp is not None:
            here = (info.round_id, info.created_at)
            epsilon = check_epsilon(policy, self.store.dp_spent(besides=here), privacy.dp)
            self.store.record_dp(*here, privacy.dp.noise_multiplier, epsilon)
            _log.info("round %d: DP (noise multiplier %.3g); this site's epsilon %.3g",
                      info.round_id, privacy.dp.noise_multiplier, epsilon)
        return terms

    def _refuse(self, round_id: int, refusal: PolicyRefused) -> str:
        """Record a policy refusal locally (so it is never retried), then tell the server."""
        _log.warning("round %d refused: %s", round_id, refusal)
        self._end(round_id, "refused", f"{refusal.reason}: {refusal.detail}")
        try:
            self.post(f"/v1/rounds/{round_id}/refusal",
                      {"reason": refusal.reason, "detail": refusal.detail[:1000]})
        except (RequestRefused, Unanswered) as exc:
            # The local record stands; the server sees a dropout.
            _log.warning("round %d: could not report the refusal: %s", round_id, exc)
        return "refused"

    # -- pull-mode reward queries --------------------------------------------------------------
    def answer_pending(self, queries: list[PendingQuery] | None = None) -> int:
        """Answer ``queries`` (default: every queued one, fetched); returns how many."""
        if self.service is None:
            return 0
        if queries is None:
            queries = self.get("/v1/reward/pending", list[PendingQuery])
        for q in queries:
            answer: dict[str, Any]
            try:
                out = self.service.score("server", RewardRequest(items=q.items))
                answer = ({"missing": out.missing} if isinstance(out, MissingImages)
                          else {"scores": out.scores})
            except (RateLimited, PayloadError, PolicyDenied) as exc:
                answer = {"error": str(exc)}
            except Exception:  # a bad item costs its own answer, never the worker
                _log.exception("scoring reward query %s failed", q.query_id)
                answer = {"error": "internal error while scoring this query"}
            self.post(f"/v1/reward/answers/{q.query_id}", answer)
        return len(queries)

    # -- work discovery ------------------------------------------------------------------------
    def poll_once(self) -> bool:
        """One pass: run every open round we take part in, then answer queued queries. Returns
        whether the next pass may start at once: true after a long poll (the server held it
        until there was work, or ``long_poll_s`` passed), false when it polled instead."""
        self._announce_once()
        self.sweep_rounds()
        wait = self.settings.long_poll_s
        if not (wait and self._long_poll_works):
            self._poll_lists()
            return False
        path = f"/v1/work?wait_s={wait:g}&rounds={str(self.settings.run_rounds).lower()}"
        try:
            work = self.get(path, Work)
        except RequestRefused as exc:
            if exc.status not in (404, 405):
                raise
            self._long_poll_works = False  # a server without /v1/work: poll as before
            self._poll_lists()
            return False
        fresh = [r for r in work.rounds
                 if self.store.round_status(r) not in _FINISHED or self._reused(r)]
        for round_id in fresh:
            self.run_round(round_id)
        self.answer_pending(work.queries)
        # Rounds we already ended locally (abandoned, say) stay listed until their stage
        # closes: do not spin on them.
        return bool(fresh or work.queries or not work.rounds)

    def _announce_once(self) -> None:
        """Before the first pull query is answered: announce the site's round terms and the
        scorer's clip bound. A refusal (above the consortium's maximum, an old server) is
        logged and the member works on; an unreachable server is tried at the next pass."""
        if self._announced:
            return
        try:
            announce_start(self)
            announce_round_terms(self)
            announce_clip_bound(self)
        except RequestRefused as exc:
            if passed_on(exc):
                raise
            _log.warning("the server refused this member's clip bound: %s; answers outside "
                         "the bound it announced before will be refused", exc)
        self._announced = True

    def _poll_lists(self) -> None:
        if self.settings.run_rounds:
            for info in self.get("/v1/rounds?status=open", list[RoundInfo]):
                if self.client_id in info.participants:
                    self.run_round(info.round_id)
        self.answer_pending()

    def _failed_pass(self, exc: Exception) -> None:
        """Log a failed work pass at WARNING once per distinct cause (not while the server is
        unreachable, which the link reports, nor when the runner stops)."""
        text = str(exc)
        if self.stop.is_set() or self.link.down_since is not None \
                or text == self._last_failure:
            return
        self._last_failure = text
        _log.warning("work pass failed, retrying: %s", text)

    def run_forever(self) -> None:
        """Discover work until ``self.stop`` is set (long polling, or every
        ``poll_interval_s`` against an old server); transient failures are retried, a revoked
        identity ends it (``self.revoked``)."""
        stop = self.stop
        while not stop.is_set():
            again = False
            # A refused or garbled exchange ends this pass only; the next pass retries.
            try:
                again = self.poll_once()
            except MemberRevoked as exc:  # nothing this member sends is taken any more
                _log.error("the consortium revoked this member's identity (%s): the client "
                           "stops; ask the operator whether to enroll a new identity", exc)
                self.revoked = True
                stop.set()
                return
            except (RequestRefused, Unanswered, httpx.HTTPError, ValueError) as exc:
                self._failed_pass(exc)
            except Exception:  # anything else is logged: the worker outlives one bad pass
                _log.exception("work pass failed")
            if not again:
                stop.wait(self.settings.poll_interval_s)
