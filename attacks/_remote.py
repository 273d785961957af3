"""A membership-inference scorer that queries a live client app's ``POST /v1/reward``.

It speaks as the consortium server would (the honest-but-curious party that may query a
client): every request is signed with the server's Ed25519 key, each image travels once and then
by hash, and every scored response counts against the app's query budget, exactly as a real
attacker's queries would (HTTP 429 when the budget runs out).
"""

from __future__ import annotations

import base64
import hashlib
import io
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from attacks._errors import AttackError

if TYPE_CHECKING:
    from sdk.wire import SignedClient

__all__ = ["RemoteRewardScorer", "RewardItemScorer"]

_PATH = "/v1/reward"


class RewardItemScorer:
    """``scorer(pairs) -> margins (n,)`` from ``RewardRequest`` items, two per pair (chosen,
    rejected), each image sent once and then by hash: subclasses deliver a batch of items
    (``_post``) and get one score per item. ``items_sent`` counts the scored items."""

    def __init__(self, *, batch_pairs: int = 64) -> None:
        self._batch = batch_pairs
        self._sent: set[str] = set()  # image hashes the scorer already holds
        self.items_sent = 0

    def _post(self, items: list[dict[str, Any]]) -> list[float]:
        raise NotImplementedError

    def _image(self, image: Any) -> tuple[str, str | None]:
        buf = io.BytesIO()
        image.save(buf, format="PNG")
        data = buf.getvalue()
        digest = hashlib.sha256(data).hexdigest()
        if digest in self._sent:
            return digest, None
        return digest, base64.b64encode(data).decode("ascii")

    def __call__(self, pairs: Sequence[Any]) -> np.ndarray:
        """Margins score(x, chosen) - score(x, rejected), shape (len(pairs),)."""
        out: list[float] = []
        for start in range(0, len(pairs), self._batch):
            items: list[dict[str, Any]] = []
            new: list[str] = []
            for p in pairs[start : start + self._batch]:
                digest, b64 = self._image(p.image)
                for response in (p.chosen, p.rejected):
                    items.append(
                        {
                            "image_sha256": digest,
                            "image_b64": b64,
                            "prompt": p.prompt,
                            "response": response,
                        }
                    )
                    if b64 is not None:
                        new.append(digest)
                        b64 = None  # once per request is enough
            scores = self._post(items)  # (2 * batch,) chosen, rejected interleaved
            self._sent.update(new)
            out += [c - r for c, r in zip(scores[0::2], scores[1::2], strict=True)]
        return np.asarray(out, dtype=np.float64)


class RemoteRewardScorer(RewardItemScorer):
    """A :class:`RewardItemScorer` through ``/v1/reward``. ``http`` is an ``httpx.Client``
    with the app's ``base_url`` (an ASGI test client works too) or a ``SignedClient`` whose
    connections it shares; ``recipient`` is the member's client id, which every signed query
    names. ``items_sent`` counts what the app's budget was charged. ``path``: another endpoint of the same contract, e.g. the server's
    ``/v1/audit/members/{name}/reward`` for an auditor (``sender``: its client id,
    ``recipient``: ``server``)."""

    def __init__(
        self,
        http: httpx.Client | SignedClient,
        key: Ed25519PrivateKey,
        *,
        recipient: str,
        sender: str = "server",
        batch_pairs: int = 64,
        path: str = _PATH,
    ) -> None:
        # The wire contract (it imports fastapi): only when a live attack runs.
        from sdk.wire import SignedClient

        super().__init__(batch_pairs=batch_pairs)
        self._client = SignedClient(key=key, sender=sender, recipient=recipient, http=(
            http.http if isinstance(http, SignedClient) else http))
        self._path = path

    def _post(self, items: list[dict[str, Any]]) -> list[float]:
        """The scores of ``items``; :class:`~sdk.wire.RequestRefused` when the app refuses."""
        from sdk.wire import RewardResponse

        answer = self._client.post(self._path, {"items": items}, RewardResponse)
        self.items_sent += len(items)
        scores = answer.scores
        if len(scores) != len(items):
            raise AttackError(f"{self._path} returned {len(scores)} scores for {len(items)} items")
        return scores
