"""The reward-query broker (stage C): ask a member to score a batch, by push or pull.

Push: the server POSTs ``/v1/reward`` to the client app, signed with the server's identity.
Pull: the query waits in the store until the client fetches it and answers; the answer route
wakes it (:meth:`RewardBroker.answered`), a slow re-read of the store is the fallback.
Each item goes as one :class:`~sdk.wire.RewardItem` made from its :class:`~sdk.wire.ImageRef`:
the image's bytes as the aligner sent them, once per member, then only their sha256 (resent
when the member says it lacks them). A member's answer is read with its response schema and
checked once, by :meth:`RewardBroker.check`: a push answer here, a pull answer at its route.

A member app caps the requests one identity (the server is one) has in progress: the broker
keeps at most ``per_member`` push queries in flight to each member, and a query the member
refused for load (a push 429, a pull answer with ``retry_after_s``) goes to it again once its
``Retry-After`` passed, for as long as the query's deadline allows.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar
from urllib.parse import urlsplit

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import ValidationError

from sdk.wire import (
    SERVER_SENDER,
    AsyncSignedClient,
    ImageRef,
    MissingImages,
    RequestRefused,
    RewardAnswer,
    RewardItem,
    RewardRequest,
    RewardResponse,
    SignedAuth,
)
from server_app._rounds._work import wake
from server_app._store import ClientRow, QueuedQuery, Store

__all__ = ["BrokerError", "OnScored", "RewardBroker"]

_log = logging.getLogger("fedmor.broker")

_REVOKED = "withdrawn: the member was revoked"
_LATE = "withdrawn: not answered within the server's reward_timeout_s"

OnScored = Callable[[str, list[RewardItem], list[float]], None]
"""Told of every answered query: (member client id, its items, their checked scores)."""


class BrokerError(RuntimeError):
    """A reward query could not be answered: the member unreachable, its answer refused here,
    no free slot or no answer in time. (A member that refuses the request itself raises
    :class:`~sdk.wire.RequestRefused`.)"""


_Answer = TypeVar("_Answer", RewardResponse, MissingImages)


def _parsed(schema: type[_Answer], resp: httpx.Response, client_id: str) -> _Answer:
    """A member's push answer read with its response schema (a non-finite score, a missing
    field or a wrong type is refused here); ``BrokerError`` naming the member otherwise."""
    try:
        return schema.model_validate_json(resp.content)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise BrokerError(f"client {client_id} answered {resp.status_code} with a body that "
                          f"is no {schema.__name__}: {where}: {first['msg']}") from None


class RewardBroker:
    """Routes reward queries to clients; ``mode`` is ``push``, ``pull`` or ``auto`` (push when
    the client enrolled with a reward URL).

    ``timeout_s`` bounds each query, its waits for a free slot and its resends after a 429
    included; ``per_member``: push queries in flight to one member at once; ``poll_s``: how
    often a pull query re-reads the store when nothing woke it (an answer stored by another
    process: a broker on the server's store without its answer route keeps it short)."""

    def __init__(self, store: Store, key: Ed25519PrivateKey, *, timeout_s: float = 60.0,
                 poll_s: float = 0.05, verify: ssl.SSLContext | bool = True, mode: str = "auto",
                 per_member: int = 8, on_queue: Callable[[str], None] | None = None,
                 on_scored: OnScored | None = None, allow_private: bool = False) -> None:
        if mode not in ("push", "pull", "auto"):
            raise ValueError(f"broker mode must be push, pull or auto, not {mode!r}")
        if per_member < 1:
            raise ValueError(f"per_member must be at least 1, not {per_member}")
        self.store = store
        self.key = key
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self.per_member = per_member
        self._slots: dict[str, asyncio.Semaphore] = {}
        # For tests and the benchmark: push requests that waited for a free slot of their
        # member, queries sent again after a refusal for load, store reads of waiting pull
        # queries.
        self.slot_waits = self.resends = self.pull_reads = 0
        # The pull queries waiting here, by id: ``answered`` (any thread) resolves a future.
        self._waiting: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = {}
        self._waiting_lock = threading.Lock()
        self.mode = mode
        # Called with the client id: wakes that client's long-polling ``/v1/work`` (pull mode).
        self.on_queue = on_queue
        self.bytes_sent = 0  # query bytes sent to members: push bodies and queued pull items
        # The last push answer's ``Server-Timing`` in ms (``score``, ``app``): where a query's
        # time went, for the benchmark; empty when the client sent none.
        self.last_server_timing: dict[str, float] = {}
        # A reward URL is the member's text: unless ``allow_private`` (members on the server's
        # own network), each connection dials only the public address it checked.
        self._http = AsyncSignedClient(timeout_s=timeout_s, verify=verify,
                                       public_only=not allow_private,
                                       max_answer_bytes=RewardResponse.MAX_BYTES)
        # Enrolled clients' rows, read once: only a member's clip-bound announcement changes
        # one (``reread`` drops it; ``check`` re-reads before refusing a score).
        self._clients: dict[str, ClientRow] = {}
        # (client id, items, scores) of every answered query: the capture mode's log.
        self.on_scored = on_scored
        self._revoked: set[str] = set()

    def forget(self, client_id: str) -> None:
        """A revoked member: no further query goes to it (its items fail as refused), and its
        queued pull queries are withdrawn now, so whoever waits for them (the aligner's step,
        in this process or another on the same store) gets the failure at once, not at the
        timeout."""
        self._revoked.add(client_id)
        for query in self.store.pending_queries(client_id):
            self.store.answer_query(query.query_id, RewardAnswer(error=_REVOKED))
            self.answered(query.query_id)

    def answered(self, query_id: int) -> None:
        """Wake pull query ``query_id`` if it waits in this broker: its answer (or refusal) is
        in the store now. Safe from any thread (the answer route runs in a worker thread);
        nothing is kept for a query that does not wait here."""
        with self._waiting_lock:
            waiter = self._waiting.get(query_id)
        if waiter is not None:
            wake(*waiter)

    def reread(self, client_id: str) -> None:
        """Read ``client_id``'s row from the store again at its next query (it announced a
        new clip bound)."""
        self._clients.pop(client_id, None)

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._http.aclose()

    @staticmethod
    def _items(items: list[RewardItem], images: dict[str, ImageRef], cached: set[str],
               force: set[str]) -> RewardRequest:
        """The request as sent: the bytes of each image the member does not hold yet (or said
        it lacked), once per query."""
        out, sent = [], set()
        for item in items:
            digest = item.image_sha256
            if (digest not in cached or digest in force) and digest not in sent:
                sent.add(digest)
                item = item.model_copy(update={"image_b64": images[digest].b64()})
            out.append(item)
        return RewardRequest(items=out)

    def check(self, client_id: str, scores: list[float], n: int) -> None:
        """The one check of a member's scores, pushed or pulled (their schema already refused
        a non-finite one): ``n`` of them, each within the clip bound the member announced,
        so one member's scores cannot outweigh the others' in a mixture by leaving its own
        range; ``BrokerError`` names the problem. An answer is judged by the bound in force
        when it arrives; the store is read again before a refusal, since the announcement may
        have reached another server process than this one."""
        if len(scores) != n:
            raise BrokerError(f"client {client_id} returned {len(scores)} scores instead of {n} "
                              "scores")
        client = self._clients.get(client_id) or self.store.client(client_id)
        bound = None if client is None else client.clip_bound
        if bound is None or any(abs(s) > bound for s in scores):
            row = self.store.client(client_id)
            if row is not None:
                self._clients[client_id] = row
                bound = row.clip_bound
        if bound is None:
            raise BrokerError(f"client {client_id} announced no clip bound: its scores cannot "
                              "be checked")
        if any(abs(s) > bound for s in scores):
            raise BrokerError(f"client {client_id} returned a score outside its announced clip "
                              f"bound [-{bound:g}, {bound:g}]")

    async def query(self, client_id: str, images: Sequence[ImageRef], prompts: Sequence[str],
                    responses: Sequence[str]) -> list[float]:
        """Scores of the (image, prompt, response) triples from member ``client_id``
        (normalized and clipped by the member; checked here), in their order;
        ``RequestRefused`` when the member refuses, ``BrokerError`` when the query fails
        otherwise. A batch above the member's :attr:`~sdk.wire.RewardRequest.MAX_ITEMS` goes
        as several requests at once (its ``per_member`` slots still bound them); one failed
        part fails the batch."""
        client = self._clients.get(client_id) or self.store.client(client_id)
        if client is None or client_id in self._revoked:
            raise BrokerError(f"unknown client {client_id}")
        if client.role != "member":  # an aligner or auditor never answers reward queries
            raise BrokerError(f"{client_id} is not a member (role {client.role})")
        self._clients[client_id] = client
        cap = RewardRequest.MAX_ITEMS
        # Every part runs to its end (its bookkeeping done) before a failed one is raised.
        parts = await asyncio.gather(*(
            self._query(client_id, client, images[i:i + cap], prompts[i:i + cap],
                        responses[i:i + cap]) for i in range(0, len(prompts), cap)),
            return_exceptions=True)
        scores: list[float] = []
        for part in parts:
            if isinstance(part, BaseException):
                raise part
            scores += part
        return scores

    async def _query(self, client_id: str, client: ClientRow, images: Sequence[ImageRef],
                     prompts: Sequence[str], responses: Sequence[str]) -> list[float]:
        """One request's worth (at most the member's cap) of :meth:`query`."""
        items = [RewardItem(image_sha256=ref.sha256, prompt=p, response=r)
                 for ref, p, r in zip(images, prompts, responses, strict=True)]
        by_hash = {ref.sha256: ref for ref in images}
        # The fsync'ed bookkeeping (images kept for resends, the audit record) runs beside the
        # request, not before it: the client's scoring hides it, and it is durable before
        # ``query`` returns or raises.
        cached = await asyncio.to_thread(self.store.cached, client_id, list(by_hash))
        # An image the client holds was stored here before it was marked: only new ones go in.
        new = {h: ref.data for h, ref in by_hash.items() if h not in cached}
        record = asyncio.create_task(asyncio.to_thread(self._record, client_id, len(items), new))
        try:
            push = self.mode == "push" or (self.mode == "auto" and client.reward_url)
            if push:
                if not client.reward_url:
                    raise BrokerError(f"client {client_id} enrolled without a reward URL "
                                      "(push mode)")
                scores = await self._push(client_id, client.reward_url, items, by_hash, cached)
            else:
                scores = await self._pull(client_id, items, by_hash, cached)
        finally:
            await record
        # The new images, and any the client said it lacked (``_push``/``_pull`` took those
        # out of ``cached``): no write (and no lock) when it held every image already.
        sent = sorted(set(by_hash) - cached)
        if sent:  # off the event loop: a durable write waits for its fsync
            await asyncio.to_thread(self.store.mark_cached, client_id, sent)
        if self.on_scored is not None:
            self.on_scored(client_id, items, scores)
        return scores

    def _record(self, client_id: str, n_items: int, new: dict[str, bytes]) -> None:
        with self.store.transaction():  # one commit, one fsync
            if new:
                self.store.put_images(new)
            self.store.audit("server", "reward_query", client_id=client_id, items=n_items)

    async def _push(self, client_id: str, base_url: str, items: list[RewardItem],
                    images: dict[str, ImageRef], cached: set[str]) -> list[float]:
        deadline = time.monotonic() + self.timeout_s
        force: set[str] = set()
        for _ in range(2):  # at most one resend of the images the client lacks
            body = self._items(items, images, cached, force).model_dump_json().encode()
            self.bytes_sent += len(body)
            resp = await self._post(client_id, base_url, body, deadline)
            if resp.status_code == 409:
                force = set(_parsed(MissingImages, resp, client_id).missing)
                self.store.forget_cached(client_id, sorted(force))
                cached -= force
                continue
            if resp.status_code != 200:
                raise RequestRefused.of(resp, by=f"member {client_id}")
            timing = resp.headers.get("server-timing", "")
            self.last_server_timing = RewardResponse.timings(timing)
            scores = _parsed(RewardResponse, resp, client_id).scores
            self.check(client_id, scores, len(items))
            return scores
        raise BrokerError(f"client {client_id} still lacks images after a resend")

    async def _post(self, client_id: str, base_url: str, body: bytes,
                    deadline: float) -> httpx.Response:
        """The member's answer to ``body``, sent while one of its ``per_member`` slots is
        held, and sent again after each 429 once its ``Retry-After`` passed, as long as that
        comes before ``deadline``: the member refused for load, not for the query."""
        url = base_url.rstrip("/") + "/v1/reward"
        # Signed for the member, without its reward URL's path: the app sees the paths below
        # it. Each attempt is signed afresh (new nonce): a resend is no replay.
        auth = SignedAuth(self.key, SERVER_SENDER, recipient=client_id,
                          root=urlsplit(base_url).path)
        slot = self._slots.setdefault(client_id, asyncio.Semaphore(self.per_member))
        while True:
            if slot.locked():
                self.slot_waits += 1
                try:
                    await asyncio.wait_for(slot.acquire(), max(deadline - time.monotonic(), 0))
                except asyncio.TimeoutError:
                    raise BrokerError(f"client {client_id}: no free slot of its {self.per_member}"
                                      f" (reward_concurrency_per_member) within "
                                      f"{self.timeout_s:g} s") from None
            else:
                await slot.acquire()  # free: returns at once
            try:
                resp = await self._http.request("POST", url, body, media="application/json",
                                                auth=auth)
            except httpx.DecodingError as exc:  # its answer: too large, or compressed
                raise BrokerError(f"client {client_id}: {exc}") from None
            except httpx.HTTPError as exc:
                # One text for a refused address, a closed port, a timeout and a TLS failure:
                # the caller (an auditor, an aligner) learns nothing of what listens there.
                _log.warning("reward query to %s at %s did not connect: %r", client_id,
                             base_url, exc)
                raise BrokerError(f"client {client_id} could not be reached") from None
            finally:
                slot.release()
            if resp.status_code != 429:
                return resp
            await self._wait_to_resend(RequestRefused.of(resp, by=f"member {client_id}"),
                                       client_id, deadline)

    async def _wait_to_resend(self, busy: RequestRefused, client_id: str,
                              deadline: float) -> None:
        """Wait out a member's refusal for load before its query goes again, or raise it when
        its ``Retry-After`` passes ``deadline``: the member refused for load, not the query."""
        if time.monotonic() + busy.wait_s > deadline:
            _log.warning("reward query to %s: its Retry-After (%g s) passes the query's "
                         "deadline (%g s): not sent again", client_id, busy.wait_s,
                         self.timeout_s)
            raise busy
        self.resends += 1
        await asyncio.sleep(busy.wait_s)

    async def _pull(self, client_id: str, items: list[RewardItem],
                    images: dict[str, ImageRef], cached: set[str]) -> list[float]:
        deadline = time.monotonic() + self.timeout_s
        force: set[str] = set()
        row: QueuedQuery | None = None
        while True:
            if row is None:  # a new query: the images the member lacks now
                queued = self._items(items, images, cached, force)
                row = await asyncio.to_thread(self.store.queue_query, client_id, queued.items)
            self.bytes_sent += row.size  # what the member fetches
            query_id = row.query_id
            if self.on_queue is not None:
                self.on_queue(client_id)
            # Checked where it arrived (the answer route calls ``check``), stored as parsed.
            answer = await self._answer(client_id, query_id, deadline)
            if answer.error and answer.retry_after_s is not None:
                # Refused for load: the 429 a push member's POST /v1/reward would have given.
                await self._wait_to_resend(
                    RequestRefused("POST", "/v1/reward", 429, answer.error,
                                   retry_after=answer.retry_after_s, by=f"member {client_id}"),
                    client_id, deadline)
                # The same row again: a member that keeps refusing adds no copy of its items.
                await asyncio.to_thread(self.store.requeue_query, query_id)
                continue
            if answer.error:
                raise BrokerError(f"client {client_id} refused query {query_id}: "
                                  f"{answer.error}")
            if not answer.missing:
                return answer.scores
            if force:  # the images it lacked were sent with this query
                raise BrokerError(f"client {client_id} still lacks images after a resend")
            force = set(answer.missing)
            self.store.forget_cached(client_id, sorted(force))
            cached -= force
            row = None

    async def _answer(self, client_id: str, query_id: int, deadline: float) -> RewardAnswer:
        """Query ``query_id``'s answer once stored, read again each time :meth:`answered`
        wakes it and every ``poll_s`` otherwise; withdrawn (``BrokerError``) at ``deadline``.
        The waiter is registered before each read, so an answer stored between the read and
        the wait still wakes it."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                woken = loop.create_future()
                with self._waiting_lock:
                    self._waiting[query_id] = (loop, woken)
                self.pull_reads += 1
                # Off the event loop: a commit may hold the store.
                row = await asyncio.to_thread(self.store.query, query_id)
                if row is not None and row.answer is not None:
                    return row.answer
                if client_id in self._revoked:  # queued just as it was revoked
                    self.store.answer_query(query_id, RewardAnswer(error=_REVOKED))
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    self.store.answer_query(query_id, RewardAnswer(error=_LATE))  # withdrawn
                    raise BrokerError(f"client {client_id} did not answer query {query_id} "
                                      f"within {self.timeout_s:g} s")
                await asyncio.wait([woken], timeout=min(self.poll_s, left))
        finally:
            with self._waiting_lock:
                self._waiting.pop(query_id, None)
