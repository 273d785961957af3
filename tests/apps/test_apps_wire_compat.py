"""Responses tolerate fields a newer app adds; requests refuse unknown fields.

A member app is upgraded after the server (hospitals patch on their own schedule): a server
that adds a field to ``RoundInfo`` must not break every older member, while a request with
a field the receiver does not know is refused (422), never half-understood."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel, ValidationError

import sdk.wire as wire
import sdk.wire._schemas as wire_schemas
from tests.apps.conftest import Member

RESPONSES = ["AlignerFeedbackAck", "AlignerResponse", "AlignerStats", "AuditBudget",
             "ClipBoundAck", "DPAccount", "DPTerms", "EnrollResponse", "ErrorBody", "Health",
             "MissingImages", "PendingQuery", "Refusal", "RewardResponse", "RoundInfo",
             "RouterConfigInfo", "RouterConfigRef", "RouterVersionInfo", "StageAck", "StageBroadcast", "Work"]
REQUESTS = ["AlignerFeedback", "AlignerItem", "AlignerRequest", "ClipBoundAnnouncement",
            "ConsortiumRouterConfig",
            "EnrollRequest", "KeyRotation", "Revocation", "RewardAnswer", "RewardItem",
            "RewardRequest", "RoundCreate", "RoundRefusal", "RouterRollback", "StageSubmit"]


def _model(name: str) -> type[BaseModel]:
    model = getattr(wire, name, None) or getattr(wire_schemas, name)  # ErrorBody: private
    assert issubclass(model, BaseModel)
    return model


@pytest.mark.parametrize("name", RESPONSES)
def test_every_response_model_ignores_unknown_fields(name: str) -> None:
    assert _model(name).model_config.get("extra") == "ignore"


@pytest.mark.parametrize("name", REQUESTS)
def test_every_request_model_refuses_unknown_fields(name: str) -> None:
    assert _model(name).model_config.get("extra") == "forbid"


def test_an_older_member_parses_the_round_info_of_a_newer_server(
        server: tuple[TestClient, list[Member]]) -> None:
    tc, members = server
    admin = {"authorization": "Bearer adm"}
    created = tc.post("/v1/rounds", json={"kind": "router_secagg", "vector_length": 4,
                                          "min_clients": 2}, headers=admin)
    assert created.status_code == 200, created.text
    resp = members[0].call("GET", f"/v1/rounds/{created.json()['round_id']}")
    assert resp.status_code == 200, resp.text
    # What a later server version might add, at the top level and inside a nested response.
    newer: dict[str, Any] = resp.json() | {"attestation": {"quote": "abc"}, "region": "eu"}
    newer["refusals"] = [{"client_id": "c", "at": 1.0, "reason": "dp", "detail": "",
                          "severity": "high"}]
    info = wire.RoundInfo.model_validate(newer)
    assert info.round_id == created.json()["round_id"] and info.kind == "router_secagg"
    assert info.refusals[0].reason == "dp"
    assert "region" not in info.model_dump()  # dropped, not kept as an untyped attribute
    # The runner's own view of a round (its policy check) reads the parsed info unchanged.
    from client_app._policy import SitePolicy, check_round

    assert check_round(SitePolicy(min_participants=2, min_threshold=2), info).privacy.masked


def test_a_request_with_an_unknown_field_is_still_refused(
        server: tuple[TestClient, list[Member]]) -> None:
    tc, _ = server
    resp = tc.post("/v1/rounds", json={"kind": "router_secagg", "vector_length": 4,
                                       "min_clients": 2, "priority": "high"},
                   headers={"authorization": "Bearer adm"})
    assert resp.status_code == 422 and "priority" in resp.text
    with pytest.raises(ValidationError, match="priority"):
        wire.RoundCreate.model_validate({"vector_length": 4, "priority": "high"})


def test_the_aligners_item_is_the_members_item_plus_its_options() -> None:
    # One item type from the aligner to the member: the server passes on what it received.
    assert issubclass(wire.AlignerItem, wire.RewardItem)
    assert set(wire.AlignerItem.model_fields) - set(wire.RewardItem.model_fields) == {"options"}
    with pytest.raises(ValidationError, match="group"):  # nothing reads a group: not sent
        wire.AlignerItem(image_sha256="0" * 64, prompt="p", response="r", group="g")
