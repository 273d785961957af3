"""Rewards from the consortium server over REST: the aligner's side of ``POST /v1/rewards``.

The GRPO job holds the policy and an ``aligner`` identity key, nothing of the server's: it sends
(image, prompt, response) batches, signed, and gets one scalar per completion; the router, its
online state and which member judged what stay on the server. :class:`RestRewardFunction` is
the async reward function for trl's GRPOTrainer (every rank calls it for its own completions);
:class:`RestFeedbackCallback` posts each logged loss (rank 0 only) as the online router's
feedback.
"""

from __future__ import annotations

import asyncio
import math
import ssl
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from sdk.alignment._errors import DEFAULT_MAX_FAILED_FRACTION, AlignmentError, RewardShapeError
from sdk.alignment._reward_function import completion_batch
from sdk.router import image_ref
from sdk.wire import (
    AlignerFeedback,
    AlignerFeedbackAck,
    AlignerItem,
    AlignerRequest,
    AlignerResponse,
    AsyncSignedClient,
    EnrollRequest,
    EnrollResponse,
    ImageRef,
    SignedClient,
    load_private_key,
)

__all__ = ["RestFeedbackCallback", "RestRewardError", "RestRewardFunction", "enroll_identity"]


class RestRewardError(AlignmentError):
    """The reward path cannot go on: the server still lacks images after their resend, or
    too many of a step's completions got the failure value. (A refused request is
    :class:`~sdk.wire.RequestRefused`.)"""


def enroll_identity(server_url: str, key: Ed25519PrivateKey, *, name: str, token: str,
                    verify: ssl.SSLContext | bool = True, timeout_s: float = 30.0
                    ) -> EnrollResponse:
    """Enroll ``name`` with its one-time token (a retry after success returns the same id);
    :class:`~sdk.wire.RequestRefused` when the server refuses."""
    body = EnrollRequest.of(key, name=name, token=token)
    with SignedClient(server_url, verify=verify, timeout_s=timeout_s) as client:
        return client.post("/v1/enroll", body, EnrollResponse)


class RestRewardFunction:
    """``await f(prompts=, completions=, **columns) -> list[float]`` from ``POST /v1/rewards``.

    Images go by content hash; their bytes only when the server says it lacks them (one
    resend). An image of the dataset column that is an :class:`~sdk.wire.ImageRef` travels
    as it is, byte for byte, to the member; a PIL image is encoded once per call as PNG.
    Batches over ``max_items`` are split. ``history`` keeps the mean reward per call,
    ``failed`` the completions the server scored with its failure value (a member timed out,
    refused or answered out of bound), ``judge_counts`` the completions per judging member
    when the server's settings reveal judges. A call (one step's completions on this rank)
    in which more than ``max_failed_fraction`` of the completions failed raises
    :class:`RestRewardError`: GRPO would otherwise learn the failure value. A request the
    server refuses raises :class:`~sdk.wire.RequestRefused`.
    """

    def __init__(self, server_url: str, key: Ed25519PrivateKey | Path, sender: str, *,
                 method: str = "mor", verify: ssl.SSLContext | bool = True,
                 timeout_s: float = 300.0, max_items: int = 256,
                 max_failed_fraction: float = DEFAULT_MAX_FAILED_FRACTION) -> None:
        if not 0.0 <= max_failed_fraction <= 1.0:
            raise ValueError(f"max_failed_fraction must lie in [0, 1], not {max_failed_fraction}")
        self.max_failed_fraction = max_failed_fraction
        self.url = server_url.rstrip("/")
        self.key = key if isinstance(key, Ed25519PrivateKey) else load_private_key(key)
        self.sender, self.method, self.verify = sender, method, verify
        self.timeout_s, self.max_items = timeout_s, max_items
        self.history: list[float] = []
        self.failed = 0
        self.judge_counts: dict[str, int] = {}  # per member id, when the server reveals judges
        self.requests = 0
        self._earlier_bytes = 0  # sent by the clients of earlier event loops
        self._http: AsyncSignedClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.__name__ = f"reward_{method}"  # trl logs the reward column under this name

    def trainer_callbacks(self) -> list[TrainerCallback]:
        """The feedback poster, for the online selections (MoR)."""
        return [RestFeedbackCallback(self)] if self.method == "mor" else []

    def _client(self) -> AsyncSignedClient:
        # trl runs async reward functions on its own event loop thread; a client belongs to one
        # loop, so a new loop (another trainer) gets a new client.
        loop = asyncio.get_running_loop()
        if self._http is None or self._loop is not loop:
            self._earlier_bytes = self.bytes_sent
            self._http = AsyncSignedClient(self.url, key=self.key, sender=self.sender,
                                           verify=self.verify, timeout_s=self.timeout_s)
            self._loop = loop
        return self._http

    @property
    def bytes_sent(self) -> int:
        """Request bytes sent to the server so far."""
        return self._earlier_bytes + (0 if self._http is None else self._http.bytes_sent)

    async def _post(self, payload: dict[str, Any]) -> AlignerResponse:
        self.requests += 1
        return await self._client().post("/v1/rewards", payload, AlignerResponse)

    async def _batch(self, items: list[AlignerItem], step: int,
                     refs: dict[str, ImageRef]) -> list[float]:
        request = AlignerRequest(items=items, method=self.method, step=step)
        out = await self._post(request.model_dump(exclude_none=True))
        if out.missing:  # the server's image cache lacks these: send their bytes once
            lacking = set(out.missing)
            resend = [i.model_copy(update={"image_b64": refs[i.image_sha256].b64()})
                      if i.image_sha256 in lacking else i for i in items]
            out = await self._post(AlignerRequest(items=resend, method=self.method,
                                                  step=step).model_dump(exclude_none=True))
            if out.missing:
                raise RestRewardError(f"the server still lacks images {out.missing[:3]}")
        if len(out.rewards) != len(items):  # the aligner's one check of the server's answer
            raise RewardShapeError(f"the server returned {len(out.rewards)} rewards for "
                                   f"{len(items)} completions")
        self.failed += out.failed
        for judge in out.judges or []:
            if judge:
                self.judge_counts[judge] = self.judge_counts.get(judge, 0) + 1
        return out.rewards

    async def __call__(self, prompts: Sequence[Any], completions: Sequence[Any],
                       completion_ids: Sequence[Sequence[int]] | None = None,
                       trainer_state: TrainerState | None = None,
                       **columns: Any) -> list[float]:
        """One reward per completion, from the server."""
        batch = completion_batch(prompts, completions, columns)
        n = len(batch)
        options = columns.get("options") or [[] for _ in range(n)]
        refs: dict[int, ImageRef] = {}  # by the image object: GRPO repeats one per completion
        items = []
        for image, text, response, opts in zip(batch.images, batch.prompts, batch.responses,
                                               options, strict=True):
            if image is None:
                raise RewardShapeError("the REST reward path needs an image for every query")
            ref = refs.get(id(image)) or refs.setdefault(id(image), image_ref(image))
            items.append(AlignerItem(image_sha256=ref.sha256, prompt=text, response=response,
                                     options=[str(o) for o in opts or []]))
        by_hash = {ref.sha256: ref for ref in refs.values()}
        step = trainer_state.global_step if trainer_state is not None else 0
        rewards: list[float] = []
        failed_before = self.failed
        for start in range(0, n, self.max_items):
            rewards += await self._batch(items[start:start + self.max_items], step, by_hash)
        self._check_failed(self.failed - failed_before, n, step)
        if rewards:
            self.history.append(sum(rewards) / len(rewards))
        return rewards


    def _check_failed(self, failed: int, n: int, step: int) -> None:
        """Stop the job when more than ``max_failed_fraction`` of a step's ``n`` completions
        got the server's failure value."""
        if n and failed > self.max_failed_fraction * n:
            raise RestRewardError(
                f"{failed} of {n} completions of step {step} got the server's failure value "
                f"(their members timed out, refused or answered outside their bound): more "
                f"than max_failed_fraction = {self.max_failed_fraction:g}, and GRPO would "
                "learn the failure value. See the server's log and `fedmor members list`; to "
                "tolerate more, raise max_failed_fraction in the fedmor align config (1 never "
                "stops)")


def _finite(value: Any) -> float | None:
    """A logged figure for the progress record, or None (absent or not finite)."""
    try:
        found = float(value)
    except (TypeError, ValueError):
        return None
    return found if math.isfinite(found) else None


class RestFeedbackCallback(TrainerCallback):
    """On each log carrying ``loss`` (rank 0 only), post ``{step, loss}`` to
    ``/v1/rewards/feedback``; ``history`` holds ``(step, loss, r_t, pairs)`` per applied
    update, as :class:`~sdk.alignment.RouterFeedbackCallback` does in one process."""

    def __init__(self, rewards: RestRewardFunction) -> None:
        self.rewards = rewards
        self.history: list[tuple[int, float, float | None, int]] = []
        # One id per training run, so a later run's step 1 is not taken for a repeat (rank 0
        # alone posts feedback: no other rank needs to agree on it).
        self.run = uuid.uuid4().hex
        # One connection for the whole run: a client per post (httpx.post) would build a new
        # TLS context each step, which can cost more than a small policy's whole step.
        self._http: SignedClient | None = None

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
               logs: dict[str, float] | None = None, **kwargs: Any) -> None:
        """Send the step's loss; the server applies it once per step."""
        if not state.is_world_process_zero or not logs or "loss" not in logs:
            return
        r = self.rewards
        fb = AlignerFeedback(step=state.global_step, loss=float(logs["loss"]), run=self.run,
                             reward=_finite(logs.get("reward")), kl=_finite(logs.get("kl")))
        if self._http is None:
            self._http = SignedClient(r.url, key=r.key, sender=r.sender, verify=r.verify,
                                      timeout_s=r.timeout_s)
        ack = self._http.post("/v1/rewards/feedback", fb.model_dump(exclude_none=True),
                              AlignerFeedbackAck)
        if ack.applied:
            self.history.append((ack.step, fb.loss, ack.feedback, ack.pairs))

    def on_train_end(self, args: TrainingArguments, state: TrainerState,
                     control: TrainerControl, **kwargs: Any) -> None:
        """Close the run's connection."""
        if self._http is not None:
            self._http.close()
            self._http = None
