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

from sdk.alignment import (
    BrokerRewardSource,
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


def routed_step_overhead(policy: Path, queries: Sequence[Query], grpo: GRPOSettings,
                         chooser: Callable[[int], NeuralTSChooser], out: Path,
                         steps: int) -> dict[str, Any]:
    """Median GRPO step time with MoR rewards over REST vs in-process, same reward models."""
    from fedmor_local import LocalConsortium
    from sdk.wire import load_private_key
    from server_app import QueryItem, RewardBroker, Store

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
                                  verify=consortium.verify, timeout_s=120)
            rest = step_times(BrokerRewardSource(broker, ids, make_item=QueryItem), "rest")
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

