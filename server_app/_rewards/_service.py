"""The reward service of the aligner role: the selection pipeline of stage C, on the server.

A batch from the aligner is rewarded as ``sdk.alignment`` does in one process: the selection
(MoR routes each completion to one member with the online router, or a baseline), the broker
asks the chosen members, empty completions and off-format multiple-choice answers are scored
without a query, and a member that times out or refuses gives the failure value for its items.
Each image is the :class:`~sdk.wire.ImageRef` the aligner sent, checked against its hash here
and passed on unchanged: the server never decodes or encodes one (only the router's encoder
decodes an image, once per sha256, when a routed selection needs its features).
The aligner's per-step loss is the Neural TS feedback; the online state is saved after each
update and loaded again at start, so a restarted server continues the same bandit.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import logging
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sdk.serving import ConflictError, RateLimited
from sdk.wire import (
    AlignerFeedback,
    AlignerFeedbackAck,
    AlignerItem,
    AlignerRequest,
    AlignerResponse,
    AlignerStats,
    AlignmentStep,
    ConsortiumRouterConfig,
    ImageCache,
    ImageRef,
    PayloadError,
)
from server_app._rewards._broker import RewardBroker
from server_app._rewards._broker_source import BrokerRewardSource
from server_app._router._serving import ServingRouter, carry_online_state, serving_router
from server_app._settings import AlignmentSettings
from server_app._store import Store

if TYPE_CHECKING:  # torch: the service imports sdk.alignment when it first builds a pipeline
    from torch import Tensor

    from sdk.alignment import EmptyIsWorst, NeuralTSChooser, SelectionRewardFunction

__all__ = ["AlignmentService"]

_log = logging.getLogger("fedmor.server.rewards")
_ROUTED = ("mor", "mor_no_online")  # the selections that take the router
_ONLINE = "mor"  # the one whose router learns from the aligner's feedback


@dataclass
class _Pipeline:
    """One selection method's reward function, its sources and (MoR) its online router."""

    reward_fn: SelectionRewardFunction
    members: BrokerRewardSource
    empty_source: EmptyIsWorst
    router_version: int | None
    serving: ServingRouter  # the served router and its masks when the pipeline last looked
    chooser: NeuralTSChooser | None = None  # a routed selection's router (masks move on it)
    # (batch step, contexts (n, d), arms) routed since the last applied feedback
    pending: list[tuple[int, Tensor, list[int]]] = field(default_factory=list)
    run: str = ""
    step: int | None = None
    last_loss: float | None = None


class AlignmentService:
    """Rewards for the aligner: ``score`` a batch, apply ``feedback``, read ``stats``."""

    def __init__(self, store: Store, broker: RewardBroker, settings: AlignmentSettings) -> None:
        self.store, self.broker, self.cfg = store, broker, settings
        # The aligner sends an image's bytes once, then its hash.
        self.images = ImageCache[bytes](max_items=settings.image_cache_items,
                                        max_bytes=settings.image_cache_bytes, size_of=len)
        self.counts = AlignerStats()
        self._pipelines: dict[str, _Pipeline] = {}
        self._lock = asyncio.Lock()  # one batch at a time: the router and counters are shared
        self._calls: dict[str, deque[float]] = {}

    # -- limits --------------------------------------------------------------------------------
    def admit(self, aligner_id: str, n_items: int) -> None:
        """Refuse a batch over ``max_items`` (422) or over the per-minute rate (429)."""
        if n_items > self.cfg.max_items:
            raise PayloadError(f"{n_items} items exceed the server's limit of "
                               f"{self.cfg.max_items} per request")
        RateLimited.per_minute(self._calls.setdefault(aligner_id, deque()),
                               self.cfg.max_requests_per_minute, f"aligner {aligner_id}")

    # -- the pipeline --------------------------------------------------------------------------
    def _serving(self) -> ServingRouter:
        """The router to serve and its masked heads, read from the store now: an operator's
        new lineage, a member's join or a revocation applies to the next batch."""
        return serving_router(self.store, self.cfg.encoder, self.cfg.router, self.cfg.members)

    def _chooser(self, method: str, view: ServingRouter) -> NeuralTSChooser:
        """The router of ``view``'s version, as an arm chooser that skips its masked heads."""
        import numpy as np

        from sdk.alignment import NeuralTSChooser
        from sdk.router import (
            HashingEncoder,
            HashingEncoderConfig,
            NeuralThompsonRouter,
            NeuralTSConfig,
            Router,
            RouterConfig,
        )

        row = None if view.version is None else self.store.version(view.version)
        if row is None:
            raise ConflictError(f"selection {method!r} needs a router: none is published yet")
        encoder = HashingEncoder(HashingEncoderConfig.model_validate(view.encoder))
        router = Router(RouterConfig.model_validate(view.router), view.heads, encoder.encoder_id)
        if router.num_params() != row.length:
            raise ConflictError(f"router version {row.version} has {row.length} "
                                f"parameters; alignment.router and alignment.members give "
                                f"{router.num_params()}")
        router.set_flat_params(np.frombuffer(row.blob, dtype="<f4").copy())
        online = NeuralTSConfig.model_validate(self.cfg.online)
        chooser = NeuralTSChooser(encoder, NeuralThompsonRouter(router, online))
        chooser.allow(view.selectable)
        return chooser

    def _build(self, method: str, view: ServingRouter) -> _Pipeline:
        from sdk.alignment import SELECTIONS, EmptyIsWorst, SelectionRewardFunction, make_selection

        if method not in SELECTIONS:
            raise PayloadError(f"unknown selection method {method!r}; registered: "
                               f"{sorted(SELECTIONS)}")
        view.check_selectable()
        kwargs = dict(self.cfg.selection_options.get(method, {}))
        version, chooser = None, None
        if method in _ROUTED:
            # The router's arm k is head k: a masked head keeps its arm and is never chosen.
            ids = view.client_ids
            chooser, version = self._chooser(method, view), view.version
            kwargs["chooser"] = chooser
        else:  # the baselines choose among the selectable members only
            ids = [view.client_ids[k] for k in view.selectable]
        try:
            selection = make_selection(method, **kwargs)
        except TypeError as exc:
            raise PayloadError(f"selection {method!r} cannot run on the server: {exc}") from None
        # The selection's client index k: member ids[k], mapped in the source.
        source = BrokerRewardSource(self.broker, ids, failure=self.cfg.failure_reward)
        empty = EmptyIsWorst(source, worst=self.cfg.empty_reward)
        fn = SelectionRewardFunction(selection, empty,
                                     invalid_choice_reward=self.cfg.invalid_choice_reward)
        pipeline = _Pipeline(fn, source, empty, version, view, chooser)
        if method == _ONLINE:
            self._restore(pipeline)
        return pipeline

    def _pipeline(self, method: str) -> _Pipeline:
        view = self._serving()
        pipe = self._pipelines.get(method)
        # A router-based method follows the served router: a new version (another federated
        # round, a carried-over lineage) starts a fresh online phase on it. Membership changes
        # on the same version only move the masks, keeping the online phase.
        if pipe is None or (pipe.router_version != view.version if method in _ROUTED
                            else pipe.serving != view):
            pipe = self._pipelines[method] = self._build(method, view)
        elif method in _ROUTED and pipe.serving != view:
            view.check_selectable()
            pipe.members.client_ids = list(view.client_ids)
            if pipe.chooser is not None:
                pipe.chooser.allow(view.selectable)
            pipe.serving = view
        return pipe

    # -- rewards -------------------------------------------------------------------------------
    def _images(self, items: list[AlignerItem]) -> tuple[list[ImageRef], list[str]]:
        """One reference per item, or (when some are neither sent nor cached) their hashes.
        Sent bytes are checked against their hash here, once (the trust boundary), and then
        passed on as they are: the server neither decodes nor re-encodes an image."""
        refs = {i.image_sha256: ImageRef.sent(i.image_sha256, i.image_b64)
                for i in items if i.image_b64 is not None}
        for ref in refs.values():
            self.images.put(ref.sha256, ref.data)
        # What arrived is used as sent: the cache may not keep it (over its byte bound).
        for digest in {i.image_sha256 for i in items} - set(refs):
            data = self.images.get(digest)  # cached bytes were checked when they arrived
            if data is not None:
                refs[digest] = ImageRef(digest, data)
        missing = sorted({i.image_sha256 for i in items} - set(refs))
        if missing:
            return [], missing
        return [refs[i.image_sha256] for i in items], []

    async def score(self, req: AlignerRequest) -> AlignerResponse:
        """One reward per item within ``alignment.clip`` (or the image hashes the server
        lacks)."""
        from sdk.alignment import CompletionBatch

        images, missing = self._images(req.items)
        if missing:
            return AlignerResponse(missing=missing)
        async with self._lock:
            # Off the event loop: the first build imports torch, later ones read the store.
            pipe = await asyncio.to_thread(self._pipeline, req.method)
            pipe.members.reset()
            empty_before = pipe.empty_source.empty
            invalid_before = pipe.reward_fn.invalid_choices
            batch = CompletionBatch(images=[ref for ref in images],
                                    prompts=[i.prompt for i in req.items],
                                    responses=[i.response for i in req.items])
            rewards = self._bounded(await pipe.reward_fn.score(
                batch, options=[i.options for i in req.items]))
            contexts, arms = pipe.reward_fn.selection.take_pending()
            if contexts is not None and arms:
                pipe.pending.append((req.step, contexts, arms))
            failed = pipe.members.failed + sum(r is None for r in rewards)
            c = self.counts
            c.batches, c.items = c.batches + 1, c.items + len(req.items)
            c.failed += failed
            c.empty += pipe.empty_source.empty - empty_before
            c.invalid_choices += pipe.reward_fn.invalid_choices - invalid_before
            judges = None
            if self.cfg.reveal_judges:
                asked = [pipe.members.judge(im, i.prompt, i.response)
                         for im, i in zip(images, req.items, strict=True)]
                judges = ["" if r is None else j for j, r in zip(asked, rewards, strict=True)]
        failure = self.cfg.failure_reward
        return AlignerResponse(rewards=[failure if r is None else r for r in rewards],
                               failed=failed, judges=judges,
                               router_version=pipe.router_version)

    def _bounded(self, rewards: list[float]) -> list[float | None]:
        """Each reward, or None (the item fails) when it leaves ``[-clip, clip]``: a member
        clipped its score once, so one outside the bound is refused, never clipped here (the
        settings keep the fixed rewards inside it)."""
        bound = self.cfg.clip
        out: list[float | None] = [float(r) if -bound <= r <= bound else None for r in rewards]
        refused = len(out) - sum(r is not None for r in out)
        if refused:
            _log.warning("%d rewards outside [-%g, %g] (alignment.clip) failed", refused,
                         bound, bound)
        return out

    # -- online feedback -----------------------------------------------------------------------
    async def feedback(self, fb: AlignerFeedback) -> AlignerFeedbackAck:
        """Apply the bandit update for ``fb.step`` once (as ``RouterFeedbackCallback`` does in
        one process): r_t = 1 when the loss did not rise, over the pairs of batches generated
        before that step. A repeated step (another rank's copy) is acknowledged only; a new
        ``run`` starts its step and loss history afresh on the router learned so far."""
        import torch

        from sdk.alignment import loss_feedback

        async with self._lock:
            pipe = self._pipeline(_ONLINE)
            if fb.run != pipe.run:  # another training run: its own steps and loss history
                pipe.run, pipe.step, pipe.last_loss = fb.run, None, None
            if pipe.step is not None and fb.step <= pipe.step:
                return AlignerFeedbackAck(step=fb.step, applied=False, feedback=None, pairs=0)
            r_t = loss_feedback(pipe.last_loss, fb.loss)
            due = [p for p in pipe.pending if p[0] < fb.step]
            pipe.pending = [p for p in pipe.pending if p[0] >= fb.step]
            chooser = pipe.reward_fn.selection.chooser
            pairs = 0
            if r_t is not None and due and chooser is not None:
                arms = [a for _, _, batch_arms in due for a in batch_arms]
                chooser.update(torch.cat([c for _, c, _ in due]), arms, [r_t] * len(arms))
                pairs = len(arms)
                self.counts.router_updates += 1
            pipe.step, pipe.last_loss = fb.step, fb.loss
            await asyncio.to_thread(self._save, pipe, fb, r_t)
            self.counts.feedback_applied += 1
        return AlignerFeedbackAck(step=fb.step, applied=True, feedback=r_t, pairs=pairs)

    def _save(self, pipe: _Pipeline, fb: AlignerFeedback, r_t: float | None) -> None:
        """The online state and the step's progress record, in one commit."""
        import torch

        chooser = pipe.reward_fn.selection.chooser
        buf = io.BytesIO()
        torch.save(chooser.state_dict() if chooser is not None else {}, buf)
        assert pipe.router_version is not None
        with self.store.transaction():
            self.store.save_online(_ONLINE, pipe.router_version, pipe.run, pipe.step,
                                   pipe.last_loss, buf.getvalue())
            self.store.add_alignment_step(fb.run, fb.step, fb.loss, fb.reward, fb.kl, r_t)

    def progress(self) -> list[AlignmentStep]:
        """The applied feedback steps (reward, KL, loss and r_t per step), oldest first."""
        return self.store.alignment_steps()

    def _restore(self, pipe: _Pipeline) -> None:
        import torch

        row = self.store.online(_ONLINE)
        if row is None:
            return
        state = torch.load(io.BytesIO(row.state), weights_only=True)
        chooser = pipe.reward_fn.selection.chooser
        if row.router_version != pipe.router_version:
            old_heads = self._carried_heads(row.router_version, pipe.router_version)
            if old_heads is None or chooser is None or not state:
                _log.info("router version %s was published since the online state was saved "
                          "(on version %s): the online phase starts afresh",
                          pipe.router_version, row.router_version)
                return
            _log.info("router version %s carries version %s over: the online router keeps "
                      "what it learned", pipe.router_version, row.router_version)
            state = carry_online_state(state, chooser.state_dict(), old_heads,
                                       pipe.serving.heads)
        if chooser is not None and state:
            chooser.load_state_dict(state)
        pipe.run, pipe.step, pipe.last_loss = row.run, row.step, row.last_loss

    def _carried_heads(self, saved: int, version: int | None) -> list[str] | None:
        """The heads of version ``saved`` when ``version`` is the carry-over of it (a new
        lineage's first version), else None."""
        row = None if version is None else self.store.version_meta(version=version)
        if row is None or row.carried_from != saved:
            return None
        source = self.store.version_meta(version=saved)
        lineage = None if source is None else self.store.lineage(source.lineage)
        return None if lineage is None else list(
            ConsortiumRouterConfig.model_validate_json(lineage.config).heads)

    def stats(self) -> AlignerStats:
        """The counters, the saved online router (step, last loss, version, state hash) and
        the image cache's size."""
        row = self.store.online(_ONLINE)
        try:
            view: ServingRouter | None = self._serving()
        except ConflictError:  # no member and no router: nothing is served
            view = None
        return self.counts.model_copy(update={
            "serving_version": None if view is None else view.version,
            "serving_lineage": None if view is None else view.lineage,
            "heads": [] if view is None else view.heads,
            "masked_heads": {} if view is None else view.masked,
            "step": None if row is None else row.step,
            "last_loss": None if row is None else row.last_loss,
            "router_version": None if row is None else row.router_version,
            "cached_images": len(self.images), "member_query_bytes": self.broker.bytes_sent,
            "online_state_sha256": None if row is None else hashlib.sha256(row.state).hexdigest()})
