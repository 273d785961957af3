"""A member whose answer comes after its stage closed (it was slow, stopped or cut off past the
stage deadline) leaves the round with one clear line, forgets its secrets and tells the server
nothing more: the server already counts it as a dropout of that stage.

The server is the real app in process with three enrolled members; two of them answer every
stage through the round manager, and the deadline passes by the manager's clock (``tick``),
so the test waits for nothing."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import pytest

from client_app import ClientRunner, ClientSettings, ClientStore
from client_app._demo import demo_update
from client_app._round_walk import MemberRound, ready_update
from fedmor_local import OPEN_POLICY
from sdk.rounds import ROUND_KINDS
from sdk.wire import RoundCreate, SignedClient
from server_app._rounds._manager import RoundManager

from .conftest import Member, enrolled_team

LENGTH = 4


def _round_without_m0(tmp_path: Path, finish: bool) -> tuple[Member, RoundManager, int]:
    """A SecAgg+ round of m0, m1, m2 whose first stage closed at its deadline without m0;
    with ``finish``, m1 and m2 then finish it."""
    team = enrolled_team(tmp_path, {"m0": "member", "m1": "member", "m2": "member"},
                         clip_bound=1.0)
    rounds: RoundManager = team["m0"].tc.app.state.rounds  # type: ignore[attr-defined]
    info = rounds.create(RoundCreate(kind="router_secagg", vector_length=LENGTH, min_clients=2,
                                     params={"threshold": 2, "degree": 2}))
    terms = ROUND_KINDS[info.kind].terms(info)
    others = {m.client_id: MemberRound.join(terms, client_id=m.client_id, key=m.key,
                                            update=ready_update(np.ones(LENGTH, np.float32), 1),
                                            state=None)
              for m in (team["m1"], team["m2"])}
    for i, stage in enumerate(info.stages):
        if i == 1 and not finish:
            break
        for client, half in others.items():
            server_input = rounds.broadcast(info.round_id, stage, client)
            rounds.submit(info.round_id, stage, client,
                          half.message(stage, server_input.payload or {}))
        if i == 0:  # m0 never answered: its stage closes at the deadline, without it
            rounds.tick(now=time.time() + 10 * info.stage_deadline_s)
    assert rounds.info(info.round_id).status == ("finished" if finish else "open")
    return team["m0"], rounds, info.round_id


@pytest.mark.parametrize("finish", [True, False], ids=["round-finished", "round-moved-on"])
def test_a_member_past_its_stage_deadline_drops_out_with_one_line(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, finish: bool) -> None:
    m0, rounds, rid = _round_without_m0(tmp_path, finish)
    store = ClientStore(tmp_path / "m0.db")
    store.put("client_id", m0.client_id)
    runner = ClientRunner(ClientSettings(name="m0", db_path=tmp_path / "m0.db",
                                         policy=OPEN_POLICY),  # type: ignore[arg-type]
                          store=store, key=m0.key, update_fn=demo_update)
    runner.http = SignedClient(http=m0.tc)  # the real app, in process
    with caplog.at_level(logging.INFO, logger="fedmor.client"):
        assert runner.run_round(rid) == "abandoned"
    lines = [r.getMessage() for r in caplog.records if f"round {rid}" in r.getMessage()]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"round {rid}: stage advertise_keys closed before this member's "
                               f"answer arrived; dropped out ("), lines
    assert store.round_status(rid) == "abandoned"
    assert rid not in store.rounds_with_secrets()  # the round's secrets are forgotten
    # The server's account is the deadline's: the member reported no failure of its own.
    (failure,) = rounds.info(rid).failures
    assert (failure.client_id, failure.stage) == (m0.client_id, "advertise_keys")
    assert failure.reason.startswith("no answer by the stage deadline"), failure.reason


def test_the_first_stage_of_an_ended_round_has_no_input(tmp_path: Path) -> None:
    m0, _, rid = _round_without_m0(tmp_path, finish=True)
    # Not an empty "ready" input, which a member's half would fail to read.
    out = m0.call("GET", f"/v1/rounds/{rid}/stages/advertise_keys").json()
    assert (out["ready"], out["round_status"], out.get("payload")) == (False, "finished", None)
