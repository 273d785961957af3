"""Alignment as a consortium service: GRPO steps with rewards through ``POST /v1/rewards``
against the same steps with the same reward models scored in-process; 1 and 2 ranks.

Two step sizes. The demo's step (8 prompts x 4 completions of up to 8 tokens, the demo's tiny
policy), where generation and the update dominate as in a real run, gives the headline
``rest_step_overhead_ratio`` and ``rest_step_overhead_ms``; the tiny step (2 prompts x 2
completions of 4 tokens, a few tens of ms) gives ``tiny_step_overhead_ratio`` and
``tiny_step_overhead_ms``, where the round trip is most of the step, and runs on 2 ranks too.

A local consortium (one server, two member apps with the hash scorer, one aligner identity) on
127.0.0.1 and a tiny policy. In-process: ``align`` with MoR over the same published router and
two in-process hash scorers. REST: ``fedmor align`` as its own process (``python -m sdk.cli``),
then under ``torch.distributed.run --nproc_per_node 2``. The aligner's process tree is watched
while it runs (its open files, every 0.1 s): ``aligner_holds_server_key`` is true if it ever
opened the server's database or identity key. Step time is the median of ``align``'s
``step_seconds`` after the first step. The last stdout line is one JSON object.

    .venv/bin/python examples/benchmarks/align_service.py --quick
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from client_app import HashScorer
from fedmor_local import OPEN_POLICY, LocalConsortium, free_port
from sdk.alignment import (
    ONLINE_ROUTER_CONFIG,
    EmptyIsWorst,
    GRPOSettings,
    InProcessRewardSource,
    NeuralTSChooser,
    SelectionRewardFunction,
    align,
    make_selection,
)
from sdk.data import SynthConfig, load_queries, synthesize
from sdk.models import build_tiny_vlm
from sdk.router import HashingEncoder, NeuralThompsonRouter, Router, RouterConfig

ROOT = Path(__file__).resolve().parents[2]
ROUTER = {"d_model": 16, "num_layers": 1, "num_heads": 2, "dim_feedforward": 32}
EMPTY = -1.0


def _runtime(out: Path) -> float:
    """Median seconds per step after the first (``align``'s ``step_seconds``, rank 0: from one
    step's end to the next, so the router feedback post after each step counts, which trl's
    ``step_time`` leaves out): the first step also pays one-off costs (the server builds its
    pipeline on the first batch, importing torch and the router)."""
    times = [t["seconds"] for t in json.loads((out / "metrics.json").read_text())["step_seconds"]]
    return float(np.median(times[1:] if len(times) > 1 else times))


def _open_files(pid: int) -> set[str]:
    """Paths the process ``pid`` and its descendants hold open now."""
    found: set[str] = set()
    pending = [pid]
    while pending:
        p = pending.pop()
        try:
            for fd in os.listdir(f"/proc/{p}/fd"):
                try:
                    found.add(os.readlink(f"/proc/{p}/fd/{fd}"))
                except OSError:
                    continue
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    pending += [int(c) for c in fh.read().split()]
        except OSError:
            continue
    return found


def _rest_run(c: LocalConsortium, launcher: list[str], policy: Path, queries: Path, out: Path,
              grpo: GRPOSettings) -> tuple[float, bool]:
    """(seconds per step, whether the aligner ever opened a server file)."""
    cfg = c.identity_cfg["aligner"]
    job = out.with_suffix(".json")
    job.write_text(json.dumps({"grpo": grpo.model_dump(mode="json"), "progress_every": 100}))
    secrets = {str(Path(c.server_cfg["db_path"]).resolve()),
               str(Path(c.server_cfg["identity_key"]).resolve())}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(ROOT), str(ROOT / "examples"))), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [*launcher, "-m", "sdk.cli", "align", "--server", c.server_url, "--insecure-http", "--identity",
         cfg["identity_key"], "--name", "aligner", "--token", cfg["enrollment_token"],
         "--policy", str(policy), "--queries", str(queries), "--out", str(out),
         "--config", str(job)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    touched: set[str] = set()

    def watch() -> None:
        while proc.poll() is None:
            touched.update(f for f in _open_files(proc.pid)
                           if any(f.startswith(s) for s in secrets))
            time.sleep(0.1)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    output, _ = proc.communicate(timeout=1800)
    watcher.join()
    if proc.returncode != 0:
        raise RuntimeError(f"fedmor align failed:\n{output[-4000:]}")
    return _runtime(out), bool(touched)


def _hash_score(images: Sequence[Image.Image | None], prompts: Sequence[str],
                responses: Sequence[str]) -> list[float]:
    """The members' stand-in scorer, called in process: every query of this benchmark has an
    image, as the member's scorer needs."""
    present = [image for image in images if image is not None]
    if len(present) != len(images):
        raise ValueError("a query without an image reached the hash scorer")
    return HashScorer().score(present, list(prompts), list(responses))


def _in_process(c: LocalConsortium, policy: Path, queries: Path, out: Path,
                grpo: GRPOSettings) -> float:
    """The same MoR steps with the published router and two hash scorers in this process."""
    blob = c.admin.get("/v1/router/latest").json()["version"]
    params = np.frombuffer(c.admin.get(f"/v1/router/{blob}").content, dtype="<f4").copy()
    encoder = HashingEncoder()
    router = Router(RouterConfig(**ROUTER), ["m0", "m1"], encoder.encoder_id)
    router.set_flat_params(params)
    chooser = NeuralTSChooser(encoder, NeuralThompsonRouter(router, ONLINE_ROUTER_CONFIG))
    source = EmptyIsWorst(InProcessRewardSource([_hash_score, _hash_score]), worst=EMPTY)
    reward_fn = SelectionRewardFunction(make_selection("mor", chooser=chooser), source)
    align(policy, reward_fn, load_queries(queries), grpo, out_dir=out, progress=None)
    return _runtime(out)


def _overhead(c: LocalConsortium, policy: Path, queries: Path, out: Path,
              grpo: GRPOSettings) -> tuple[dict[str, float], bool]:
    """In-process and REST seconds per step of one step size, the overhead in ms and as a
    ratio; and whether the aligner touched a server file."""
    local = _in_process(c, policy, queries, out / "in_process", grpo)
    rest, touched = _rest_run(c, [sys.executable], policy, queries, out / "rest1", grpo)
    return {"in_process_step_s": round(local, 3), "rest_step_s": round(rest, 3),
            "overhead_ms": round(1000 * (rest - local), 1),
            "ratio": round(rest / local, 3)}, touched


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="5 steps (else 20)")
    args = parser.parse_args()
    steps = 5 if args.quick else 20
    grpo = GRPOSettings(steps=steps, prompts_per_step=2, num_generations=2,
                        max_completion_length=4, warmup_steps=0)
    # The demo's GRPO step (fedmor_local._demo: 8 prompts x 4 completions, max_completion_length 8).
    demo_grpo = grpo.model_copy(update={"prompts_per_step": 8, "num_generations": 4,
                                        "max_completion_length": 8})
    work = Path(tempfile.mkdtemp(prefix="fedmor-align-service-"))
    synthesize(SynthConfig(train_pairs=4, eval_pairs=4, heldout_pairs=4, warmup_queries=16,
                           policy_train_queries=16, policy_eval_queries=4), work / "data")
    queries = work / "data" / "policy" / "train"
    policy = build_tiny_vlm("qwen2_5_vl", work / "policy",
                            corpus=[q.prompt for q in load_queries(queries)])
    alignment = {"router": ROUTER, "empty_reward": EMPTY,
                 "online": ONLINE_ROUTER_CONFIG.model_dump()}
    # Hash-scorer members under the open protocol-test policy: the benchmark measures the path.
    with LocalConsortium(work / "consortium", 2, identities={"aligner": "aligner"},
                         demo=True, policy=OPEN_POLICY,
                         server={"alignment": alignment}) as c:
        c.start()
        c.wait_enrolled()
        c.publish_router_round(ROUTER)
        demo, touched_demo = _overhead(c, policy, queries, work / "demo_step", demo_grpo)
        tiny, touched_tiny = _overhead(c, policy, queries, work / "tiny_step", grpo)
        two, touched_two = _rest_run(
            c, [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                "--master_port", str(free_port())], policy, queries, work / "rest2", grpo)
        stats: dict[str, Any] = c.admin.get("/v1/rewards/stats").json()
    result = {
        "steps": steps,
        "rest_step_overhead_ratio": demo["ratio"], "rest_step_overhead_ms": demo["overhead_ms"],
        "in_process_step_s": demo["in_process_step_s"], "rest_step_s": demo["rest_step_s"],
        "tiny_step_overhead_ratio": tiny["ratio"], "tiny_step_overhead_ms": tiny["overhead_ms"],
        "tiny_in_process_step_s": tiny["in_process_step_s"],
        "tiny_rest_step_s": tiny["rest_step_s"], "rest_two_rank_step_s": round(two, 3),
        "two_rank_speedup": round(tiny["rest_step_s"] / two, 3), "ranks": [1, 2],
        "aligner_holds_server_key": touched_demo or touched_tiny or touched_two,
        "server_items": stats["items"], "server_failed": stats["failed"],
        "feedback_applied": stats["feedback_applied"], "work_dir": str(work),
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
