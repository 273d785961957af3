"""The router configuration declared once: rounds take their length from it, another length is
refused naming it, and only the operator's lineage command changes it (nothing is wiped)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from sdk.membership import add_to_roster
from sdk.wire import ConsortiumRouterConfig, RouterConfigInfo, generate_key, public_key_b64
from server_app import ServerSettings
from server_app._app import create_app
from tests.apps.conftest import Member

ADMIN = {"authorization": "Bearer adm"}
SMALL = {"encoder": {"dim": 8}, "router": {"input_dim": 8, "d_model": 8, "num_layers": 1,
                                           "num_heads": 2, "dim_feedforward": 8}}
FIRST = ConsortiumRouterConfig.model_validate({**SMALL, "heads": ["m0", "m1"]})
SECOND = ConsortiumRouterConfig.model_validate({**SMALL, "heads": ["m0", "m1", "m2"]})


def _settings(tmp_path: Path, router: ConsortiumRouterConfig | None) -> ServerSettings:
    return ServerSettings(db_path=tmp_path / "s.db", identity_key=tmp_path / "id.pem",
                          roster_file=tmp_path / "roster.json", admin_token="adm",  # type: ignore[arg-type]
                          router=router, preload_dp_accountant=False,
                          public_urls=["http://testserver"])


@pytest.fixture
def members(tmp_path: Path) -> list[tuple[str, object, str]]:
    keys = [generate_key() for _ in range(2)]
    return [(f"m{i}", k, add_to_roster(tmp_path / "roster.json", name=f"m{i}",
                                       public_key=public_key_b64(k)))
            for i, k in enumerate(keys)]


@pytest.fixture
def declared(tmp_path: Path, members: list[tuple[str, object, str]]
             ) -> Iterator[tuple[TestClient, list[Member]]]:
    with TestClient(create_app(_settings(tmp_path, FIRST))) as tc:
        enrolled = []
        for name, key, token in members:
            got = tc.post("/v1/enroll", json={"name": name, "token": token,
                                              "public_key": public_key_b64(key)})  # type: ignore[arg-type]
            assert got.status_code == 200, got.text
            enrolled.append(Member(tc, key, got.json()["client_id"]))  # type: ignore[arg-type]
        yield tc, enrolled


def test_a_round_opened_without_a_length_takes_the_configuration(
        declared: tuple[TestClient, list[Member]]) -> None:
    tc, members = declared
    info = tc.post("/v1/rounds", json={"kind": "router_secagg", "min_clients": 2},
                   headers=ADMIN)
    assert info.status_code == 200, info.text
    assert info.json()["vector_length"] == FIRST.num_params
    assert info.json()["router_config"] == {"lineage": 1, "sha256": FIRST.sha256,
                                            "num_params": FIRST.num_params}
    # A member sees the same reference in its round and fetches the configuration it names.
    seen = members[0].call("GET", f"/v1/rounds/{info.json()['round_id']}").json()
    assert seen["router_config"]["sha256"] == FIRST.sha256
    served = RouterConfigInfo.model_validate(members[0].call("GET", "/v1/router/config").json())
    assert served.config == FIRST and served.config.sha256 == served.sha256 == FIRST.sha256
    assert tc.get("/v1/router/config").status_code == 401  # unsigned: refused


def test_a_round_of_another_length_is_refused_naming_the_configuration(
        declared: tuple[TestClient, list[Member]]) -> None:
    tc, _ = declared
    refused = tc.post("/v1/rounds", json={"kind": "router_secagg", "vector_length": 10000,
                                          "min_clients": 2}, headers=ADMIN)
    assert refused.status_code == 422
    detail = refused.json()["detail"]
    assert FIRST.sha256[:12] in detail and f"{FIRST.num_params} parameters" in detail
    assert "fedmor router lineage" in detail
    # The initial router is held to it too.
    wrong = np.zeros(FIRST.num_params + 1, dtype="<f4").tobytes()
    assert tc.post("/v1/router", content=wrong, headers=ADMIN).status_code == 422


def test_a_new_lineage_needs_the_command_and_keeps_old_versions(
        tmp_path: Path, declared: tuple[TestClient, list[Member]]) -> None:
    tc, members = declared
    first = np.arange(FIRST.num_params, dtype="<f4")
    assert tc.post("/v1/router", content=first.tobytes(), headers=ADMIN).status_code == 200
    # A restart with a changed [router] and no command is refused, naming both and the command.
    with pytest.raises(ValueError) as refused:
        create_app(_settings(tmp_path, SECOND))
    message = str(refused.value)
    assert FIRST.sha256[:12] in message and SECOND.sha256[:12] in message
    assert "fedmor router lineage" in message
    # A member may not start a lineage; the operator (here the admin token) may, audited.
    assert members[0].call("POST", "/v1/router/lineage",
                           SECOND.model_dump(mode="json")).status_code == 403
    rewards = tc.app.state.rewards  # type: ignore[attr-defined]
    assert rewards._router_settings()[2] == FIRST.heads
    started = tc.post("/v1/router/lineage", json=SECOND.model_dump(mode="json"), headers=ADMIN)
    assert started.status_code == 200, started.text
    assert rewards._router_settings()[2] == SECOND.heads  # the alignment follows it at once
    assert started.json()["lineage"] == 2 and started.json()["sha256"] == SECOND.sha256
    again = tc.post("/v1/router/lineage", json=SECOND.model_dump(mode="json"), headers=ADMIN)
    assert again.status_code == 409
    # Rounds now open on the new configuration, from no version; the old one stays readable.
    info = tc.post("/v1/rounds", json={"kind": "router_secagg", "min_clients": 2},
                   headers=ADMIN).json()
    assert info["vector_length"] == SECOND.num_params and info["base_version"] is None
    assert tc.get("/v1/router/latest", headers=ADMIN).status_code == 404
    old = members[0].call("GET", "/v1/router/1")
    assert np.array_equal(np.frombuffer(old.content, dtype="<f4"), first)
    history = [RouterConfigInfo.model_validate(x)
               for x in members[0].call("GET", "/v1/router/lineages").json()]
    assert [(h.lineage, h.config, h.current) for h in history] == [(1, FIRST, False),
                                                                   (2, SECOND, True)]
    assert members[0].call("GET", "/v1/router/config?lineage=1").json()["sha256"] == FIRST.sha256
    # Rolling back to a version of the old lineage is refused: rounds follow the new one.
    assert tc.post("/v1/router/rollback", json={"version": 1}, headers=ADMIN).status_code == 409
    # Restarting with the new configuration declared works; with the old one, it is refused.
    create_app(_settings(tmp_path, SECOND)).state.store.close()
    with pytest.raises(ValueError, match="fedmor router lineage"):
        create_app(_settings(tmp_path, FIRST))
    with pytest.raises(ValueError, match="not declared in the settings"):
        create_app(_settings(tmp_path, None))  # a lineage exists: [router] may not vanish


def test_a_store_without_configuration_adopts_the_declared_one(tmp_path: Path) -> None:
    with TestClient(create_app(_settings(tmp_path, None))) as tc:
        body = np.zeros(FIRST.num_params, dtype="<f4").tobytes()
        assert tc.post("/v1/router", content=body, headers=ADMIN).status_code == 200
    with TestClient(create_app(_settings(tmp_path, FIRST))) as tc:
        latest = tc.get("/v1/router/latest", headers=ADMIN).json()
        assert latest["version"] == 1 and latest["router_config"]["lineage"] == 1


def test_the_alignment_settings_follow_the_declared_router(tmp_path: Path) -> None:
    cfg = _settings(tmp_path, FIRST)
    assert cfg.alignment.members == ["m0", "m1"] and cfg.alignment.encoder["dim"] == 8
    with pytest.raises(ValueError, match="declare the router once"):
        ServerSettings(router=FIRST, alignment={"router": {"num_layers": 3}})  # type: ignore[arg-type]
