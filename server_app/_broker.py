"""The reward-query broker (stage C): ask client k to score a batch, by push or pull.

Push: the server POSTs ``/v1/reward`` to the client app, signed with the server's identity.
Pull: the query waits in the store until the client fetches ``/v1/reward/pending`` and answers.
Images are content-addressed: bytes travel once per client, then only their sha256; a client
that lacks an image says so (409 / ``missing``) and the broker resends it.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sdk.wire import SERVER_SENDER, AsyncSignedClient, SignedAuth
from server_app._store import Store

__all__ = ["BrokerError", "QueryItem", "RewardBroker"]

_REVOKED = "withdrawn: the member was revoked"


class BrokerError(RuntimeError):
    """A reward query could not be answered (client unreachable, refused, timed out)."""


@dataclass(frozen=True)
class QueryItem:
    """One (image, prompt, response) to score; ``image`` is the encoded file (PNG, JPEG)."""

    image: bytes
    prompt: str
    response: str

    @functools.cached_property
    def image_sha256(self) -> str:
        """Content address of the image (hashed once: a query reads it four times)."""
        return hashlib.sha256(self.image).hexdigest()


def server_timing(header: str) -> dict[str, float]:
    """``{"score": 12.5, ...}`` from a ``Server-Timing`` header; entries without a valid
    ``dur`` are left out (the header is informative, never trusted for anything)."""
    out: dict[str, float] = {}
    for entry in header.split(","):
        name, *params = (part.strip() for part in entry.split(";"))
        for param in params:
            key, _, value = param.partition("=")
            if name and key == "dur":
                try:
                    dur = float(value)
                except ValueError:
                    continue
                if math.isfinite(dur):
                    out[name] = dur
    return out


class RewardBroker:
    """Routes reward queries to clients; ``mode`` is ``push``, ``pull`` or ``auto`` (push when
    the client enrolled with a reward URL)."""

    def __init__(self, store: Store, key: Ed25519PrivateKey, *, timeout_s: float = 60.0,
                 poll_s: float = 0.05, verify: Any = True, mode: str = "auto",
                 on_queue: Callable[[str], None] | None = None,
                 on_scored: Callable[[str, list[QueryItem], list[float]], None] | None = None
                 ) -> None:
        if mode not in ("push", "pull", "auto"):
            raise ValueError(f"broker mode must be push, pull or auto, not {mode!r}")
        self.store = store
        self.key = key
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self.mode = mode
        # Called with the client id: wakes that client's long-polling ``/v1/work`` (pull mode).
        self.on_queue = on_queue
        self.bytes_sent = 0  # request bytes of push queries, for the benchmark
        # The last push answer's ``Server-Timing`` in ms (``score``, ``app``): where a query's
        # time went, for the benchmark; empty when the client sent none.
        self.last_server_timing: dict[str, float] = {}
        self._http = AsyncSignedClient(timeout_s=timeout_s, verify=verify)
        # Enrolled clients' rows, read once: only a member's clip-bound announcement changes
        # one (``reread`` drops it; ``_check`` re-reads before refusing a score).
        self._clients: dict[str, dict[str, Any]] = {}
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
            self.store.answer_query(query["query_id"], {"error": _REVOKED})

    def reread(self, client_id: str) -> None:
        """Read ``client_id``'s row from the store again at its next query (it announced a
        new clip bound)."""
        self._clients.pop(client_id, None)

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._http.aclose()

    @staticmethod
    def _items(items: list[QueryItem], cached: set[str],
               force: set[str] | None = None) -> list[dict[str, Any]]:
        out = []
        for item in items:
            digest = item.image_sha256
            send = digest not in cached or (force is not None and digest in force)
            out.append({"image_sha256": digest, "prompt": item.prompt, "response": item.response,
                        "image_b64": base64.b64encode(item.image).decode() if send else None})
        return out

    def _check(self, scores: object, n: int, client_id: str) -> list[float]:
        if not isinstance(scores, list) or len(scores) != n:
            raise BrokerError(f"client {client_id} returned {scores!r:.80} instead of {n} scores")
        try:
            out = [float(s) for s in scores]
        except (TypeError, ValueError):
            raise BrokerError(f"client {client_id} returned a score that is not a number") \
                from None
        if not all(math.isfinite(s) for s in out):
            raise BrokerError(f"client {client_id} returned a non-finite score")
        # The bound the member announced (at enrollment or since): one member's scores cannot
        # outweigh the others' in a mixture by leaving its own range. An answer is judged by
        # the bound in force when it arrives; the store is read again before a refusal, since
        # the announcement may have reached another server process than this one.
        bound = self._clients[client_id].get("clip_bound")
        if bound is None or any(abs(s) > bound for s in out):
            row = self.store.client(client_id)
            if row is not None:
                self._clients[client_id] = row
                bound = row.get("clip_bound")
        if bound is None:
            raise BrokerError(f"client {client_id} announced no clip bound: its scores cannot "
                              "be checked")
        if any(abs(s) > bound for s in out):
            raise BrokerError(f"client {client_id} returned a score outside its announced clip "
                              f"bound [-{bound:g}, {bound:g}]")
        return out

    async def query(self, client_id: str, items: list[QueryItem]) -> list[float]:
        """Scores of ``items`` from ``client_id`` (normalized and clipped by the client)."""
        client = self._clients.get(client_id) or self.store.client(client_id)
        if client is None or client_id in self._revoked:
            raise BrokerError(f"unknown client {client_id}")
        if client["role"] != "member":  # an aligner or auditor never answers reward queries
            raise BrokerError(f"{client_id} is not a member (role {client['role']})")
        self._clients[client_id] = client
        if not items:
            return []
        # The fsync'ed bookkeeping (images kept for resends, the audit record) runs beside the
        # request, not before it: the client's scoring hides it, and it is durable before
        # ``query`` returns or raises.
        cached = await asyncio.to_thread(self.store.cached, client_id,
                                         [item.image_sha256 for item in items])
        # An image the client holds was stored here before it was marked: only new ones go in.
        new = [item for item in items if item.image_sha256 not in cached]
        record = asyncio.create_task(asyncio.to_thread(self._record, client_id, len(items), new))
        try:
            push = self.mode == "push" or (self.mode == "auto" and client["reward_url"])
            if push:
                if not client["reward_url"]:
                    raise BrokerError(f"client {client_id} enrolled without a reward URL "
                                      "(push mode)")
                scores = await self._push(client_id, str(client["reward_url"]), items,
                                           cached)
            else:
                scores = await self._pull(client_id, items, cached)
        finally:
            await record
        # The new images, and any the client said it lacked (``_push``/``_pull`` took those
        # out of ``cached``): no write (and no lock) when it held every image already.
        sent = sorted({item.image_sha256 for item in items} - cached)
        if sent:  # off the event loop: a durable write waits for its fsync
            await asyncio.to_thread(self.store.mark_cached, client_id, sent)
        if self.on_scored is not None:
            self.on_scored(client_id, items, scores)
        return scores

    def _record(self, client_id: str, n_items: int, new: list[QueryItem]) -> None:
        with self.store.transaction():  # one commit, one fsync
            if new:
                self.store.put_images({item.image_sha256: item.image for item in new})
            self.store.audit("server", "reward_query", client_id=client_id, items=n_items)

    async def _push(self, client_id: str, base_url: str, items: list[QueryItem],
                    cached: set[str]) -> list[float]:
        force: set[str] = set()
        for _ in range(2):  # at most one resend of the images the client lacks
            body = json.dumps({"items": self._items(items, cached, force)}).encode()
            # Signed for the member, without its reward URL's path: the app sees the paths
            # below it.
            auth = SignedAuth(self.key, SERVER_SENDER, recipient=client_id,
                              root=urlsplit(base_url).path)
            self.bytes_sent += len(body)
            try:
                resp = await self._http.request("POST", base_url.rstrip("/") + "/v1/reward",
                                                body, media="application/json", auth=auth)
            except httpx.HTTPError as exc:
                raise BrokerError(f"client {client_id} unreachable at {base_url}: {exc}") from exc
            if resp.status_code == 409 and "missing" in resp.json():
                force = set(resp.json()["missing"])
                self.store.forget_cached(client_id, sorted(force))
                cached -= force
                continue
            if resp.status_code != 200:
                raise BrokerError(f"client {client_id} answered {resp.status_code}: "
                                  f"{resp.text[:200]}")
            self.last_server_timing = server_timing(resp.headers.get("server-timing", ""))
            return self._check(resp.json().get("scores"), len(items), client_id)
        raise BrokerError(f"client {client_id} still lacks images after a resend")

    async def _pull(self, client_id: str, items: list[QueryItem],
                    cached: set[str]) -> list[float]:
        force: set[str] = set()
        for _ in range(2):
            query_id = await asyncio.to_thread(self.store.queue_query, client_id,
                                               self._items(items, cached, force))
            if self.on_queue is not None:
                self.on_queue(client_id)
            deadline = time.monotonic() + self.timeout_s
            while True:  # each read off the event loop: a commit may hold the store
                row = await asyncio.to_thread(self.store.query, query_id)
                if row is not None and row["status"] == "answered":
                    break
                if client_id in self._revoked:  # queued just as it was revoked
                    self.store.answer_query(query_id, {"error": _REVOKED})
                    continue
                if time.monotonic() > deadline:
                    self.store.answer_query(query_id, [])  # withdraw it
                    raise BrokerError(f"client {client_id} did not answer query {query_id} "
                                      f"within {self.timeout_s:g} s")
                await asyncio.sleep(self.poll_s)
            answer = json.loads(row["scores"])
            if isinstance(answer, dict) and answer.get("error"):
                raise BrokerError(f"client {client_id} refused query {query_id}: "
                                  f"{answer['error']}")
            if isinstance(answer, dict) and answer.get("missing"):
                force = set(answer["missing"])
                self.store.forget_cached(client_id, sorted(force))
                cached -= force
                continue
            return self._check(answer, len(items), client_id)
        raise BrokerError(f"client {client_id} still lacks images after a resend")
