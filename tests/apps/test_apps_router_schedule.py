"""The router-update source follows the federation's lr schedule, clocked by the round's params."""

from pathlib import Path

import numpy as np
import pytest

from client_app._router_update import router_update
from sdk.data import SynthConfig, synthesize
from sdk.router import (
    LocalTrainingConfig,
    RouterConfig,
    RouterUpdateSpec,
    SiteData,
    default_federated_config,
)
from sdk.router._site_update import ROUTER_SPEC_ENV as SPEC_ENV
from sdk.router._site_update import RouterUpdateError
from sdk.wire import ROUTER_ROUND_PARAM, RoundInfo


@pytest.fixture
def spec_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RouterUpdateSpec:
    synthesize(SynthConfig(clients=("diagram",), train_pairs=16, eval_pairs=1, heldout_pairs=1,
                           warmup_queries=0, policy_train_queries=0, policy_eval_queries=0),
               tmp_path / "data")
    federated = default_federated_config(rounds=4)
    spec = RouterUpdateSpec(
        router=RouterConfig(input_dim=64, d_model=16, num_layers=1, num_heads=2,
                            dim_feedforward=32),
        client_ids=["diagram", "other"],
        federated=federated.model_copy(
            update={"local": LocalTrainingConfig(epochs=1, batch_size=64, lr=3e-3)}),
        sites={"site-0": SiteData(index=0, pairs_dir=tmp_path / "data/clients/diagram/train")},
    )
    path = tmp_path / "spec.json"
    path.write_text(spec.model_dump_json())
    monkeypatch.setenv(SPEC_ENV, str(path))
    return spec


def _info(spec: RouterUpdateSpec, params: dict[str, object], round_id: int = 1) -> RoundInfo:
    return RoundInfo.model_construct(round_id=round_id, params=params,
                                     vector_length=spec.build_router().num_params())


def test_the_round_index_sets_the_local_lr_and_seed(spec_env: RouterUpdateSpec) -> None:
    first, last = spec_env.local_config(0, 0), spec_env.local_config(3, 0)
    assert first.lr == pytest.approx(3e-3) and last.lr == pytest.approx(3e-4)
    assert first.seed != last.seed != spec_env.local_config(3, 1).seed
    # The same base and data: only the round's place in the schedule differs.
    early, n = router_update("site-0", _info(spec_env, {ROUTER_ROUND_PARAM: 0}), None)
    late, _ = router_update("site-0", _info(spec_env, {ROUTER_ROUND_PARAM: 3}), None)
    start = spec_env.build_router().get_flat_params()
    assert n == 16
    assert np.linalg.norm(late - start) < 0.5 * np.linalg.norm(early - start)
    # No index (a coordinator that predates the schedule) means the first round, whatever the id.
    again, _ = router_update("site-0", _info(spec_env, {}, round_id=7), None)
    np.testing.assert_array_equal(again, early)


@pytest.mark.parametrize("bad", [-1, "2", 1.5, True])
def test_a_malformed_round_index_is_refused(spec_env: RouterUpdateSpec, bad: object) -> None:
    with pytest.raises(RouterUpdateError, match=ROUTER_ROUND_PARAM):
        router_update("site-0", _info(spec_env, {ROUTER_ROUND_PARAM: bad}), None)
