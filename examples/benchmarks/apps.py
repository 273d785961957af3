"""Benchmark of the REST apps across real processes on 127.0.0.1.

1. A secure router round (SecAgg+, sdk.secagg) over REST with N client processes and a
   P-parameter update, against a plain (unmasked) FedAvg round over the same REST path: both
   send their bulk vector as a binary octet-stream body and long-poll for stage inputs.
2. ``/v1/reward`` (push, through the server's RewardBroker) against in-process scoring of the
   same batches of 16 with a tiny real reward model (sdk.reward ClientScorer): p50/p99 latency.
3. Bytes on the wire per round and per query, with and without the image cache.
4. Both round kinds again with local training that takes ``--train-s`` seconds per client
   (``client_app._demo``'s stand-in waits, as for training on a site's accelerator): there a
   secure client agrees its keys while it trains, a plain one has nothing to do meanwhile.

Both round kinds run one untimed warm-up round first; the timed rounds alternate kinds.

Usage: python examples/benchmarks/apps.py [--quick]; the last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import math
import os
import sqlite3
import statistics
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from PIL import Image

# One torch thread per process (here and, inherited, in every client process): with many
# processes on few cores, torch's intra-op threads contend and scoring slows down many-fold.
os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # fedmor_local's folder
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from _scratch import scratch_dir

from client_app._demo import demo_params
from fedmor_local import OPEN_POLICY, LocalConsortium
from sdk.wire import ImageRef, load_private_key
from server_app import RewardBroker, Store


def log(msg: str) -> None:
    print(f"[apps] {msg}", flush=True)


def round_bytes(db: str, round_id: int) -> int:
    """Stage messages up plus per-client stage inputs down, as stored (JSON)."""
    with sqlite3.connect(db) as conn:
        up = conn.execute("SELECT COALESCE(SUM(LENGTH(payload)), 0) FROM stage_messages "
                          "WHERE round_id=?", (round_id,)).fetchone()[0]
        rows = conn.execute("SELECT broadcast FROM stage_closures WHERE round_id=?",
                            (round_id,)).fetchall()
    down = sum(len(json.dumps(v)) for (b,) in rows for v in json.loads(b).values())
    return int(up + down)


def round_timeline(db: str, round_id: int) -> dict[str, list[float]]:
    """Per stage: [first message stored, last stored, stage closed], plus ``finished``, in
    seconds after the round was created (the server's own clock, from its store)."""
    with sqlite3.connect(db) as conn:
        created, finished = conn.execute("SELECT created_at, finished_at FROM rounds "
                                         "WHERE round_id=?", (round_id,)).fetchone()
        stored = conn.execute("SELECT stage, MIN(stored_at), MAX(stored_at) FROM stage_messages "
                              "WHERE round_id=? GROUP BY stage", (round_id,)).fetchall()
        closed = dict(conn.execute("SELECT stage, closed_at FROM stage_closures "
                                   "WHERE round_id=?", (round_id,)).fetchall())
    out = {stage: [round(t - created, 3) for t in (first, last, closed.get(stage, math.nan))]
           for stage, first, last in sorted(stored, key=lambda row: row[1])}
    out["finished"] = [round(finished - created, 3)]
    return out


class TimedRound(NamedTuple):
    wall_s: float
    bytes: int  # stored and broadcast
    cpu_s: float  # of all processes
    timeline: dict[str, list[float]]  # see round_timeline


def timed_round(c: LocalConsortium, kind: str, length: int, n: int, train_s: float = 0.0
                ) -> TimedRound:
    """One round whose local updates take ``train_s`` seconds each."""
    cpu0, t0 = c.cpu_s(), time.perf_counter()
    info = c.create_round(kind=kind, vector_length=length, min_clients=max(2, n - 2),
                          params=demo_params(train_s=train_s) if train_s else {})
    done = c.wait_round(info["round_id"], timeout_s=600)
    elapsed = time.perf_counter() - t0
    if done["status"] != "finished":
        raise RuntimeError(f"{kind} round failed: {done['error']}")
    db, rid = c.server_cfg["db_path"], info["round_id"]
    return TimedRound(elapsed, round_bytes(db, rid), c.cpu_s() - cpu0, round_timeline(db, rid))


def build_reward_model(root: Path) -> Path:
    """A tiny random Qwen2-VL reward model with a fitted normalizer, saved like a real one."""
    from sdk.models import build_tiny_vlm
    from sdk.reward import RewardModel, ScoreNormalizer

    backbone = build_tiny_vlm("qwen2_vl", root / "backbone",
                              corpus=["What color is the square?", "The square is red."])
    model = RewardModel.from_backbone(backbone)
    out = root / "reward"
    model.save_pretrained(out)
    ScoreNormalizer(mu=0.0, sigma=1.0).save(out)
    return out


def png(seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (84, 84, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()


class Rounds(NamedTuple):
    """The round phase: the untimed warm-up round of each kind, the timed rounds, and the rounds
    with local training (by kind)."""

    warm: dict[str, float]
    plain: list[TimedRound]
    secure: list[TimedRound]
    trained: dict[str, list[float]]


def rounds_phase(c: LocalConsortium, length: int, repeats: int, train_s: float) -> Rounds:
    """Plain and secure rounds of every member, interleaved, after one untimed round of each."""
    n_clients = len(c.names)
    # One untimed round of each kind first: the first round of a fresh consortium pays
    # one-time costs (lazy imports and first connections in every process, no base router
    # yet), and the median of two timed rounds (--quick) would take half of them in. Both
    # kinds get the same warm-up; its times are reported.
    warm = {kind: timed_round(c, kind, length, n_clients).wall_s
            for kind in ("rm_fedavg", "router_secagg")}
    log(f"warm-up rounds (not timed): plain {warm['rm_fedavg']:.2f} s, secure "
        f"{warm['router_secagg']:.2f} s")
    plain, secure = [], []
    for r in range(repeats):
        plain.append(timed_round(c, "rm_fedavg", length, n_clients))
        log(f"plain FedAvg round {r}: {plain[-1].wall_s:.2f} s, {plain[-1].bytes} bytes, "
            f"{plain[-1].cpu_s:.2f} CPU-s")
        secure.append(timed_round(c, "router_secagg", length, n_clients))
        log(f"secure round {r}: {secure[-1].wall_s:.2f} s, {secure[-1].bytes} bytes, "
            f"{secure[-1].cpu_s:.2f} CPU-s")
    # The same with local training that takes train_s (spent off this machine's CPU, as on a
    # site's accelerator): the secure round's key stages run meanwhile.
    trained: dict[str, list[float]] = {"rm_fedavg": [], "router_secagg": []}
    for r in range(repeats if train_s else 0):
        for kind, times in trained.items():
            times.append(timed_round(c, kind, length, n_clients, train_s).wall_s)
        log(f"with {train_s:g} s of local training, round {r}: plain "
            f"{trained['rm_fedavg'][-1]:.2f} s, secure {trained['router_secagg'][-1]:.2f} s")
    return Rounds(warm, plain, secure, trained)


class Queries(NamedTuple):
    """The reward phase: per batch, the latency over HTTP and in-process (seconds), the
    client app's ``Server-Timing`` and the largest score difference; the bytes of a first
    (uncached) and a later (cached) query."""

    http: list[float]
    in_process: list[float]
    timings: list[dict[str, float]]
    max_diff: float
    uncached: int
    cached: int


def reward_phase(c: LocalConsortium, model_dir: Path, batches: int, batch: int) -> Queries:
    """One scoring member only: the same batches through ``/v1/reward`` (push) and scored in
    this process, interleaved so that both see the same machine load."""
    site = c.names[0]
    for name in c.names:  # one scoring client only: the others' processes leave
        c.stop(name)
    c.start_client(site, run_rounds=False)
    client_id = c.enrolled()[0]
    from sdk.reward import ClientScorer

    scorer = ClientScorer.from_pretrained(model_dir)
    broker = RewardBroker(Store(c.server_cfg["db_path"]),
                          load_private_key(Path(c.server_cfg["identity_key"])),
                          mode="push", timeout_s=120,
                          allow_private=True)  # members on 127.0.0.1
    images = [ImageRef.of(png(i)) for i in range(batches * batch)]
    queries = [images[b * batch:(b + 1) * batch] for b in range(batches)]
    prompts = ["What color is the square?"] * batch
    responses = [f"The square is red {i}." for i in range(batch)]
    decoded = [[Image.open(io.BytesIO(i.data)).convert("RGB") for i in q] for q in queries]

    async def run() -> Queries:
        before = broker.bytes_sent
        await broker.query(client_id, queries[0], prompts, responses)  # images travel
        uncached = broker.bytes_sent - before
        for q in queries[1:]:  # warm the cache for every batch
            await broker.query(client_id, q, prompts, responses)
        scorer.score(decoded[0], prompts, responses)  # warm-up
        http_lat, mem_lat, timings, diff, cached = [], [], [], 0.0, 0
        for b, q in enumerate(queries):
            before = broker.bytes_sent
            t = time.perf_counter()
            out = await broker.query(client_id, q, prompts, responses)
            http_lat.append(time.perf_counter() - t)
            timings.append(broker.last_server_timing)
            cached = broker.bytes_sent - before
            t = time.perf_counter()
            mem = scorer.score(decoded[b], prompts, responses)
            mem_lat.append(time.perf_counter() - t)
            diff = max(diff, float(np.max(np.abs(np.array(out) - np.array(mem)))))
        await broker.aclose()
        return Queries(http_lat, mem_lat, timings, diff, uncached, cached)

    log(f"{batches} batches of {batch}: /v1/reward (push) and in-process, interleaved")
    out = asyncio.run(run())
    log(f"HTTP vs in-process max score difference: {out.max_diff:.2e}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=None,
                        help="work directory for the stores and logs, kept (default: a "
                        "temporary one, removed at exit)")
    parser.add_argument("--train-s", type=float, default=0.5,
                        help="extra rounds of both kinds whose local update takes this long "
                        "(0: none)")
    args = parser.parse_args()
    n_clients = 5 if args.quick else 10
    length = 1_000_000
    repeats = 2 if args.quick else 3
    batches = 15 if args.quick else 60
    batch = 16
    root = scratch_dir("fedmor-apps-bench-", args.out)
    log(f"building a tiny reward model in {root}")
    model_dir = build_reward_model(root)
    with LocalConsortium(root / "consortium", n_clients,
                         # random updates in rounds of every kind: stand-ins, open policy
                         demo=True, policy=OPEN_POLICY,
                         # Idle clients long-poll GET /v1/work: no fast polling needed.
                         server={"stage_deadline_s": 300.0, "max_request_bytes": 64 * 2**20}) \
            as c:
        # The scoring site enrolls with its reward model: the clip bound a member announces at
        # enrollment is the one the broker holds its answers to.
        c.client_cfg[c.names[0]]["reward_model_dir"] = str(model_dir)
        log(f"starting 1 server + {n_clients} client processes")
        t0 = time.perf_counter()
        c.start()
        c.wait_enrolled()
        log(f"consortium up in {time.perf_counter() - t0:.1f} s")
        rounds = rounds_phase(c, length, repeats, args.train_s)
        queries = reward_phase(c, model_dir, batches, batch)
    config = {"clients": n_clients, "params": length, "repeats": repeats, "batch": batch,
              "batches": batches, "reward_model": "tiny random qwen2_vl (sdk.reward)",
              "omp_num_threads": os.environ["OMP_NUM_THREADS"]}
    print(json.dumps(result(args.quick, args.train_s, config, rounds, queries)), flush=True)


def result(quick: bool, train_s: float, config: dict[str, Any], rounds: Rounds,
           queries: Queries) -> dict[str, Any]:
    """The benchmark's JSON line: the figures of both phases and the headline ratios."""
    plain, secure, trained = rounds.plain, rounds.secure, rounds.trained
    plain_s = statistics.median(t.wall_s for t in plain)
    secure_s = statistics.median(t.wall_s for t in secure)
    http_lat, mem_lat, timings = queries.http, queries.in_process, queries.timings
    p50 = float(np.percentile(http_lat, 50) * 1000)
    mem_p50 = float(np.percentile(mem_lat, 50) * 1000)
    batch = int(config["batch"])
    return {
        "benchmark": "apps",
        "quick": quick,
        "config": config,
        "round_plain_s": plain_s,
        "round_secure_s": secure_s,
        "rounds_plain_s": [t.wall_s for t in plain],
        "rounds_secure_s": [t.wall_s for t in secure],
        "round_warmup_s": rounds.warm,
        "train_s": train_s,
        "rounds_plain_trained_s": trained["rm_fedavg"],
        "rounds_secure_trained_s": trained["router_secagg"],
        "secure_vs_plain_round_ratio_trained": (
            statistics.median(trained["router_secagg"]) / statistics.median(trained["rm_fedavg"])
            if trained["rm_fedavg"] else None),
        # Where the last timed round of each kind spent its time (see round_timeline).
        "round_timeline_plain": plain[-1].timeline,
        "round_timeline_secure": secure[-1].timeline,
        "loadavg": os.getloadavg(),  # the machine is shared: load beside every figure
        "round_bytes_plain": plain[0].bytes,
        "round_bytes_secure": secure[0].bytes,
        # All processes together (the machine is shared: CPU explains wall-time noise).
        "round_cpu_s_plain": statistics.median(t.cpu_s for t in plain),
        "round_cpu_s_secure": statistics.median(t.cpu_s for t in secure),
        "reward_in_process_p50_ms": mem_p50,
        "reward_http_throughput_items_per_s": batch * len(http_lat) / sum(http_lat),
        "reward_in_process_items_per_s": batch * len(mem_lat) / sum(mem_lat),
        "reward_http_vs_in_process_max_abs_diff": queries.max_diff,
        # The headline's ratio is of total times, so one stalled query on a shared machine
        # moves it; the ratio of medians beside it does not.
        "http_overhead_ratio_p50": p50 / mem_p50,
        # Where the HTTP time goes (p50, ms): scoring inside the client app (its own model
        # call plus the audit write), the whole client handler, and the rest (broker, network,
        # HTTP parsing and wake-ups), from the client's Server-Timing header.
        "reward_client_score_p50_ms": float(np.percentile([t["score"] for t in timings], 50)),
        "reward_client_app_p50_ms": float(np.percentile([t["app"] for t in timings], 50)),
        "reward_outside_client_p50_ms": float(np.percentile(
            [h * 1000 - t["app"] for h, t in zip(http_lat, timings, strict=True)], 50)),
        "headline": {
            "secure_vs_plain_round_ratio": secure_s / plain_s,
            "http_overhead_ratio": sum(http_lat) / sum(mem_lat),
            "reward_p50_ms": p50,
            "reward_p99_ms": float(np.percentile(http_lat, 99) * 1000),
            "query_bytes_cached": queries.cached,
            "query_bytes_uncached": queries.uncached,
        },
    }

if __name__ == "__main__":
    main()
