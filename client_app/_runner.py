"""The client's side of every round and pull-mode reward query, against the server.

``ClientRunner`` is the one facade: it is the member's signed connection
(``client_app._transport``), enrolls once (the client id survives restarts in the client's
SQLite), and finds its work with long polls; each open round it takes part in is walked by
``client_app._round_walk`` and each queued reward query answered here,
by the same service as the member's push endpoint.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from client_app._announce import announce_clip_bound, announce_round_terms, announce_start
from client_app._policy import PolicyDenied
from client_app._round_walk import FINISHED, reused, run_round, sweep_rounds
from client_app._router_update import (
    ConfiguredRouterUpdate,
    UpdateFn,
    no_update,
    resolve_update_fn,
)
from client_app._service import RateLimited, RewardService
from client_app._settings import ClientSettings
from client_app._store import ClientStore
from client_app._transport import MemberRevoked, ServerTransport, Unanswered, passed_on
from sdk.wire import (
    MissingImages,
    PayloadError,
    PendingQuery,
    RequestRefused,
    RewardRequest,
    RoundInfo,
    RouterConfigInfo,
    Work,
    key_passphrase,
    load_or_create_key,
)

__all__ = ["ClientRunner"]

_log = logging.getLogger("fedmor.client")


class ClientRunner(ServerTransport):
    """Runs this client's side of rounds and answers pull-mode reward queries."""

    def __init__(self, settings: ClientSettings, *, store: ClientStore | None = None,
                 key: Ed25519PrivateKey | None = None, update_fn: UpdateFn | None = None,
                 service: RewardService | None = None) -> None:
        store = store or ClientStore.of(settings)
        key = key or load_or_create_key(
            settings.identity_key, key_passphrase(settings.identity_key_passphrase_file))
        training = settings.router_training if settings.run_rounds else None
        configured = None if update_fn is not None or training is None \
            else ConfiguredRouterUpdate(training, self._router_config)
        self.update_fn: UpdateFn = update_fn or configured or (
            resolve_update_fn(settings) if settings.run_rounds else no_update)
        super().__init__(settings, store, key, service)
        self.revoked = False  # set when the server said this identity is revoked: it stops
        self._last_failure = ""  # the cause of the last failed work pass, logged once
        self._long_poll_works = True  # until the server answers /v1/work with 404
        self._announced = False  # the scorer's clip bound, once per run (see poll_once)

    def _router_config(self) -> RouterConfigInfo:
        """The server's signed ``GET /v1/router/config``."""
        return self.get("/v1/router/config", RouterConfigInfo, attempts=3)

    # -- rounds and queries --------------------------------------------------------------------
    def run_round(self, round_id: int) -> str:
        """Take part in one round until it ends for us; returns our local status."""
        return run_round(self, round_id, self.update_fn)

    def sweep_rounds(self) -> None:
        """Forget the secrets of every round that ended without us seeing it end (see
        ``client_app._round_walk.sweep_rounds``)."""
        sweep_rounds(self)

    def answer_pending(self, queries: list[PendingQuery] | None = None) -> int:
        """Pull mode: answer ``queries`` (default: every queued one, fetched) with the same
        service as the push endpoint (``POST /v1/reward``); returns how many (none without a
        reward service)."""
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
            except RateLimited as exc:  # refused for load: the server passes the wait on
                answer = {"error": str(exc), "retry_after_s": exc.retry_after_s}
            except (PayloadError, PolicyDenied) as exc:
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
                 if self.store.round_status(r) not in FINISHED or reused(self, r)]
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
