"""The churn benchmark's pure parts (examples/benchmarks/_churn_naming.py): an event is named
only where its member stands beside a cause word, and the headline's arithmetic."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parents[2] / "examples" / "benchmarks"))
from _churn_naming import (
    SERVER,
    Event,
    alignment_figures,
    effect,
    event_table,
    find_named,
    headline,
    judge,
    rounds_failed_with_enough_survivors,
    schedule,
)

MEMBERS = [f"site-{i}" for i in range(8)]


def _round(rid: int, status: str = "finished", **extra: object) -> dict[str, object]:
    return {"round_id": rid, "status": status, "participants": ["c-1", "c-2", "c-3", "c-4"],
            "dropouts": [], "refusals": [], "min_clients": 2, "params": {}, "error": None,
            "created_at": 100.0, "finished_at": 100.0 + rid, **extra}


def test_the_schedule_puts_one_event_in_a_round_between_quiet_first_and_last_rounds() -> None:
    events = schedule(MEMBERS, 8, "joiner")
    assert [e.round for e in events] == [2, 3, 4, 5, 6, 7]
    assert [e.kind for e in events] == ["killed", "data_removed", "slow", "server_killed",
                                        "revoked", "enrolled"]
    assert {e.member for e in events} == {"site-1", "site-2", "site-3", SERVER, "site-7",
                                          "joiner"}
    assert [e.round for e in schedule(MEMBERS, 14, "joiner")] == [2, 4, 6, 8, 10, 12]
    with pytest.raises(ValueError, match="8 rounds"):
        schedule(MEMBERS, 7, "joiner")


def test_a_participant_list_does_not_name_a_cause_but_a_failure_record_does() -> None:
    plain = _round(3, participants=["site-2", "site-3"])
    assert find_named(plain, ["site-2"], "data_removed") == []
    # Today's "dropouts" key names a dropout, not a missing data folder.
    dropped = _round(3, dropouts=["c-9"])
    assert find_named(dropped, ["site-2", "c-9"], "data_removed") == []
    assert find_named(dropped, ["site-2", "c-9"], "slow")[0].where == "dropouts.0"
    # The per-member failures list the member's report will add: {member, stage, reason}.
    failures = _round(3, failures=[{"member": "site-2", "stage": "masked_input",
                                    "reason": "local update failed: data directory not found"}])
    found = find_named(failures, ["site-2"], "data_removed")
    assert found and found[0].where == "failures.0.member" and "data directory" in found[0].text
    assert find_named(failures, ["site-3"], "data_removed") == []


def test_free_text_and_members_rows_name_a_member_with_its_cause() -> None:
    text = _round(4, error="round failed: site-3: missed the stage deadline")
    assert find_named(text, ["site-3"], "slow")[0].where == "error"
    rows = [{"name": "site-7", "state": "revoked", "client_id": "c-7"},
            {"name": "site-6", "state": "enrolled", "client_id": "c-6"}]
    assert find_named(rows, ["site-7"], "revoked")
    assert find_named(rows, ["site-6"], "revoked") == []
    assert find_named(rows, ["site-6"], "enrolled")


def test_a_members_row_names_a_cause_only_by_a_field_with_a_value() -> None:
    quiet = [{"name": "site-1", "state": "enrolled", "client_id": "c-1", "restarts": 0,
              "restarted_in_round": None, "revoked_at": None, "problem": None}]
    for kind in ("killed", "revoked", "data_removed"):
        assert find_named(quiet, ["site-1", "c-1"], kind) == [], kind
    restarted = [{**quiet[0], "restarts": 1, "restarted_in_round": 4}]
    assert find_named(restarted, ["site-1"], "killed")[0].where == "0.name"
    refused = [{**quiet[0], "problem": "not started: [router_training] pairs_dir: not found"}]
    assert "pairs_dir" in find_named(refused, ["site-1"], "data_removed")[0].text


def test_the_servers_own_event_is_named_by_its_cause_alone() -> None:
    assert find_named(_round(5), [], "server_killed") == []
    named = find_named(_round(5, error="the server restarted during stage share_keys"), [],
                       "server_killed")
    assert named[0].where == "error"
    resumed = find_named(_round(5, resumed="resumed after a server restart at stage share_keys"),
                         [], "server_killed")
    assert resumed[0].where == "resumed"


def test_a_failed_round_counts_only_when_enough_working_members_remained() -> None:
    rounds = [_round(1, "failed"), _round(2, "failed", min_clients=4), _round(3, "failed",
              params={"threshold": 4}), _round(4)]
    # Round 1: 4 - 1 disabled = 3 >= 2; round 2: 3 < 4; round 3: 4 >= threshold 4.
    assert rounds_failed_with_enough_survivors(rounds, {1: 1, 2: 1}) == 2


def test_the_headline_counts_stalls_from_the_run_start_to_its_end() -> None:
    # Scored at 1 and 2 s; the batch at 10 s failed entirely; the run ends at 12 s.
    figures = alignment_figures([(1.0, 16, 0), (2.0, 16, 4), (10.0, 16, 16)], 0.0, 12.0)
    assert figures == {"alignment_items": 48, "alignment_items_failed": 20,
                       "max_alignment_stall_s": 10.0}
    events = [Event("killed", "site-1", 2, named=True), Event("slow", "site-3", 3)]
    out = headline(members=8, events=events, rounds=[_round(1), _round(2), _round(3, "failed")],
                   disabled={3: 1}, alignment=figures, data_lost=0)
    assert out["events"] == 2 and out["events_named"] == 1
    assert out["rounds_finished"] == 2 and out["rounds_failed_with_enough_survivors"] == 1
    assert out["round_seconds_p50"] == 2.0
    assert set(out) == {"members", "events", "events_named", "rounds_attempted",
                        "rounds_finished", "rounds_failed_with_enough_survivors",
                        "alignment_items", "alignment_items_failed", "max_alignment_stall_s",
                        "round_seconds_p50", "data_lost"}


def test_the_effect_reads_the_events_round_record() -> None:
    e = Event("slow", "site-3", 4)
    assert effect(e, _round(4, dropouts=["c-3"]), "c-3") == "dropped out"
    assert effect(e, _round(4, refusals=[{"client_id": "c-3"}]), "c-3") == "refused"
    assert effect(e, _round(4), "c-9") == "not a participant"
    assert effect(e, _round(4), "c-3").startswith("none")
    assert effect(Event("server_killed", SERVER, 5), _round(5, "failed"), None) == "round failed"


def test_an_event_is_judged_named_by_its_rounds_views_or_the_next_ones_only() -> None:
    members: list[object] = []
    slow_row = [{"name": "site-3", "client_id": "c-3", "failures": "missed a stage deadline"}]
    views = {4: [_round(4, dropouts=["c-3"]), members], 5: [_round(5), members],
             6: [_round(6), slow_row]}
    late = Event("slow", "site-3", 4, round_id=4)
    judge(late, [4, 5, 6], views, {"site-3": "c-3"})
    # Its round's dropouts name it (a dropout is a slow member's cause).
    assert late.effect == "dropped out" and late.named and late.where == "rounds show 4: dropouts.0"
    unseen = Event("slow", "site-3", 4, round_id=4)
    views[4][0] = _round(4)
    judge(unseen, [4, 5, 6], views, {"site-3": "c-3"})  # round 6's view is two rounds on
    assert not unseen.named and unseen.where == ""
    table = event_table([late, unseen]).splitlines()
    assert len(table) == 3 and "yes" in table[1] and " no " in table[2]
