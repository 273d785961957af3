"""Table 1's step-time overhead of routed rewards over REST against the same rewards in-process.

The same MoR GRPO step with rewards from real (untrained) tiny reward models of the demo's
architectures, one per client, routed over REST through a real server and one client process
per client (server_app's LocalConsortium and RewardBroker), against the same models scored
in-process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from PIL import Image

from sdk.alignment import (
    EmptyIsWorst,
    GRPOSettings,
    InProcessRewardSource,
    NeuralTSChooser,
    SelectionRewardFunction,
    StepTimer,
    align,
    make_selection,
)
from sdk.data import Query
from sdk.models import build_tiny_vlm
from sdk.reward import DEFAULT_CLIP, ClientScorer, RewardModel, ScoreNormalizer
from sdk.router import image_digest, image_ref
from sdk.wire import ImageRef
from server_app import BrokerRewardSource

__all__ = ["routed_step_overhead"]

RM_ARCHITECTURES = ("qwen2_vl", "qwen2_5_vl", "llava_onevision")  # as in the demo


def tiny_reward_models(out: Path, queries: Sequence[Query], count: int) -> list[Path]:
    """``count`` untrained tiny reward-model checkpoints, the demo's architectures in turn
    (the step cost is what is measured)."""
    corpus = [q.prompt for q in queries] + [o for q in queries for o in q.options]
    dirs = []
    for k in range(count):
        arch = RM_ARCHITECTURES[k % len(RM_ARCHITECTURES)]
        rm_dir = out / f"rm-{k}-{arch}"
        if not (rm_dir / "normalizer.json").is_file():
            model = RewardModel.from_backbone(build_tiny_vlm(arch, out / f"vlm-{k}-{arch}",
                                                             corpus=corpus))
            model.save_pretrained(rm_dir)
            q = queries[:20]
            raw = model.score([x.image for x in q], [x.prompt for x in q],
                              [x.options[0] if x.options else "yes" for x in q])
            ScoreNormalizer.fit(raw).save(rm_dir)
        dirs.append(rm_dir)
    return dirs


class _AsAligner:
    """The aligner's half of the REST path, in this process: each PIL image becomes the
    reference an aligner would send (encoded once per distinct image), then ``inner`` (the
    server's broker source) asks the member processes."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self._refs: dict[str, ImageRef] = {}

    @property
    def num_clients(self) -> int:
        return int(self.inner.num_clients)

    def _ref(self, image: Image.Image | ImageRef | None) -> ImageRef:
        if image is None:
            raise ValueError("the REST reward path needs an image for every query")
        if isinstance(image, ImageRef):
            return image
        key = image_digest(image)
        if key not in self._refs:
            self._refs[key] = image_ref(image)
        return self._refs[key]

    async def score(self, client_index: int, images: Sequence[Image.Image | ImageRef | None],
                    prompts: Sequence[str], responses: Sequence[str]) -> list[float]:
        refs: list[Image.Image | ImageRef | None] = [self._ref(i) for i in images]
        return list(await self.inner.score(client_index, refs, prompts, responses))


def routed_step_overhead(policy: Path, queries: Sequence[Query], grpo: GRPOSettings,
                         chooser: Callable[[int], NeuralTSChooser], out: Path,
                         steps: int) -> dict[str, Any]:
    """Median GRPO step time with MoR rewards over REST vs in-process, same reward models."""
    from fedmor_local import LocalConsortium
    from sdk.wire import load_private_key
    from server_app import RewardBroker, Store

    # One reward model and, over REST, one client process per arm of the router.
    rm_dirs = tiny_reward_models(out / "overhead", queries, chooser(0).num_arms)
    settings = grpo.model_copy(update={"steps": steps})

    def step_times(source: Any, name: str) -> list[float]:
        fn = SelectionRewardFunction(make_selection("mor", chooser=chooser(0)),
                                     EmptyIsWorst(source, worst=-DEFAULT_CLIP))
        timer = StepTimer()
        align(policy, fn, queries, settings, out_dir=out / "overhead" / name, callbacks=[timer],
              progress=None)
        return timer.durations[2:]  # the first steps include lazy initialisation

    in_process = step_times(
        InProcessRewardSource([ClientScorer.from_pretrained(d).score for d in rm_dirs]), "local")
    # A fresh consortium: a roster or server store left by an earlier run holds stale clients.
    shutil.rmtree(out / "overhead" / "consortium", ignore_errors=True)
    consortium = LocalConsortium(out / "overhead" / "consortium", len(rm_dirs),
                                 clients={"run_rounds": False})  # reward queries only
    for site, rm_dir in zip(consortium.names, rm_dirs, strict=True):
        consortium.client_cfg[site]["reward_model_dir"] = str(rm_dir)
    previous = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"  # the client processes, like this one, use one thread
    try:
        with consortium:
            consortium.start()
            ids = consortium.wait_enrolled()
            broker = RewardBroker(Store(consortium.server_cfg["db_path"]),
                                  load_private_key(Path(consortium.server_cfg["identity_key"])),
                                  verify=consortium.verify, timeout_s=120,
                                  allow_private=True)  # members on 127.0.0.1
            rest = step_times(_AsAligner(BrokerRewardSource(broker, ids)), "rest")
            with contextlib.suppress(RuntimeError):  # trl's loop owns the broker's connections
                asyncio.run(broker.aclose())
    finally:
        if previous is None:
            del os.environ["OMP_NUM_THREADS"]
        else:
            os.environ["OMP_NUM_THREADS"] = previous
    return {"ratio": statistics.median(rest) / statistics.median(in_process),
            "median_step_s": {"in_process": statistics.median(in_process),
                              "rest": statistics.median(rest)},
            "steps_timed": len(rest), "reward_bytes": broker.bytes_sent}

