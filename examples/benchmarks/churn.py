"""Churn benchmark: a consortium that keeps aligning while its members come, go and fail.

N members (``--quick``: 8, else 40) as real ``python -m client_app`` processes (push mode,
started in waves of 8) and one ``python -m server_app`` on 127.0.0.1, all through
``fedmor_local.LocalConsortium``. The
server declares a ``[router]`` whose heads are the members; the operator publishes a starting
router; an aligner identity posts batches of 16 completions to ``POST /v1/rewards`` with the
``mor`` selection (what ``fedmor align`` sends) from a thread, one every 0.25 s at most (a
GRPO step's pace), for the whole run.
R secure rounds (``router_secagg``; ``--quick`` 8, else 14) run one after another, and a
scripted schedule puts one event in a round (``_churn_naming.schedule``):

- ``killed``: a member SIGKILLed once its round passed its first stage, and restarted at once;
- ``data_removed``: a member that trains the router on its own pairs (``[router_training]``)
  has its pairs folder moved away and is restarted before the round (a running member has
  read its pairs already); after the round the folder is put back and the member restarted;
- ``slow``: a member SIGSTOPped for the stage deadline plus 2 s once the round opened;
- ``server_killed``: the server SIGKILLed once the round passed its first stage, and restarted;
- ``revoked``: a member removed from the roster file (``fedmor roster remove --roster``);
- ``enrolled``: a new member added to the roster and started; unless the server puts it in a
  new lineage itself, the operator starts one over the enrolled members (``fedmor router
  lineage``).

An event is named when, after its round and the next, the operator's REST views (``GET
/v1/rounds/{id}``, what ``fedmor rounds show --json`` prints, and ``GET /v1/reports/members``,
``fedmor members list --json``) hold the member's name or client id beside a cause word of its
kind (``_churn_naming.CAUSES``). The members not in an event answer with the demo stand-ins
(hash scorer, random updates); the ``data_removed`` member and the new one train on their own
pairs. ``data_lost`` counts finished rounds, router versions and enrolled members recorded before
each crash and at the last round that the views no longer hold at the end.

Usage: python examples/benchmarks/churn.py [--quick]; the last stdout line is one JSON object
with a ``headline`` dict.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # fedmor_local's folder
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

import httpx
from _aligner_load import SyntheticAligner
from _churn_naming import (
    SERVER,
    Event,
    alignment_figures,
    event_table,
    headline,
    judge,
    schedule,
)
from _scratch import scratch_dir

from fedmor_local import OPEN_POLICY, LocalConsortium
from fedmor_local._insider import rss_mb
from fedmor_local._local import wait_healthy
from sdk.data import SynthConfig, synthesize
from sdk.membership import RosterFile
from sdk.wire import (
    ROUTER_ROUND_PARAM,
    SignedClient,
    load_or_create_key,
)

JOINER = "joiner"
ROUTER = {"encoder": {"dim": 16},
          "router": {"input_dim": 16, "d_model": 16, "num_layers": 1, "num_heads": 2,
                     "dim_feedforward": 16},
          "federated": {"rounds": 100, "local": {"epochs": 1, "batch_size": 16, "lr": 3e-3}}}
START_WAVE = 8
"""Member apps started together at the run's start."""
BATCH_EVERY_S = 0.25
"""The aligner's pace: a GRPO step between batches, well under the server's per-identity
request rate (a batch is one or two requests)."""


def log(msg: str) -> None:
    print(f"[churn] {msg}", flush=True)


def _rss(pid: int) -> float | None:
    """A member's resident MiB now; None once its process is gone (an event may end it)."""
    with contextlib.suppress(OSError, RuntimeError):
        return round(rss_mb(pid), 1)
    return None


class Churn:
    """The consortium, its operator connection and the run's records."""

    def __init__(self, root: Path, n: int, deadline: float) -> None:
        self.deadline = deadline
        self.data = root / "data"
        synthesize(SynthConfig(clients=("diagram",), train_pairs=16, eval_pairs=1,
                               heldout_pairs=1, warmup_queries=0, policy_train_queries=0,
                               policy_eval_queries=0), self.data)
        names = [f"site-{i}" for i in range(n)]
        self.c = LocalConsortium(root / "consortium", n, demo=True, policy=OPEN_POLICY,
                                 identities={"aligner": "aligner", "ops": "operator"},
                                 server={"router": {**ROUTER, "heads": names},
                                         "stage_deadline_s": deadline,
                                         "reward_timeout_s": 5.0})
        self.trainers = [names[2]]  # the data_removed member; the joiner trains too
        for name in self.trainers:
            self.c.client_cfg[name]["router_training"] = {"pairs_dir": str(self._pairs(name))}
        self.ids: dict[str, str] = {}  # name -> client id
        self.rounds: list[dict[str, Any]] = []
        self.views: dict[int, list[Any]] = {}  # round id -> [round, members] after it
        self.recorded: dict[str, set[Any]] = {"rounds": set(), "versions": set(),
                                              "members": set()}
        self.revoked: set[str] = set()
        self.log_at: dict[str, int] = {}  # member -> its log's size when its event began
        self.ops: SignedClient | None = None

    def _pairs(self, name: str) -> Path:
        own = self.c.dir / name / "pairs"
        if not own.exists():
            shutil.copytree(self.data / "clients" / "diagram" / "train", own)
        return own

    def start(self) -> SyntheticAligner:
        from sdk.router import HashingEncoder, HashingEncoderConfig, Router, RouterConfig

        # In waves: a few dozen apps importing at once on a loaded machine miss any health
        # deadline; the roster and the rounds are the same either way.
        self.c.start_server()
        for wave in range(0, len(self.c.names), START_WAVE):
            names = self.c.names[wave:wave + START_WAVE]
            for name in names:
                self.c.start_client(name, wait=False)
            for name in names:
                wait_healthy(self.c.client_cfg[name]["public_url"], verify=self.c.verify,
                             proc=self.c.procs[name], timeout_s=600)
        self.c.wait_enrolled(timeout_s=600)
        self.ops = SignedClient(self.c.server_url, timeout_s=60, sender=self.c.enroll("ops"),
                                key=load_or_create_key(Path(self.c.identity_cfg["ops"]
                                                            ["identity_key"])))
        aligner = SyntheticAligner(self.c.server_url, self.c.enroll("aligner"),
                                   Path(self.c.identity_cfg["aligner"]["identity_key"]),
                                   method="mor", every_s=BATCH_EVERY_S)
        encoder = HashingEncoder(HashingEncoderConfig(**ROUTER["encoder"]))  # type: ignore[arg-type]
        seeded = Router(RouterConfig(**ROUTER["router"]), self.c.names,  # type: ignore[arg-type]
                        encoder.encoder_id)
        self.c.publish_router(seeded.get_flat_params())
        self._refresh_ids()
        return aligner

    # -- the operator's views --------------------------------------------------------------
    def get(self, path: str) -> Any:
        """GET as the operator identity, riding out a server restart (bounded)."""
        assert self.ops is not None
        for _ in range(100):
            try:
                resp = self.ops.request("GET", path)
            except httpx.HTTPError:
                time.sleep(0.2)
                continue
            if resp.status_code < 500:
                resp.raise_for_status()
                return resp.json()
            time.sleep(0.2)
        raise TimeoutError(f"GET {path}: the server did not answer")

    def _refresh_ids(self) -> None:
        self.ids.update({m["name"]: m["client_id"] for m in self.get("/v1/members")
                         if m["client_id"]})

    def record(self) -> None:
        """Note what the server holds now: what must still be there at the end."""
        self.recorded["rounds"] |= {r["round_id"] for r in self.get("/v1/rounds")
                                    if r["status"] == "finished"}
        self.recorded["versions"] |= {v["version"] for v in self.get("/v1/router/versions")}
        self.recorded["members"] |= {m["name"] for m in self.get("/v1/members")
                                     if m["state"] == "enrolled" and m["role"] == "member"}

    def data_lost(self) -> int:
        rounds = {r["round_id"] for r in self.get("/v1/rounds") if r["status"] == "finished"}
        versions = {v["version"] for v in self.get("/v1/router/versions")}
        members = {m["name"] for m in self.get("/v1/members")
                   if m["state"] == "enrolled" and m["role"] == "member"}
        return (len(self.recorded["rounds"] - rounds) + len(self.recorded["versions"] - versions)
                + len(self.recorded["members"] - self.revoked - members))

    # -- rounds ----------------------------------------------------------------------------
    def open_round(self, index: int) -> int:
        assert self.ops is not None
        body = {"kind": "router_secagg", "min_clients": 2,
                "params": {ROUTER_ROUND_PARAM: index, "clip_range": 64.0}}
        resp = self.ops.request("POST", "/v1/rounds", body)
        resp.raise_for_status()
        return int(resp.json()["round_id"])

    def wait_stage(self, round_id: int, timeout_s: float = 60.0) -> None:
        """Until the round has left its first stage (or ended), bounded."""
        first = self.get(f"/v1/rounds/{round_id}")["stage"]

        def left() -> bool:
            info = self.get(f"/v1/rounds/{round_id}")
            return bool(info["status"] != "open" or info["stage"] != first)

        self._until(left, timeout_s, every_s=0.05)

    def wait_round(self, round_id: int) -> dict[str, Any]:
        """The round once it ended (or as it is after six stage deadlines and two minutes)."""
        self._until(lambda: self.get(f"/v1/rounds/{round_id}")["status"] != "open",
                    6 * self.deadline + 120, every_s=0.1)
        info: dict[str, Any] = self.get(f"/v1/rounds/{round_id}")
        return info

    # -- events ----------------------------------------------------------------------------
    def member_log(self, e: Event) -> str:
        """The member's first WARNING or ERROR line since its event began (its own view)."""
        path = self.c.dir / f"{e.member}.log"
        if e.member == SERVER or not path.exists():
            return ""
        with path.open("rb") as fh:
            fh.seek(self.log_at.get(e.member, 0))
            for raw in fh:
                line = raw.decode(errors="replace").strip()
                if (" WARNING " in line or " ERROR " in line) and "DEMO MODE" not in line:
                    return line[:200]
        return ""

    def before(self, e: Event) -> None:
        log_path = self.c.dir / f"{e.member}.log"
        self.log_at[e.member] = log_path.stat().st_size if log_path.exists() else 0
        if e.kind == "data_removed":  # a member reads its pairs at start: restart it
            self.c.stop(e.member)
            self._pairs(e.member).rename(self.c.dir / e.member / "pairs.removed")
            self.c.start_client(e.member, wait=False)  # it may refuse to start, naming why
        elif e.kind == "revoked":
            roster = RosterFile.load(Path(self.c.server_cfg["roster_file"]))
            roster.clients = [m for m in roster.clients if m.name != e.member]
            roster.save(Path(self.c.server_cfg["roster_file"]))
            self.revoked.add(e.member)
            self._until(lambda: e.member not in {m["name"] for m in self.get("/v1/members")
                                                 if m["state"] == "enrolled"})
        elif e.kind == "enrolled":
            self._join(e.member)

    @staticmethod
    def _until(ok: Any, timeout_s: float = 30.0, every_s: float = 0.2) -> bool:
        """Poll ``ok()`` every ``every_s`` until it holds (True) or ``timeout_s`` passed
        (False)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ok():
                return True
            time.sleep(every_s)
        return False

    def _join(self, name: str) -> None:
        """A new member: roster entry, its app started, and a new lineage over the members."""
        self.c.add_member(name, router_training={"pairs_dir": str(self._pairs(name))})
        self.trainers.append(name)
        self.c.start_client(name)
        self._until(lambda: name in {m["name"] for m in self.get("/v1/members")
                                     if m["state"] == "enrolled"}, 60.0)
        self._refresh_ids()
        # A server that starts the new member's lineage itself needs no operator step.
        if self._until(lambda: name in self.get("/v1/router/config")["config"]["heads"], 2.0):
            log(f"the server started a lineage with {name} itself")
            return
        heads = [m["name"] for m in self.get("/v1/members")
                 if m["state"] == "enrolled" and m["role"] == "member"]
        assert self.ops is not None
        resp = self.ops.request("POST", "/v1/router/lineage", {**ROUTER, "heads": heads})
        log(f"the operator's new lineage over {len(heads)} heads: {resp.status_code} "
            f"{resp.text[:100]}")

    def during(self, e: Event, round_id: int) -> None:
        if e.kind == "slow":
            proc = self.c.procs[e.member]
            proc.send_signal(signal.SIGSTOP)
            threading.Timer(self.deadline + 2.0, proc.send_signal,
                            args=(signal.SIGCONT,)).start()
        elif e.kind == "killed":
            self.wait_stage(round_id)
            self.c.kill(e.member)
            self.c.start_client(e.member)
        elif e.kind == "server_killed":
            self.record()
            self.wait_stage(round_id)
            self.c.kill("server")
            self.c.start_server()

    def after(self, e: Event) -> None:
        if e.kind == "data_removed":  # restored, and the member started again on it
            if self.c.procs[e.member].poll() is None:
                self.c.stop(e.member)
            else:
                self.c.procs.pop(e.member)
            (self.c.dir / e.member / "pairs.removed").rename(self.c.dir / e.member / "pairs")
            self.c.start_client(e.member)

    def snapshot(self, round_id: int) -> None:
        self.views[round_id] = [self.get(f"/v1/rounds/{round_id}"),
                                self.get("/v1/reports/members")]


def _step(e: Event, when: str, action: Any, *args: Any) -> None:
    """Run one part of an event; a part that fails (a member app that refuses to start) is
    noted on the event and the run goes on."""
    try:
        action(*args)
    except Exception as exc:  # the run's figures matter more than one event's part
        e.problem = f"{when}: {type(exc).__name__}: {exc}"[:300]
        log(f"{e.kind} {e.member}: {e.problem}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="8 members, 8 rounds (else 40, 14)")
    parser.add_argument("--members", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--deadline", type=float, default=None,
                        help="the stage deadline in seconds (default 10, full run 30)")
    parser.add_argument("--out", type=Path, default=None,
                        help="work directory, kept (default: a temporary one)")
    args = parser.parse_args()
    n = args.members or (8 if args.quick else 40)
    rounds = args.rounds or (8 if args.quick else 14)
    deadline = args.deadline or (10.0 if args.quick else 30.0)
    root = scratch_dir("fedmor-churn-bench-", args.out)
    run = Churn(root, n, deadline)
    events = schedule(run.c.names, rounds, JOINER)
    by_round = {e.round: e for e in events}
    disabled: dict[int, int] = {}
    t0 = time.perf_counter()
    aligner: SyntheticAligner | None = None
    try:
        aligner = run.start()
        log(f"{n} members enrolled, router published in {time.perf_counter() - t0:.1f} s")
        rss = {"demo_member_mb": _rss(run.c.procs[run.c.names[0]].pid)}
        started = time.monotonic()
        aligner.start()
        for index in range(1, rounds + 1):
            e = by_round.get(index)
            if e is not None:
                _step(e, "before", run.before, e)
            round_id = run.open_round(index)
            if e is not None:
                e.round_id = round_id
                disabled[round_id] = int(e.kind in ("killed", "data_removed", "slow"))
                _step(e, "during", run.during, e, round_id)
            info = run.wait_round(round_id)
            run.snapshot(round_id)  # the operator's views at the round's end
            if e is not None:
                _step(e, "after", run.after, e)
            run.rounds.append(info)
            log(f"round {index} (id {round_id}{', ' + e.kind + ' ' + e.member if e else ''}): "
                f"{info['status']} in {float(info['finished_at'] or 0) - info['created_at']:.1f}"
                f" s, dropouts {len(info['dropouts'])}, error {info['error']}")
        rss["training_member_mb"] = _rss(run.c.procs[run.trainers[0]].pid)
        run.record()
    finally:
        if aligner is not None:
            aligner.close(timeout_s=180)
        ended = time.monotonic()
        lost = run.data_lost() if aligner is not None else -1
        run.c.close()
    ordered = [int(r["round_id"]) for r in run.rounds]
    for e in events:
        judge(e, ordered, run.views, run.ids)
    print(event_table(events))
    refusals = aligner.refusals()
    for why, count in sorted(refusals.items(), key=lambda kv: -kv[1])[:5]:
        log(f"aligner refused x{count}: {why}")
    figures = headline(members=n, events=events, rounds=run.rounds, disabled=disabled,
                       alignment=alignment_figures([b[:3] for b in aligner.batches], started,
                                                   ended),
                       data_lost=lost)
    print(json.dumps({
        "headline": figures, "real_member_processes": n + 1,
        "training_members": run.trainers, "member_rss_mb": rss, "stage_deadline_s": deadline,
        "events": [{"event": e.kind, "member": e.member, "round": e.round_id,
                    "effect": e.effect, "named": e.named, "where": e.where, "seen": e.seen,
                    "member_log": run.member_log(e), "problem": e.problem} for e in events],
        "rounds": [{"round_id": r["round_id"], "status": r["status"], "error": r["error"],
                    "participants": len(r["participants"]), "dropouts": len(r["dropouts"])}
                   for r in run.rounds],
        "aligner_refusals": refusals, "wall_s": round(time.perf_counter() - t0, 1)}))


if __name__ == "__main__":
    main()
