"""Load benchmark: one real server and many pull-mode members, with and without a hostile one.

N members (``--quick``: 50, else 200), each with its own identity key and SQLite database, run
the member app's own round and query worker (``client_app.ClientRunner``, pull mode: no
public URL) as threads in a few worker processes, speaking signed HTTP to one ``python -m
server_app`` on 127.0.0.1. Two phases, each: every member long-polls ``GET /v1/work`` while a
secure round (``router_secagg``, SecAgg+) of all N runs to completion and an aligner identity
sends batches of reward queries (``POST /v1/rewards``, ``random`` selection: each item goes to
one member, which answers from its queue); a probe process asks ``GET /v1/health`` every
100 ms throughout. The second phase adds one hostile enrolled member (not in the round) that
keeps 500 long polls open: each refused one is re-sent after the server's Retry-After (the
server's RSS growth over that phase and its ``-wal`` size are reported). Last, the hostile
member and the aligner send 16 correctly signed 63 MiB bodies at once to routes their roles
may not call (``insider_body_rss_mb``: the server's RSS growth meanwhile).

The member and hostile processes run at ``nice 19``: in a deployment they are other machines,
here they share the cores with the server and the probe. An honest request fails when a
member's attempt raises (connection error, 5xx, 429, or a 4xx other than the runner
stopping), the aligner gets a non-200, or a probe errs or times out.

Usage: python examples/benchmarks/load.py [--quick]; the last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import multiprocessing as mp
import os
import sqlite3
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # fedmor_local's folder
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from _aligner_load import SyntheticAligner
from _scratch import scratch_dir

from fedmor_local import OPEN_POLICY, LocalConsortium
from fedmor_local._insider import InsiderPost, insider_bodies, rss_mb
from sdk.wire import AsyncSignedClient, RequestRefused, load_or_create_key

HOSTILE = "hostile"
PROBE_EVERY_S = 0.1
PROBE_TIMEOUT_S = 10.0
# The members' and the hostile member's processes run at the lowest CPU priority: in a deployment
# they run on their own machines, here they share this one's cores with the server and the
# probe, and the figures are of the server.
MEMBER_NICE = 19


def log(msg: str) -> None:
    print(f"[load] {msg}", flush=True)


# -- member worker processes ----------------------------------------------------------------
def _member_worker(cfgs: list[dict[str, Any]], control: Any) -> None:
    """Run one ClientRunner per member config as threads; answer ``count`` with the failed
    attempts so far, stop on ``stop``."""
    from client_app import ClientRunner, ClientSettings, ClientStore, site_reward_service

    os.nice(MEMBER_NICE)

    failures: collections.Counter[str] = collections.Counter()  # by reason
    lock = threading.Lock()

    class Counting(ClientRunner):
        def _send(self, method: str, path: str, payload: Any, *, signed: bool) -> httpx.Response:
            try:
                return super()._send(method, path, payload, signed=signed)
            except Exception as exc:
                if not self.stop.is_set() and getattr(exc, "status", None) != 499:
                    with lock:
                        failures[f"{method} {path.split('?')[0]}: {exc}"[:160]] += 1
                raise

    runners = []
    for raw in cfgs:
        cfg = ClientSettings(**raw)
        store = ClientStore(cfg.db_path)
        runners.append(Counting(cfg, store=store, service=site_reward_service(cfg, store)))
    for runner in runners:
        runner.enroll()
    threads = [threading.Thread(target=r.run_forever, daemon=True) for r in runners]
    for t in threads:
        t.start()
    control.send("ready")
    while (command := control.recv()) != "stop":
        if command == "count":
            with lock:
                control.send(dict(failures))
    for r in runners:
        r.stop.set()
    for t in threads:
        t.join(timeout=60)
    control.send("stopped")


# -- the health probe -----------------------------------------------------------------------
def _probe(url: str, control: Any) -> None:
    """GET /v1/health every 100 ms; ``take`` answers the latencies (ms; None: failed) since
    the last ``take``."""
    seen: list[float | None] = []
    lock = threading.Lock()
    stop = threading.Event()

    def run() -> None:
        with httpx.Client(base_url=url, timeout=PROBE_TIMEOUT_S) as http:
            while not stop.is_set():
                started = time.perf_counter()
                try:
                    ok = http.get("/v1/health").status_code == 200
                except httpx.HTTPError:
                    ok = False
                spent = time.perf_counter() - started
                with lock:
                    seen.append(spent * 1000 if ok else None)
                stop.wait(max(0.0, PROBE_EVERY_S - spent))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    while control.recv() != "stop":
        with lock:
            control.send(list(seen))
            seen.clear()
    stop.set()
    thread.join()


# -- the hostile member ---------------------------------------------------------------------
def _hostile(url: str, client_id: str, key_path: str, polls: int, control: Any) -> None:
    """Keep ``polls`` long polls open as ``client_id``; ``stop`` answers (refused, answered)."""
    os.nice(MEMBER_NICE)
    key = load_or_create_key(Path(key_path))
    counts = {"refused": 0, "answered": 0}
    path = "/v1/work?wait_s=30"

    async def poll(client: AsyncSignedClient, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                resp = await client.request("GET", path)
            except httpx.HTTPError:
                continue
            if resp.status_code == 429:
                counts["refused"] += 1
                await asyncio.sleep(RequestRefused.of(resp).wait_s)
            else:
                counts["answered"] += 1

    async def main() -> None:
        stop = asyncio.Event()
        limits = httpx.Limits(max_connections=polls + 10, max_keepalive_connections=polls)
        async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as http:
            client = AsyncSignedClient(key=key, sender=client_id, http=http)
            tasks = [asyncio.create_task(poll(client, stop)) for _ in range(polls)]
            while sum(counts.values()) < polls - 4:  # the first wave is in and refused
                await asyncio.sleep(0.05)
            control.send("attacking")
            await asyncio.to_thread(control.recv)  # "stop"
            stop.set()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        control.send(counts)

    asyncio.run(main())


# -- orchestration --------------------------------------------------------------------------
def _insider_bodies(c: LocalConsortium, pid: int, member_id: str, aligner_id: str
                    ) -> tuple[float, dict[str, int]]:
    """Server RSS growth (MiB) while the hostile member and the aligner send 16 correctly
    signed maximum-size bodies at once to routes their roles may not call; the statuses."""
    member = load_or_create_key(Path(c.client_cfg[c.names[-1]]["identity_key"]))
    aligner = load_or_create_key(Path(c.identity_cfg["aligner"]["identity_key"]))
    posts = [InsiderPost(member, member_id, "/v1/router"),
             InsiderPost(member, member_id, "/v1/rewards"),
             InsiderPost(member, member_id, "/v1/audit/members/site-0/reward"),
             InsiderPost(aligner, aligner_id, "/v1/rounds/1/stages/update")] * 4
    before = rss_mb(pid)
    statuses = insider_bodies(c.server_url, c.verify, posts, 63 * 2**20)
    grown = round(rss_mb(pid) - before, 1)
    log(f"16 insider bodies of 63 MiB: {collections.Counter(statuses)}, server RSS +{grown} MiB")
    return grown, {str(k): v for k, v in collections.Counter(statuses).items()}


def _p99(latencies: list[float | None]) -> float:
    values = [PROBE_TIMEOUT_S * 1000 if v is None else v for v in latencies]
    return round(float(np.percentile(values, 99)), 1) if values else float("nan")


def _round_seconds(db: str, round_id: int) -> float:
    with sqlite3.connect(db) as conn:
        created, finished = conn.execute("SELECT created_at, finished_at FROM rounds WHERE "
                                         "round_id=?", (round_id,)).fetchone()
    return round(float(finished - created), 2)


class Phase:
    """One measured phase: a round of every honest member with the aligner and the probe."""

    def __init__(self, c: LocalConsortium, workers: list[Any], probe: Any,
                 aligner: SyntheticAligner,
                 participants: list[str], vector: int) -> None:
        self.c, self.workers, self.probe, self.aligner = c, workers, probe, aligner
        self.participants, self.vector = participants, vector

    def _member_failures(self) -> collections.Counter[str]:
        """Failed member attempts so far, by reason."""
        total: collections.Counter[str] = collections.Counter()
        for w in self.workers:
            w.send("count")
            total.update(w.recv())
        return total

    def idle(self, seconds: float) -> float:
        """Health p99 (ms) over ``seconds`` with every member long-polling and nothing else:
        this machine's baseline in the same run."""
        self.probe.send("take")
        self.probe.recv()
        time.sleep(seconds)
        self.probe.send("take")
        latencies = self.probe.recv()
        log(f"idle: health p99 {_p99(latencies)} ms over {len(latencies)} probes")
        return _p99(latencies)

    def run(self, name: str) -> dict[str, Any]:
        self.probe.send("take")
        self.probe.recv()  # latencies before the phase: not counted
        cpu0, wall0 = self.c.cpu_s("server"), time.perf_counter()
        failed_before = self._member_failures()
        self.aligner.start()
        created = self.c.create_round(kind="router_secagg", vector_length=self.vector,
                                      participants=self.participants,
                                      min_clients=len(self.participants),
                                      params={"clip_range": 8.0})
        done = self.c.wait_round(created["round_id"], timeout_s=3600)
        batches = self.aligner.stop()
        refused = [b for b in batches if b.refused is not None]
        for why, count in self.aligner.refusals().items():
            log(f"  aligner refused x{count}: {why}")
        self.probe.send("take")
        latencies = self.probe.recv()
        cpu = round(self.c.cpu_s("server") - cpu0, 1)
        wall = round(time.perf_counter() - wall0, 1)
        reasons = self._member_failures() - failed_before
        failed = sum(reasons.values())
        for reason, count in reasons.most_common(5):
            log(f"  member failure x{count}: {reason}")
        status = done["status"]
        seconds = _round_seconds(self.c.server_cfg["db_path"], created["round_id"])
        log(f"{name}: round {status} in {seconds} s; health p99 {_p99(latencies)} ms over "
            f"{len(latencies)} probes ({sum(v is None for v in latencies)} failed); member "
            f"failures {failed}; aligner {len(batches) - len(refused)} batches, {len(refused)} "
            f"refused; server CPU {cpu} s in {wall} s")
        return {"round_status": status, "round_seconds": seconds,
                "health_p99_ms": _p99(latencies),
                "health_probes": len(latencies), "server_cpu_s": cpu, "wall_s": wall,
                "failed_honest_requests": failed + len(refused)
                + sum(v is None for v in latencies),
                "aligner_batches": len(batches) - len(refused),
                "aligner_failed_items": sum(b.failed for b in batches if b.refused is None)}


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="50 members instead of 200")
    parser.add_argument("--members", type=int, default=None)
    parser.add_argument("--workers", type=int, default=4, help="member processes")
    parser.add_argument("--vector", type=int, default=10_000, help="the round's vector length")
    parser.add_argument("--hostile-polls", type=int, default=500)
    parser.add_argument("--long-poll-s", type=float, default=None,
                        help="the members' long_poll_s (default: the member app's default); "
                        "idle, N members send N / long_poll_s signed polls a second")
    parser.add_argument("--worker-threads", type=int, default=None,
                        help="the server's limits.worker_threads (default: its default); the "
                        "per-identity and anonymous caps stay below it")
    parser.add_argument("--out", type=Path, default=None,
                        help="work directory, kept (default: a temporary one)")
    return parser.parse_args()


def main() -> None:
    args = _args()
    n = args.members or (50 if args.quick else 200)
    ctx = mp.get_context("spawn")
    c = _consortium(scratch_dir("fedmor-load-bench-", args.out), n, args.worker_threads)
    hostile_cfg = c.client_cfg[c.names[-1]]
    procs: list[Any] = []
    aligner: SyntheticAligner | None = None
    try:
        c.start_server()
        log(f"server up; enrolling {n} members in {args.workers} processes")
        t0 = time.perf_counter()
        workers = _start_members(c, n, args.workers, args.long_poll_s, ctx, procs)
        hostile_id = c.enroll(hostile_cfg["name"])
        aligner_id = c.enroll("aligner")
        participants = [cid for cid in c.enrolled() if cid != hostile_id]
        log(f"{len(participants)} members enrolled and polling in "
            f"{time.perf_counter() - t0:.1f} s")
        probe, probe_end = ctx.Pipe()
        procs.append(ctx.Process(target=_probe, args=(c.server_url, probe_end), daemon=True))
        procs[-1].start()
        aligner = SyntheticAligner(c.server_url, aligner_id,
                                   Path(c.identity_cfg["aligner"]["identity_key"]),
                                   method="random", timeout_s=600)
        phase = Phase(c, workers, probe, aligner, participants, args.vector)
        aligner.warm_up()
        idle_p99 = phase.idle(10.0)
        calm = phase.run("without the hostile member")

        server_pid = c.procs["server"].pid
        rss_before_polls = rss_mb(server_pid)
        hostile, hostile_end = ctx.Pipe()
        procs.append(ctx.Process(target=_hostile, daemon=True, args=(
            c.server_url, hostile_id, hostile_cfg["identity_key"], args.hostile_polls,
            hostile_end)))
        procs[-1].start()
        assert hostile.recv() == "attacking"
        attack = phase.run(f"with one member holding {args.hostile_polls} long polls")
        hostile_poll_rss = rss_mb(server_pid) - rss_before_polls
        wal = Path(c.server_cfg["db_path"] + "-wal")
        server_wal_mb = wal.stat().st_size / 2**20 if wal.exists() else 0.0
        hostile.send("stop")
        hostile_counts = hostile.recv()
        insider_rss, insider_statuses = _insider_bodies(c, server_pid, hostile_id, aligner_id)
        probe.send("stop")
        for conn in workers:
            conn.send("stop")
        for conn in workers:
            with contextlib.suppress(EOFError):
                conn.recv()
    finally:
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
        if aligner is not None:
            aligner.close(timeout_s=60)
        c.close()
    out: dict[str, Any] = {
        "members": n, "idle_health_p99_ms": idle_p99, "vector_length": args.vector,
        "hostile_polls": args.hostile_polls, "worker_threads": args.worker_threads,
        "long_poll_s": args.long_poll_s, "insider_body_rss_mb": insider_rss,
        "insider_body_statuses": insider_statuses, "server_wal_mb": round(server_wal_mb, 1),
        "hostile_poll_rss_mb": round(hostile_poll_rss, 1),
        "hostile_refused": hostile_counts["refused"], "hostile_answered": hostile_counts["answered"]}
    for key in calm:  # each phase's figures: the calm one as named, the other "attack_..."
        out[key], out[f"attack_{key}"] = calm[key], attack[key]
    print(json.dumps(out))


def _consortium(root: Path, n: int, threads: int | None) -> LocalConsortium:
    """``n`` members and a hostile one (the last), an aligner, the server's ``limits`` scaled
    to ``threads`` worker threads when given."""
    limits = {} if threads is None else {"limits": {
        "worker_threads": threads, "per_identity": min(16, threads - 1),
        "long_polls_per_identity": min(4, threads - 1), "anonymous": min(32, threads - 1)}}
    return LocalConsortium(root / "consortium", n + 1, identities={"aligner": "aligner"},
                           demo=True, policy=OPEN_POLICY, server={
                               "stage_deadline_s": 1800.0, "reward_timeout_s": 600.0,
                               "alignment": {"members": [f"site-{i}" for i in range(n)]},
                               **limits})


def _start_members(c: LocalConsortium, n: int, n_workers: int, long_poll_s: float | None,
                   ctx: Any, procs: list[Any]) -> list[Any]:
    """The first ``n`` members, spread over ``n_workers`` processes (added to ``procs``), each
    running its members' round and query workers; their control pipes once all are ready."""
    poll = {} if long_poll_s is None else {"long_poll_s": long_poll_s}
    workers = []
    for w in range(n_workers):
        cfgs = [{**c.client_cfg[name], "public_url": None, **poll}
                for name in c.names[w:n:n_workers]]
        ours, theirs = ctx.Pipe()
        proc = ctx.Process(target=_member_worker, args=(cfgs, theirs), daemon=True)
        proc.start()
        procs.append(proc)
        workers.append(ours)
    for conn in workers:
        if conn.recv() != "ready":
            raise RuntimeError("a member worker did not start")
    return workers

if __name__ == "__main__":
    main()
