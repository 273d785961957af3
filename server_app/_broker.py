"""The reward-query broker (stage C): ask a member to score a batch, by push or pull.

Push: the server POSTs ``/v1/reward`` to the client app, signed with the server's identity.
Pull: the query waits in the store until the client fetches ``/v1/reward/pending`` and answers.
Each item goes as one :class:`~sdk.wire.RewardItem` made from its :class:`~sdk.wire.ImageRef`:
the image's bytes exactly as the aligner sent them, once per member, then only their sha256; a
member that lacks an image says so (409 / ``missing``) and the broker resends it. The member's
answer is checked here, once (count, finite, its announced bound).

:class:`BrokerRewardSource` is the broker as the selection layer's ``RewardSource``: the one
place a selection's client index becomes a member's client id.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import ssl
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sdk.wire import SERVER_SENDER, AsyncSignedClient, ImageRef, RewardItem, SignedAuth
from server_app._store import Store

if TYPE_CHECKING:
    from PIL import Image

__all__ = ["BrokerError", "BrokerRewardSource", "OnScored", "RewardBroker"]

_REVOKED = "withdrawn: the member was revoked"
_log = logging.getLogger("fedmor.server.rewards")

OnScored = Callable[[str, list[RewardItem], list[float]], None]
"""Told of every answered query: (member client id, its items, their checked scores)."""


class BrokerError(RuntimeError):
    """A reward query could not be answered (client unreachable, refused, timed out)."""


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
                 poll_s: float = 0.05, verify: ssl.SSLContext | bool = True, mode: str = "auto",
                 on_queue: Callable[[str], None] | None = None,
                 on_scored: OnScored | None = None) -> None:
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
    def _items(items: list[RewardItem], images: dict[str, ImageRef], cached: set[str],
               force: set[str]) -> list[dict[str, Any]]:
        """The items as sent: the bytes of each image the member does not hold yet (or said it
        lacked), once per query."""
        out, sent = [], set()
        for item in items:
            digest = item.image_sha256
            if (digest not in cached or digest in force) and digest not in sent:
                sent.add(digest)
                item = item.model_copy(update={"image_b64": images[digest].b64()})
            out.append(item.model_dump())
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

    async def query(self, client_id: str, images: Sequence[ImageRef], prompts: Sequence[str],
                    responses: Sequence[str]) -> list[float]:
        """Scores of the (image, prompt, response) triples from member ``client_id``
        (normalized and clipped by the member; checked here)."""
        client = self._clients.get(client_id) or self.store.client(client_id)
        if client is None or client_id in self._revoked:
            raise BrokerError(f"unknown client {client_id}")
        if client["role"] != "member":  # an aligner or auditor never answers reward queries
            raise BrokerError(f"{client_id} is not a member (role {client['role']})")
        self._clients[client_id] = client
        if not prompts:
            return []
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
            push = self.mode == "push" or (self.mode == "auto" and client["reward_url"])
            if push:
                if not client["reward_url"]:
                    raise BrokerError(f"client {client_id} enrolled without a reward URL "
                                      "(push mode)")
                scores = await self._push(client_id, str(client["reward_url"]), items,
                                           by_hash, cached)
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
        force: set[str] = set()
        for _ in range(2):  # at most one resend of the images the client lacks
            body = json.dumps({"items": self._items(items, images, cached, force)}).encode()
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

    async def _pull(self, client_id: str, items: list[RewardItem],
                    images: dict[str, ImageRef], cached: set[str]) -> list[float]:
        force: set[str] = set()
        for _ in range(2):
            query_id = await asyncio.to_thread(self.store.queue_query, client_id,
                                               self._items(items, images, cached, force))
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


class BrokerRewardSource:
    """The broker as a :class:`~sdk.alignment.RewardSource`: client index k is member
    ``client_ids[k]`` (the one mapping from a selection's arm to a member). Images must be
    :class:`~sdk.wire.ImageRef` (passed on unchanged). With ``failure`` set, a member that
    times out or refuses gives that value for its items (counted in ``failed``) instead of
    failing the batch; ``judges`` keeps who scored each (sha256, prompt, response)."""

    def __init__(self, broker: RewardBroker, client_ids: Sequence[str], *,
                 failure: float | None = None) -> None:
        if not client_ids:
            raise ValueError("BrokerRewardSource needs at least one member")
        self.broker, self.client_ids, self.failure = broker, list(client_ids), failure
        self.failed = 0
        self.judges: dict[tuple[str, str, str], list[str]] = {}

    @property
    def num_clients(self) -> int:
        """Number of members K."""
        return len(self.client_ids)

    def reset(self) -> None:
        """Forget the failures and judges counted so far (one aligner batch at a time)."""
        self.failed, self.judges = 0, {}

    def judge(self, image: ImageRef, prompt: str, response: str) -> str:
        """The member that scored this item (the next one for a repeated item); ``""`` when no
        member was asked or it failed."""
        found = self.judges.get((image.sha256, prompt, response))
        return found.pop(0) if found else ""

    async def score(self, client_index: int, images: Sequence[Image.Image | ImageRef | None],
                    prompts: Sequence[str], responses: Sequence[str]) -> list[float]:
        """Member ``client_ids[client_index]``'s checked scores (or the failure value)."""
        if not 0 <= client_index < len(self.client_ids):
            raise IndexError(f"client index {client_index} out of range "
                             f"0..{len(self.client_ids) - 1}")
        refs = [i for i in images if isinstance(i, ImageRef)]
        if len(refs) != len(images):
            raise TypeError("the broker sends image references (sdk.wire.ImageRef, or "
                            "sdk.router.image_ref of a PIL image) for every item")
        client_id = self.client_ids[client_index]
        try:
            scores = await self.broker.query(client_id, refs, prompts, responses)
        except BrokerError as exc:
            if self.failure is None:
                raise
            _log.warning("reward query to member %s failed: %s", client_id, exc)
            self.failed += len(prompts)
            scores, client_id = [self.failure] * len(prompts), ""
        for ref, prompt, response in zip(refs, prompts, responses, strict=True):
            self.judges.setdefault((ref.sha256, prompt, response), []).append(client_id)
        return scores
