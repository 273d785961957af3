"""The site policy on real processes: a server and three client apps under the default policy
refuse what it forbids, report why, and take part in what it allows; an unconfigured client
refuses to start; ``policy show`` says the policy in words."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from client_app import SitePolicy
from client_app._demo import demo_params, demo_update
from client_app._policy import PolicyRefused, check_round, describe_policy
from fedmor_local import LocalConsortium
from sdk.rounds import memory_spec
from sdk.wire import RoundInfo, generate_key

from .conftest import running

_REPO = Path(__file__).resolve().parents[2]
LENGTH = 256  # every round of the module (a published router fixes the length)


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalConsortium]:
    """Four demo clients (stand-in updates) under the client app's default policy; the server
    preloads its DP accountant at start, as a deployment's does by default."""
    with running(tmp_path_factory.mktemp("policy"), 4, demo=True,
                 server={"stage_deadline_s": 30.0, "preload_dp_accountant": True}) as c:
        yield c


def _local_status(c: LocalConsortium, name: str, round_id: int) -> tuple[str, str] | None:
    with sqlite3.connect(c.client_cfg[name]["db_path"]) as db:
        row = db.execute("SELECT status, detail FROM rounds WHERE round_id=?",
                         (round_id,)).fetchone()
    return None if row is None else (str(row[0]), str(row[1]))


def _refused_by_all(c: LocalConsortium, info: dict[str, object], reason: str) -> None:
    # Every member refused before its deadline: the round fails at once, not after 30 s.
    assert info["status"] == "failed", info
    refusals = info["refusals"]
    assert isinstance(refusals, list)
    assert sorted(r["client_id"] for r in refusals) == sorted(c.enrolled())
    assert {r["reason"] for r in refusals} == {reason}
    for name in c.names:
        status = _local_status(c, name, int(info["round_id"]))  # type: ignore[call-overload]
        assert status is not None and status[0] == "refused" and reason in status[1]


def test_an_unmasked_round_is_refused_with_the_reason_on_the_server(
        strict: LocalConsortium) -> None:
    info = strict.create_round(kind="rm_fedavg", vector_length=LENGTH, min_clients=3)
    done = strict.wait_round(info["round_id"], timeout_s=25)
    _refused_by_all(strict, done, "round_kind")
    assert "rm_fedavg" in done["refusals"][0]["detail"]


def test_a_round_on_one_local_sample_is_refused(strict: LocalConsortium) -> None:
    info = strict.create_round(kind="router_secagg", vector_length=LENGTH, min_clients=3,
                               params=demo_params(samples=1))
    done = strict.wait_round(info["round_id"], timeout_s=25)
    _refused_by_all(strict, done, "local_samples")
    # The key agreement went ahead while the update was computed; no masked input left.
    with sqlite3.connect(strict.server_cfg["db_path"]) as db:
        (masked,) = db.execute("SELECT COUNT(*) FROM stage_messages WHERE round_id=? AND "
                               "stage='masked_input_collection'", (info["round_id"],)).fetchone()
    assert masked == 0


def test_small_rounds_are_refused_and_a_safe_one_completes(strict: LocalConsortium) -> None:
    ids = strict.enrolled()
    two = strict.create_round(kind="router_secagg", vector_length=LENGTH, min_clients=2,
                              participants=ids[:2])
    done = strict.wait_round(two["round_id"], timeout_s=25)
    assert {r["reason"] for r in done["refusals"]} == {"participants"}
    # Three members, but an aggregate of two survivors would be accepted: threshold.
    low = strict.create_round(kind="router_secagg", vector_length=LENGTH, min_clients=2,
                              participants=ids[:3], params={"threshold": 2})
    done = strict.wait_round(low["round_id"], timeout_s=25)
    assert {r["reason"] for r in done["refusals"]} == {"threshold"}
    ok = strict.create_round(kind="router_secagg", vector_length=LENGTH, min_clients=3,
                             params=demo_params(samples=5))
    done = strict.wait_round(ok["round_id"], timeout_s=60)
    assert done["status"] == "finished" and done["refusals"] == [], done


def test_a_minority_threshold_from_a_hostile_server_is_refused_before_sending() -> None:
    # Six members, complete graph: six share holders each. t = 3 passes min_threshold, but two
    # disjoint triples could rebuild one member's self-mask and mask key: its update.
    keys = {f"m{i}": generate_key() for i in range(6)}

    def announced(threshold: int) -> RoundInfo:
        spec = memory_spec("router_secagg", keys, 4, {"degree": 5, "threshold": threshold},
                           min_clients=3)
        return RoundInfo.of(spec, status="open", stage="advertise_keys", stages=[],
                            dropouts=[], router_version=None, error=None, created_at=0.0,
                            finished_at=None)

    with pytest.raises(PolicyRefused) as refused:
        check_round(SitePolicy(), announced(3))
    assert refused.value.reason == "params"
    assert ("threshold 3 is not a majority of the 6 share holders" in refused.value.detail
            and "2 x threshold > share holders" in refused.value.detail), refused.value.detail
    assert check_round(SitePolicy(), announced(4)).privacy.min_survivors == 4


def test_a_router_larger_than_the_site_allows_is_refused_before_its_download() -> None:
    # A hostile server's round over a router of more parameters than the site takes: refused
    # from the announcement, so nothing of that size is downloaded or trained here.
    keys = {f"m{i}": generate_key() for i in range(3)}

    def announced(length: int) -> RoundInfo:
        spec = memory_spec("router_secagg", keys, length, {}, min_clients=3)
        return RoundInfo.of(spec, status="open", stage="advertise_keys", stages=[],
                            dropouts=[], router_version=None, error=None, created_at=0.0,
                            finished_at=None)

    most = SitePolicy().max_vector_length
    with pytest.raises(PolicyRefused) as refused:
        check_round(SitePolicy(), announced(most + 1))
    assert refused.value.reason == "vector_length"
    assert f"{most + 1} parameters > max_vector_length {most}" in refused.value.detail
    assert check_round(SitePolicy(), announced(most)).privacy.masked


def test_a_demo_client_says_so_in_every_response(strict: LocalConsortium) -> None:
    url = strict.client_cfg[strict.names[0]]["public_url"]
    resp = strict._probe.get(f"{url}/v1/health")
    assert resp.headers["x-fedmor-demo"] == "true"
    assert "x-fedmor-demo" not in strict.admin.get("/v1/health").headers  # the server: no demo
    log = (strict.dir / f"{strict.names[0]}.log").read_text()
    assert "DEMO MODE" in log and "refused" in log


def _run_client(tmp_path: Path, cfg: dict[str, object], *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "client.json"
    path.write_text(json.dumps({"db_path": str(tmp_path / "c.db"),
                                "identity_key": str(tmp_path / "id.pem"), **cfg}))
    return subprocess.run([sys.executable, "-m", "client_app", *args, "--config", str(path)]
                          if args else [sys.executable, "-m", "client_app", "--config", str(path)],
                          capture_output=True, text=True, timeout=60, cwd=_REPO)


def test_an_unconfigured_client_refuses_to_start(tmp_path: Path) -> None:
    no_model = _run_client(tmp_path, {})
    assert no_model.returncode == 2
    assert "reward_model_dir" in no_model.stderr and "--demo" in no_model.stderr
    no_update = _run_client(tmp_path, {"scorer": "client_app._scorer:HashScorer"})
    assert no_update.returncode == 2 and "[router_training]" in no_update.stderr


def test_policy_show_says_what_leaves_the_site(tmp_path: Path) -> None:
    default = _run_client(tmp_path, {}, "policy", "show")
    assert default.returncode == 0, default.stderr
    assert default.stdout.startswith("this site sends: masked router updates (router_secagg) "
                                     "in rounds of >= 3 members with threshold >= 3")
    # The SecAgg+ client refuses a minority threshold whatever the policy: it is listed too.
    assert "a majority of each member's share holders (2 x threshold > share holders)" \
        in default.stdout
    assert "never: plain (unmasked) updates" in default.stdout
    relaxed = describe_policy(SitePolicy(round_kinds=["router_secagg", "rm_fedavg"],
                                         require_dp=True, serve_rewards=False))
    assert "plain router updates" in relaxed and "never: updates without DP noise" in relaxed
    assert "reward queries: not served" in relaxed
    with pytest.raises(ValueError, match="unknown round kind"):
        SitePolicy(round_kinds=["router_secag"])


def test_a_dp_round_completes_with_a_dropout_and_its_epsilon_is_the_accountants(
        strict: LocalConsortium) -> None:
    from opacus.accountants import RDPAccountant

    def epsilon(*noise: float) -> float:  # the accountant, independently of fedmor
        acc = RDPAccountant()
        acc.history = [(z, 1.0, 1) for z in noise]
        return float(acc.get_epsilon(delta=1e-5))

    dp = {"clip_norm": 0.5, "noise_multiplier": 1.0, "delta": 1e-5, "rounds": 10}
    params = {"dp": dp, "clip_range": 2.0, **demo_params(samples=5)}
    ids = dict(zip(strict.names, strict.enrolled(), strict=True))
    # The server loaded its accountant (opacus, torch) in the background when it started, not
    # in the request that opens the first DP round: it logged so before that request was sent.
    _wait_for_line(strict.dir / "server.log", _PRELOADED)
    # A member without a DP policy loads the accountant at its first DP round: seconds here.
    first = strict.create_round(kind="router_secagg", vector_length=LENGTH, min_clients=3,
                                stage_deadline_s=60.0, params=params)
    assert strict.wait_round(first["round_id"], timeout_s=90)["status"] == "finished"
    strict.stop("site-3")  # drops out of the next one, at its first stage's deadline
    # The deadline only has to outlast the live members on a loaded machine.
    info = strict.create_round(kind="router_secagg", vector_length=LENGTH, min_clients=3,
                               stage_deadline_s=20.0, params=params)
    done = strict.wait_round(info["round_id"], timeout_s=60)
    assert done["status"] == "finished" and done["dropouts"] == [ids["site-3"]], done
    assert done["dp"]["epsilon"] == pytest.approx(epsilon(1.0), rel=1e-9)
    assert done["dp"]["epsilon_total"] == pytest.approx(epsilon(1.0, 1.0), rel=1e-9)
    # The published router is the base plus the mean of the survivors' clipped deltas (weight
    # 1 each) plus noise of std noise_multiplier * clip_norm on the sum: 0.5 / 3 on the mean,
    # the dropout's share included (each member's noise is scaled for the threshold of 3).
    round_info = RoundInfo.model_validate(done)
    base = np.zeros(LENGTH, np.float32) if done["base_version"] is None else np.frombuffer(
        strict.admin.get(f"/v1/router/{done['base_version']}").content, "<f4")
    clean = []
    for name in strict.names[:3]:
        delta = demo_update(name, round_info, None)[0] - base
        clean.append(delta * min(1.0, 0.5 / float(np.linalg.norm(delta))))
    blob = strict.admin.get(f"/v1/router/{done['router_version']}").content
    residual = np.frombuffer(blob, "<f4") - base - np.mean(clean, axis=0)
    assert 0.13 < float(residual.std()) < 0.21
    for name in strict.names[:3]:  # each member counted the round in its own store
        with sqlite3.connect(strict.client_cfg[name]["db_path"]) as db:
            ledger = db.execute("SELECT round_id, epsilon FROM dp_ledger").fetchall()
        assert ledger == [(first["round_id"], pytest.approx(epsilon(1.0), rel=1e-9)),
                          (info["round_id"], pytest.approx(epsilon(1.0, 1.0), rel=1e-9))]
    # site-3 returns with an epsilon budget between one such round (spent) and two: it
    # refuses the next one, which completes without it; the server's total composes all three.
    strict.start_client("site-3", policy={"max_epsilon": (epsilon(1.0) + epsilon(1.0, 1.0)) / 2})
    _wait_for_line(strict.dir / "site-3.log", _PRELOADED)  # it expects DP: loaded at start
    again = strict.create_round(kind="router_secagg", vector_length=LENGTH, min_clients=3,
                                stage_deadline_s=60.0, params=params)
    done = strict.wait_round(again["round_id"], timeout_s=60)
    assert done["status"] == "finished", done
    assert [(r["client_id"], r["reason"]) for r in done["refusals"]] == [
        (ids["site-3"], "epsilon")]
    assert done["dp"]["epsilon_total"] == pytest.approx(epsilon(1.0, 1.0, 1.0), rel=1e-9)
    # Per member, the operator sees the rounds its update went into: three for the first
    # three sites, one for site-3 (it dropped out of the second and refused the third).
    spent = {m["name"]: m["epsilon_spent"] for m in strict.admin.get("/v1/members").json()}
    assert spent == {**{n: pytest.approx(epsilon(1.0, 1.0, 1.0), rel=1e-9)
                        for n in strict.names[:3]},
                     "site-3": pytest.approx(epsilon(1.0), rel=1e-9)}


_PRELOADED = "DP accountant (opacus) loaded"


def _wait_for_line(log: Path, text: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in log.read_text():
        assert time.monotonic() < deadline, f"{log.name} never said {text!r}"
        time.sleep(0.2)


def test_dp_params_that_do_not_fit_are_refused_at_creation(strict: LocalConsortium) -> None:
    dp = {"clip_norm": 0.5, "noise_multiplier": 1.0}
    for params, message in [({"dp": dp}, "raise clip_range"),
                            ({"dp": dp, "clip_range": 2.0, "max_weight": 10}, "max_weight")]:
        resp = strict.admin.post("/v1/rounds", json={
            "kind": "router_secagg", "vector_length": LENGTH, "min_clients": 3,
            "params": params})
        assert resp.status_code == 422 and message in resp.json()["detail"], resp.text
