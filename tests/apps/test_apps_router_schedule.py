"""A member's router update follows the federation's lr schedule, clocked by the round's params."""

from pathlib import Path

import numpy as np
import pytest

from sdk.data import SynthConfig, synthesize
from sdk.router import (
    HashingEncoder,
    LocalTrainingConfig,
    Router,
    RouterConfig,
    SiteRound,
    default_federated_config,
    local_router_update,
)
from sdk.router._site_update import RouterUpdateError
from sdk.wire import ROUTER_ROUND_PARAM, ConsortiumRouterConfig, RoundInfo


@pytest.fixture
def site(tmp_path: Path) -> tuple[ConsortiumRouterConfig, Path]:
    """The consortium's router (site-0's head first) and site-0's training pairs."""
    synthesize(SynthConfig(clients=("diagram",), train_pairs=16, eval_pairs=1, heldout_pairs=1,
                           warmup_queries=0, policy_train_queries=0, policy_eval_queries=0),
               tmp_path / "data")
    federated = default_federated_config(rounds=4)
    config = ConsortiumRouterConfig(
        router=RouterConfig(input_dim=64, d_model=16, num_layers=1, num_heads=2,
                            dim_feedforward=32),
        heads=["site-0", "other"],
        federated=federated.model_copy(
            update={"local": LocalTrainingConfig(epochs=1, batch_size=64, lr=3e-3)}))
    return config, tmp_path / "data/clients/diagram/train"


def _update(site: tuple[ConsortiumRouterConfig, Path], params: dict[str, object],
            round_id: int = 1) -> tuple[np.ndarray, int]:
    config, pairs = site
    info = RoundInfo.model_construct(round_id=round_id, params=params,
                                     vector_length=config.num_params)
    out = local_router_update(SiteRound(config=config, name="site-0", info=info, base=None,
                                        pairs_dir=pairs))
    return out.params, out.num_samples


def test_the_round_index_sets_the_local_lr_and_seed(
        site: tuple[ConsortiumRouterConfig, Path]) -> None:
    config, _ = site
    first, last = config.federated.local_config(0, 0), config.federated.local_config(3, 0)
    assert first.lr == pytest.approx(3e-3) and last.lr == pytest.approx(3e-4)
    assert first.seed != last.seed != config.federated.local_config(3, 1).seed
    # The same base and data: only the round's place in the schedule differs.
    early, n = _update(site, {ROUTER_ROUND_PARAM: 0})
    late, _ = _update(site, {ROUTER_ROUND_PARAM: 3})
    start = Router(config.router, config.heads,
                   HashingEncoder(config.encoder).encoder_id).get_flat_params()
    assert n == 16
    assert np.linalg.norm(late - start) < 0.5 * np.linalg.norm(early - start)
    # No index (a coordinator that predates the schedule) means the first round, whatever the id.
    again, _ = _update(site, {}, round_id=7)
    np.testing.assert_array_equal(again, early)


@pytest.mark.parametrize("bad", [-1, "2", 1.5, True])
def test_a_malformed_round_index_is_refused(site: tuple[ConsortiumRouterConfig, Path],
                                            bad: object) -> None:
    with pytest.raises(RouterUpdateError, match=ROUTER_ROUND_PARAM):
        _update(site, {ROUTER_ROUND_PARAM: bad})
