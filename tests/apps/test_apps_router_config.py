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
    assert rewards._serving().heads == FIRST.heads
    started = tc.post("/v1/router/lineage", json=SECOND.model_dump(mode="json"), headers=ADMIN)
    assert started.status_code == 200, started.text
    assert rewards._serving().heads == SECOND.heads  # the alignment follows it at once
    assert started.json()["lineage"] == 2 and started.json()["sha256"] == SECOND.sha256
    again = tc.post("/v1/router/lineage", json=SECOND.model_dump(mode="json"), headers=ADMIN)
    assert again.status_code == 409
    # Rounds now open on the new configuration, from its first version: the old router
    # carried over (same trunk, m2's head new); the old version stays readable.
    info = tc.post("/v1/rounds", json={"kind": "router_secagg", "min_clients": 2},
                   headers=ADMIN).json()
    assert info["vector_length"] == SECOND.num_params and info["base_version"] == 2
    latest = tc.get("/v1/router/latest", headers=ADMIN).json()
    assert (latest["version"], latest["carried_from"]) == (2, 1)
    old = members[0].call("GET", "/v1/router/1")
    assert np.array_equal(np.frombuffer(old.content, dtype="<f4"), first)
    history = [RouterConfigInfo.model_validate(x)
               for x in members[0].call("GET", "/v1/router/lineages").json()]
    assert [(h.lineage, h.config, h.current, h.first_version, h.latest_version)
            for h in history] == [(1, FIRST, False, 1, 1), (2, SECOND, True, 2, 2)]
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


def test_a_lineage_of_another_trunk_serves_the_old_router_until_its_first_version(
        declared: tuple[TestClient, list[Member]]) -> None:
    tc, _ = declared
    first = np.arange(FIRST.num_params, dtype="<f4")
    assert tc.post("/v1/router", content=first.tobytes(), headers=ADMIN).status_code == 200
    # Fewer heads, same trunk: carried over (m0's row kept), selection goes on.
    fewer = ConsortiumRouterConfig.model_validate({**SMALL, "heads": ["m0"]})
    assert tc.post("/v1/router/lineage", json=fewer.model_dump(mode="json"),
                   headers=ADMIN).status_code == 200
    carried = np.frombuffer(tc.get("/v1/router/2", headers=ADMIN).content, dtype="<f4")
    d = SMALL["router"]["d_model"]
    trunk = FIRST.num_params - 2 * (d + 1)
    assert carried.tobytes() == np.concatenate(
        [first[:trunk + d], first[-2:-1]]).tobytes()  # trunk, W_m0, b_m0
    # Another trunk cannot be carried: rounds start afresh, the old router serves meanwhile.
    wider = ConsortiumRouterConfig.model_validate(
        {**SMALL, "router": {**SMALL["router"], "dim_feedforward": 16}, "heads": ["m0", "m1"]})
    assert tc.post("/v1/router/lineage", json=wider.model_dump(mode="json"),
                   headers=ADMIN).status_code == 200
    latest = tc.get("/v1/router/latest", headers=ADMIN)
    assert latest.status_code == 404
    assert latest.json()["detail"].endswith("none yet in lineage 3 (lineage 2 latest v2)")
    serving = tc.app.state.rewards._serving()  # type: ignore[attr-defined]
    assert (serving.version, serving.lineage, serving.heads) == (2, 2, ["m0"])
    info = tc.post("/v1/rounds", json={"kind": "router_secagg", "min_clients": 2},
                   headers=ADMIN).json()
    assert info["vector_length"] == wider.num_params and info["base_version"] is None


def test_a_carried_router_keeps_what_the_online_router_learned() -> None:
    import torch

    from sdk.router import (
        HashingEncoder,
        HashingEncoderConfig,
        NeuralThompsonRouter,
        Router,
    )
    from server_app._router._config import carried_router
    from server_app._router._serving import carry_online_state

    encoder_id = HashingEncoder(HashingEncoderConfig.model_validate(SMALL["encoder"])).encoder_id
    old = NeuralThompsonRouter(Router(FIRST.router, FIRST.heads, encoder_id))
    flat = carried_router(old.router.get_flat_params(), FIRST, SECOND)  # the published one
    z = torch.randn(6, SMALL["router"]["d_model"])
    old.update(z, torch.tensor([0, 1, 0, 1, 0, 0]), torch.ones(6))  # the bandit learned
    learned = old.state_dict()
    assert flat is not None
    router = Router(SECOND.router, SECOND.heads, encoder_id)
    router.set_flat_params(flat)
    new = NeuralThompsonRouter(router)
    new.load_state_dict(carry_online_state(learned, new.state_dict(), FIRST.heads,
                                           SECOND.heads))
    state = new.state_dict()
    for key in ("head.weight", "head.bias", "u_diag"):
        assert torch.equal(state[key][:2], learned[key][:2]), key
    assert not state["head.weight"][2].any() and int(state["num_updates"]) == 6
    assert torch.equal(state["u_diag"][2], torch.full_like(state["u_diag"][2], new.config.lam))


def test_a_member_that_joins_starts_a_carried_lineage_and_the_settings_may_stay(
        tmp_path: Path, declared: tuple[TestClient, list[Member]]) -> None:
    tc, members = declared
    first = np.arange(FIRST.num_params, dtype="<f4")
    assert tc.post("/v1/router", content=first.tobytes(), headers=ADMIN).status_code == 200
    key = generate_key()
    token = add_to_roster(tmp_path / "roster.json", name="m2", public_key=public_key_b64(key))
    tc.post("/v1/roster/reload", headers=ADMIN).raise_for_status()
    body = {"name": "m2", "token": token, "public_key": public_key_b64(key)}
    assert tc.post("/v1/enroll", json=body).status_code == 200
    assert tc.post("/v1/enroll", json=body).status_code == 200  # a retry starts nothing
    lineages = [RouterConfigInfo.model_validate(x)
                for x in members[0].call("GET", "/v1/router/lineages").json()]
    assert [(x.lineage, x.config.heads, x.started_by, x.first_version) for x in lineages] == [
        (1, FIRST.heads, "settings", 1), (2, ["m0", "m1", "m2"], "enrollment of m2", 2)]
    serving = tc.app.state.rewards._serving()  # type: ignore[attr-defined]
    assert serving.version == 2 and serving.masked == {
        "m2": "joined in lineage 2, not trained in a round yet"}
    # The settings may keep the lineage the join started from; another one is still refused.
    create_app(_settings(tmp_path, FIRST)).state.store.close()
    other = FIRST.model_copy(update={"heads": ["m1", "m0"]})
    with pytest.raises(ValueError, match="fedmor router lineage"):
        create_app(_settings(tmp_path, ConsortiumRouterConfig.model_validate(
            other.model_dump())))
