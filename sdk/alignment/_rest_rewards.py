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
import base64
import hashlib
import json
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from sdk.alignment._broker_source import PngCache
from sdk.alignment._errors import AlignmentError, RewardShapeError
from sdk.alignment._reward_function import _images, message_text
from sdk.wire import (
    AlignerFeedback,
    AlignerFeedbackAck,
    AlignerItem,
    AlignerRequest,
    AlignerResponse,
    EnrollRequest,
    EnrollResponse,
    load_private_key,
    public_key_b64,
    sign_headers,
)

__all__ = ["RestFeedbackCallback", "RestRewardError", "RestRewardFunction", "enroll_identity"]


class RestRewardError(AlignmentError):
    """The server refused a reward or feedback request (the status and its detail)."""


def enroll_identity(server_url: str, key: Ed25519PrivateKey, *, name: str, token: str,
                    verify: Any = True, timeout_s: float = 30.0) -> EnrollResponse:
    """Enroll ``name`` with its one-time token (a retry after success returns the same id)."""
    body = EnrollRequest(name=name, token=token, public_key=public_key_b64(key))
    resp = httpx.post(f"{server_url.rstrip('/')}/v1/enroll", json=body.model_dump(),
                      verify=verify, timeout=timeout_s)
    if resp.status_code != 200:
        raise RestRewardError(f"enrollment of {name!r} refused ({resp.status_code}): "
                              f"{resp.text[:300]}")
    return EnrollResponse.model_validate(resp.json())


def _signed(key: Ed25519PrivateKey, sender: str, path: str,
            payload: Any) -> tuple[bytes, dict[str, str]]:
    """(body, headers) of one signed JSON POST: the same for the async and the sync client."""
    body = json.dumps(payload, separators=(",", ":")).encode()
    headers = sign_headers(key, sender=sender, method="POST", path=path, body=body)
    return body, headers | {"content-type": "application/json"}


def _checked(resp: httpx.Response, what: str) -> Any:
    if resp.status_code != 200:
        try:
            detail = resp.json().get("detail", resp.text)
        except ValueError:
            detail = resp.text
        raise RestRewardError(f"{what} refused by the server ({resp.status_code}): "
                              f"{str(detail)[:300]}")
    return resp.json()


class RestRewardFunction:
    """``await f(prompts=, completions=, **columns) -> list[float]`` from ``POST /v1/rewards``.

    Images go by content hash; their PNG bytes only when the server says it lacks them (one
    resend). Batches over ``max_items`` are split. ``history`` keeps the mean reward per call,
    ``failed`` the completions the server scored with its failure value (a member timed out
    or refused), ``judge_counts`` the completions per judging member when the server's
    settings reveal judges.
    """

    def __init__(self, server_url: str, key: Ed25519PrivateKey | Path, sender: str, *,
                 method: str = "mor", verify: Any = True, timeout_s: float = 300.0,
                 max_items: int = 256) -> None:
        self.url = server_url.rstrip("/")
        self.key = key if isinstance(key, Ed25519PrivateKey) else load_private_key(key)
        self.sender, self.method, self.verify = sender, method, verify
        self.timeout_s, self.max_items = timeout_s, max_items
        self.history: list[float] = []
        self.failed = 0
        self.judge_counts: dict[str, int] = {}  # per member id, when the server reveals judges
        self.requests = 0
        self.bytes_sent = 0
        self._png = PngCache()
        self._http: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.__name__ = f"reward_{method}"  # trl logs the reward column under this name

    def trainer_callbacks(self) -> list[TrainerCallback]:
        """The feedback poster, for the online selections (MoR)."""
        return [RestFeedbackCallback(self)] if self.method == "mor" else []

    def _client(self) -> httpx.AsyncClient:
        # trl runs async reward functions on its own event loop thread; a client belongs to one
        # loop, so a new loop (another trainer) gets a new client.
        loop = asyncio.get_running_loop()
        if self._http is None or self._loop is not loop:
            self._http = httpx.AsyncClient(verify=self.verify, timeout=self.timeout_s)
            self._loop = loop
        return self._http

    async def _post(self, payload: dict[str, Any]) -> AlignerResponse:
        body, headers = _signed(self.key, self.sender, "/v1/rewards", payload)
        self.requests += 1
        self.bytes_sent += len(body)
        resp = await self._client().post(f"{self.url}/v1/rewards", content=body,
                                         headers=headers)
        return AlignerResponse.model_validate(_checked(resp, "reward request"))

    async def _batch(self, items: list[AlignerItem], step: int,
                     png: dict[str, bytes]) -> list[float]:
        request = AlignerRequest(items=items, method=self.method, step=step)
        out = await self._post(request.model_dump(exclude_none=True))
        if out.missing:  # the server's image cache lacks these: send their bytes once
            lacking = set(out.missing)
            resend = [i.model_copy(update={"image_b64": base64.b64encode(
                png[i.image_sha256]).decode()}) if i.image_sha256 in lacking else i
                for i in items]
            out = await self._post(AlignerRequest(items=resend, method=self.method,
                                                  step=step).model_dump(exclude_none=True))
            if out.missing:
                raise RestRewardError(f"the server still lacks images {out.missing[:3]}")
        if len(out.rewards) != len(items):
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
        n = len(completions)
        if len(prompts) != n:
            raise RewardShapeError(f"{len(prompts)} prompts for {n} completions")
        images = _images(columns, n)
        options = columns.get("options") or [[] for _ in range(n)]
        png: dict[str, bytes] = {}
        items = []
        for image, prompt, completion, opts in zip(images, prompts, completions, options,
                                                   strict=True):
            data = self._png.encode(image)
            digest = hashlib.sha256(data).hexdigest()
            png[digest] = data
            text = message_text(prompt)
            items.append(AlignerItem(
                image_sha256=digest, prompt=text, response=message_text(completion),
                group=hashlib.sha256(f"{digest}\n{text}".encode()).hexdigest()[:16],
                options=[str(o) for o in opts or []]))
        step = trainer_state.global_step if trainer_state is not None else 0
        rewards: list[float] = []
        for start in range(0, n, self.max_items):
            rewards += await self._batch(items[start:start + self.max_items], step, png)
        if rewards:
            self.history.append(sum(rewards) / len(rewards))
        return rewards


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
        self._http: httpx.Client | None = None

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
               logs: dict[str, float] | None = None, **kwargs: Any) -> None:
        """Send the step's loss; the server applies it once per step."""
        if not state.is_world_process_zero or not logs or "loss" not in logs:
            return
        r = self.rewards
        fb = AlignerFeedback(step=state.global_step, loss=float(logs["loss"]), run=self.run)
        body, headers = _signed(r.key, r.sender, "/v1/rewards/feedback", fb.model_dump())
        if self._http is None:
            self._http = httpx.Client(verify=r.verify, timeout=r.timeout_s)
        resp = self._http.post(f"{r.url}/v1/rewards/feedback", content=body, headers=headers)
        ack = AlignerFeedbackAck.model_validate(_checked(resp, "router feedback"))
        if ack.applied:
            self.history.append((ack.step, fb.loss, ack.feedback, ack.pairs))

    def on_train_end(self, args: TrainingArguments, state: TrainerState,
                     control: TrainerControl, **kwargs: Any) -> None:
        """Close the run's connection."""
        if self._http is not None:
            self._http.close()
            self._http = None
