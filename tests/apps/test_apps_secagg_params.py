"""``router_secagg`` round params, in-process: bad keys are a 422 naming them, the default
threshold is the SDK's majority raised to min_clients, and no aggregate is accepted from fewer
than min_clients survivors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from client_app._demo import demo_params
from client_app._policy import SitePolicy, check_round
from client_app._round_walk import MemberRound, ready_update
from fedmor_local import OPEN_POLICY
from sdk.rounds import ROUND_KINDS, RoundFailed, SecAggRoundParams, memory_spec
from sdk.rounds._secagg_kind import _round_params
from sdk.wire import (
    ROUTER_ROUND_PARAM,
    UPDATE_PARAMS,
    RoundCreate,
    RoundSpec,
    generate_key,
    public_key_b64,
)

from .conftest import Member, in_process_secure_round

ADMIN = {"authorization": "Bearer adm"}
KIND = ROUND_KINDS["router_secagg"]


def _spec(n: int, min_clients: int, **params: Any) -> RoundSpec:
    return memory_spec(KIND.name, {f"c{i}": generate_key() for i in range(n)}, 4, params,
                       round_id=1, min_clients=min_clients)


@pytest.mark.parametrize(("params", "needle"), [
    ({"thresold": 2}, "unknown parameter 'thresold'"),
    ({"dp": {"noise_multiplier": 1.0}}, "raise clip_range"),
    ({"dp": {"noise_multiplier": 1.0}, "clip_range": 4.0, "max_weight": 9}, "max_weight must"),
    ({"threshold": 1}, "2 x threshold > share holders"),  # a minority of the share holders
    ({"clip_range": 2.0, "quantization": {"clip_range": 1.0}}, "contradicts quantization"),
    ({"degree": "many"}, "degree:"),
])
def test_bad_params_make_round_creation_a_422(server: tuple[TestClient, list[Member]],
                                              params: dict[str, Any], needle: str) -> None:
    tc, _ = server
    r = tc.post("/v1/rounds", headers=ADMIN, json={
        "kind": "router_secagg", "vector_length": 4, "min_clients": 2, "params": params})
    assert r.status_code == 422, r.text
    assert needle in r.json()["detail"], r.json()["detail"]


def test_the_update_params_pass_through(server: tuple[TestClient, list[Member]]) -> None:
    # The keys the members' update sources read; the contract names none of a demo's.
    assert ROUTER_ROUND_PARAM in UPDATE_PARAMS and not any("demo" in k for k in UPDATE_PARAMS)
    tc, _ = server
    options = demo_params(samples=3, train_s=0)
    r = tc.post("/v1/rounds", headers=ADMIN, json={
        "kind": "router_secagg", "vector_length": 4, "min_clients": 2,
        "params": {ROUTER_ROUND_PARAM: 3, **options}})
    assert r.status_code == 200, r.text
    # The update source's options pass through unread, for the members' update to check.
    echoed = {k: v for k, v in r.json()["params"].items() if k != "graph_seed"}
    assert echoed == {ROUTER_ROUND_PARAM: 3, **options}


@pytest.mark.parametrize(("min_clients", "params", "threshold"), [
    (2, {}, 6),  # degree 9 (10 clients): the SDK's majority floor(10 / 2) + 1, not 2
    (8, {}, 8),  # raised to min_clients
    (8, {"degree": 3}, 4),  # but never above degree + 1
    (2, {"degree": 3, "threshold": 3}, 3),  # an explicit one >= min_clients is kept
])
def test_default_threshold_is_the_sdk_majority_raised_to_min_clients(
        min_clients: int, params: dict[str, Any], threshold: int) -> None:
    round_params, _ = _round_params(_spec(10, min_clients, **params))
    assert round_params.threshold == threshold


def test_a_majority_threshold_below_min_clients_is_refused() -> None:
    with pytest.raises(ValueError, match="threshold 6 < min_clients 8"):
        _round_params(_spec(10, 8, threshold=6))


def test_fewer_masked_inputs_than_min_clients_fail_the_round() -> None:
    # min_clients 4 > degree + 1 = 3: the threshold (3) alone would accept 3 survivors.
    spec = _spec(4, 4, degree=2)
    keys = [generate_key() for _ in spec.participants]
    spec = spec.model_copy(update={"public_keys": [public_key_b64(k) for k in keys]})
    terms = KIND.terms(spec)
    server = KIND.server(terms)
    halves = {c: MemberRound.join(terms, client_id=c, key=k, update=ready_update(np.ones(4), 1),
                                  state=None) for c, k in zip(spec.participants, keys, strict=True)}
    inputs = {c: server.first_broadcast(c) for c in halves}
    stages = list(server.stages)
    for stage in stages[:2]:
        for c, half in halves.items():
            server.accept(stage, c, server.parse(stage, c, half.message(stage, inputs[c])))
        inputs = server.close(stage)
    stage = stages[2]  # masked_input_collection; c3 drops out
    for c in spec.participants[:3]:
        server.accept(stage, c, server.parse(stage, c, halves[c].message(stage, inputs[c])))
    with pytest.raises(RoundFailed, match="only 3 masked input"):
        server.close(stage)


def _count_parses(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every ``router_secagg`` params parse from now on, appended to the returned list."""
    parsed: list[dict[str, Any]] = []
    parse = SecAggRoundParams.parse.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(SecAggRoundParams, "parse", classmethod(
        lambda cls, params: parsed.append(params) or parse(cls, params)))
    return parsed


def test_a_round_s_params_are_parsed_once_on_each_side(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server parses a round's params once, when it creates the round, and never again
    to list or show it; a member parses them once, for its site policy and its half
    together."""
    parsed = _count_parses(monkeypatch)
    rounds, _, rid, halves = in_process_secure_round(
        tmp_path, 4, lambda _: ready_update(np.full(4, 0.25, np.float32), 1))
    assert len(parsed) == 2  # the server's creation, the members' (the helper)
    for stage in rounds.info(rid).stages:
        for client, half in halves.items():
            inp = rounds.broadcast(rid, stage, client)
            rounds.submit(rid, stage, client, half.message(stage, inp.payload or {}))
    info = rounds.info(rid)
    assert info.status == "finished"  # no live server half any more: stages from the kind
    rounds.list()
    rounds.info(rid)
    assert len(parsed) == 2
    member = next(iter(halves))
    terms = check_round(SitePolicy(**OPEN_POLICY), info)
    MemberRound.join(terms, client_id=member, key=generate_key(), state=None,
                     update=ready_update(np.zeros(4, np.float32), 1))
    assert len(parsed) == 3


def test_round_creation_derives_dp_terms_and_server_half_from_one_parse(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A DP round's creation parses its params once: its recorded DP terms and its server
    half (numbered with the id the store gave it) come from that one parsed object."""
    rounds, _, _, _ = in_process_secure_round(
        tmp_path, 4, lambda _: ready_update(np.zeros(4, np.float32), 1))
    parsed = _count_parses(monkeypatch)
    info = rounds.create(RoundCreate(kind="router_secagg", vector_length=4, min_clients=2,
                                     params={"threshold": 2, "degree": 2, "clip_range": 4.0,
                                             "dp": {"noise_multiplier": 1.0}}))
    assert len(parsed) == 1
    assert info.dp is not None and info.dp.noise_multiplier == 1.0 and info.dp.epsilon > 0
    opening = rounds.broadcast(info.round_id, info.stages[0], info.participants[0]).payload
    assert opening is not None and opening["round_id"] == f"round-{info.round_id}"
