"""The operator's typed client (``sdk.ops.OperatorClient``) against a real server app over HTTP
on 127.0.0.1: each route takes and returns its ``sdk.wire`` schemas, a refusal is one
``RequestRefused`` with the server's status; and the ``rounds`` commands offer exactly the
registry's round kinds."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from fedmor_local import free_port
from sdk.cli import build_parser, main
from sdk.membership import add_to_roster
from sdk.ops import Connection, OperatorClient
from sdk.rounds import ROUND_KINDS
from sdk.wire import (
    AlignerStats,
    ConsortiumRouterConfig,
    EnrollRequest,
    Health,
    RequestRefused,
    Revocation,
    RosterAdd,
    RoundCancel,
    RoundCreate,
    RouterRollback,
    SignedClient,
    generate_key,
    public_key_b64,
)
from sdk.wire._auth import write_private_key
from server_app import ServerSettings
from server_app._app import create_app
from tests._serve import served

CONFIG = ConsortiumRouterConfig.model_validate({
    "encoder": {"dim": 16}, "heads": ["st-luke"],
    "router": {"input_dim": 16, "d_model": 16, "num_layers": 1, "num_heads": 2,
               "dim_feedforward": 16}})


def _kind_choices(command: str) -> set[str]:
    """The ``kind`` choices of ``fedmor rounds COMMAND``, as the parser offers them."""
    parser = build_parser("rounds")
    rounds = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    group = rounds.choices["rounds"]
    commands = next(a for a in group._actions if isinstance(a, argparse._SubParsersAction))
    kind = next(a for a in commands.choices[command]._actions if a.dest == "kind")
    assert kind.choices is not None
    return set(kind.choices)


def test_the_rounds_commands_offer_every_registered_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _kind_choices("open") == _kind_choices("check") == set(ROUND_KINDS)
    # A kind registered later is offered (and accepted by the request schema) with no other edit.
    monkeypatch.setitem(ROUND_KINDS, "later_kind", ROUND_KINDS["rm_fedavg"])
    assert _kind_choices("open") == _kind_choices("check") == set(ROUND_KINDS)
    assert {RoundCreate(kind=k).kind for k in ROUND_KINDS} == set(ROUND_KINDS)


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[OperatorClient, OperatorClient, str]]:
    """A served server (a [router], admin token ``adm``) whose roster names the operator
    ``ops``; yields (an unsigned client, the operator's client once enrolled, the URL)."""
    key = generate_key()
    write_private_key(key, tmp_path / "ops.pem")
    token = add_to_roster(tmp_path / "roster.json", name="ops", public_key=public_key_b64(key),
                          role="operator")
    port = free_port()  # the settings name it: requests are signed for the server they reach
    cfg = ServerSettings(db_path=tmp_path / "s.db", identity_key=tmp_path / "id.pem",
                         roster_file=tmp_path / "roster.json", admin_token="adm",  # type: ignore[arg-type]
                         router=CONFIG, port=port)
    with served(create_app(cfg), port) as url:
        anon = OperatorClient(Connection(server=url, insecure_http=True))
        enrolled = anon.enroll(EnrollRequest(name="ops", token=token,
                                             public_key=public_key_b64(key)))
        assert (enrolled.name, enrolled.role) == ("ops", "operator")
        yield anon, OperatorClient(Connection(server=url, insecure_http=True,
                                              key_file=tmp_path / "ops.pem",
                                              sender=enrolled.client_id)), url


def test_the_operator_client_round_trips_typed_objects(
        site: tuple[OperatorClient, OperatorClient, str], tmp_path: Path) -> None:
    anon, ops, url = site
    assert isinstance(anon.health(), Health) and anon.health().status == "ok"
    member = generate_key()
    added = ops.add_to_roster(RosterAdd(name="st-luke", public_key=public_key_b64(member)))
    luke = anon.enroll(EnrollRequest(name="st-luke", token=added.token,
                                     public_key=public_key_b64(member)))
    assert {m.name: m.state for m in ops.members()} == {"ops": "enrolled",
                                                       "st-luke": "enrolled"}
    # A round: the request schema in, the round's status out, its length the server's.
    info = ops.open_round(RoundCreate(kind="rm_fedavg", participants=[luke.client_id],
                                      min_clients=1))
    assert (info.kind, info.participants, info.vector_length) == (
        "rm_fedavg", [luke.client_id], CONFIG.num_params)
    assert ops.round(info.round_id).round_id == info.round_id
    assert [r.round_id for r in ops.rounds("open")] == [info.round_id]
    cancelled = ops.cancel_round(info.round_id, RoundCancel(reason="drill"))
    assert cancelled.status == "failed" and "drill" in (cancelled.error or "")
    assert ops.rounds("open") == []
    with pytest.raises(RequestRefused) as refused:
        ops.open_round(RoundCreate(kind="no_such_kind"))
    assert refused.value.status == 422 and "unknown round kind" in str(refused.value)
    # Router versions and lineages.
    [lineage] = ops.router_lineages()
    assert lineage.config.sha256 == ops.router_config().config.sha256 == CONFIG.sha256
    assert ops.router_versions() == []
    with pytest.raises(RequestRefused) as missing:
        ops.router_latest()
    assert missing.value.status == 404
    params = np.arange(CONFIG.num_params, dtype="<f4")
    with SignedClient(url, admin_token="adm") as admin:  # the federation's first router
        assert admin.request("POST", "/v1/router", params.tobytes(),
                             media="application/octet-stream").status_code == 200
    first = ops.router_version(1)
    assert np.array_equal(np.frombuffer(ops.router_parameters(first), "<f4"), params)
    restored = ops.rollback(RouterRollback(version=first.version))
    assert (restored.restored, restored.sha256) == (1, first.sha256)
    assert ops.router_latest() == restored
    assert isinstance(ops.alignment_stats(), AlignerStats)
    # A member's identity signs as a member: the operator's routes refuse it.
    write_private_key(member, tmp_path / "luke.pem")
    with pytest.raises(RequestRefused) as forbidden:
        OperatorClient(Connection(server=url, insecure_http=True, key_file=tmp_path / "luke.pem",
                                  sender=luke.client_id)).member_reports()
    assert forbidden.value.status == 403
    # The member's report, then its revocation.
    assert ops.member_report("st-luke").client_id == luke.client_id
    assert ops.revoke("st-luke", Revocation(reason="drill")).state == "revoked"


def test_fedmor_members_revoke_revokes(site: tuple[OperatorClient, OperatorClient, str],
                                       tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    _, ops, url = site
    added = ops.add_to_roster(RosterAdd(name="st-john", public_key=public_key_b64(
        generate_key())))
    assert added.token
    monkeypatch.setenv("FEDMOR_CONFIG_DIR", str(tmp_path / "no-profiles"))
    assert ops.conn.key_file is not None and ops.conn.sender is not None
    code = main(["members", "revoke", "st-john", "--reason", "left", "--server", url,
                 "--insecure-http", "--key-file", str(ops.conn.key_file),
                 "--sender", ops.conn.sender])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert out.out.startswith("revoked st-john (not enrolled)")
    assert {m.name: m.state for m in ops.members()}["st-john"] == "revoked"
