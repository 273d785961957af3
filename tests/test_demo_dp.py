"""``fedmor demo --dp``: the switch reaches stage B's round parameters and the members' site
policies, and stage B's rounds over REST run with DP and record the epsilon the accountant gives
(server and member agree)."""

import base64
import sqlite3
from pathlib import Path

import pytest

from client_app._policy import PolicyRefused, SitePolicy, check_epsilon, check_round
from fedmor_local import LocalConsortium
from fedmor_local._demo import DemoConfig
from fedmor_local._demo_stage_b import (
    dp_options,
    member_router_training,
    round_params,
    router_config,
    site_policy,
    train_router,
)
from sdk.cli import build_parser
from sdk.data import SynthConfig, load_pairs, synthesize
from sdk.rounds import ROUND_KINDS
from sdk.secagg import DPConfig
from sdk.wire import RoundInfo, RoundSpec


def _config(*argv: str, **fields: object) -> DemoConfig:
    args = build_parser().parse_args(["demo", *argv])
    return DemoConfig(seed=args.seed, **dp_options(args), **fields)  # as the handler builds it


def _info(config: DemoConfig, index: int) -> RoundInfo:
    n = len(config.clients)
    spec = RoundSpec(round_id=index + 1, kind="router_secagg",
                     participants=[f"c{i}" for i in range(n)], public_keys=[base64.b64encode(bytes(32)).decode()] * n,
                     vector_length=100, min_clients=n, stage_deadline_s=60.0,
                     params=ROUND_KINDS["router_secagg"].prepare(round_params(config, index,
                                                                                1000)))
    return RoundInfo.model_construct(**spec.model_dump(), created_at=float(index))


def test_the_dp_flag_reaches_the_round_params_and_the_site_policy() -> None:
    plain = _config()
    assert not plain.dp and "dp" not in round_params(plain, 0, 1000)
    assert check_round(SitePolicy(**site_policy(plain)), _info(plain, 0)).privacy.dp is None

    config = _config("--dp", "--dp-epsilon", "4")
    assert config.dp and config.dp_epsilon == 4.0
    policy = SitePolicy(**site_policy(config))
    assert policy.require_dp
    with pytest.raises(PolicyRefused, match="differential-privacy"):
        check_round(policy, _info(plain, 0))  # a demo member under --dp refuses a plain round
    # The server's round kind accepts the params (clip range fits the noise) and their noise
    # reaches the target epsilon over the demo's rounds, no sooner: the members' budget admits
    # exactly router_rounds rounds.
    target = DPConfig(target_epsilon=4.0, rounds=config.router_rounds, clip_norm=1.0)
    spent: list[float] = []
    for index in range(config.router_rounds):
        terms = check_round(policy, _info(config, index)).privacy.dp
        assert terms is not None
        assert terms.noise_multiplier == pytest.approx(target.resolved_noise_multiplier())
        check_epsilon(policy, spent, terms)
        spent.append(terms.noise_multiplier)
    assert target.epsilon() == pytest.approx(4.0, abs=0.02)
    with pytest.raises(PolicyRefused, match="epsilon"):
        check_epsilon(policy, spent, terms)


def test_stage_b_rounds_over_rest_run_with_dp_and_record_the_epsilon(tmp_path: Path) -> None:
    config = _config("--dp", clients=("detail", "safety"), train_pairs=32, eval_pairs=8,
                     heldout_pairs=8, router_rounds=2, router_max_pairs=16,
                     stage_deadline_s=60.0)
    synthesize(SynthConfig(seed=0, clients=config.clients, train_pairs=32, eval_pairs=8,
                           heldout_pairs=8, warmup_queries=0, policy_train_queries=0,
                           policy_eval_queries=0), tmp_path / "data")
    splits = {c: load_pairs(tmp_path / "data" / "clients" / c / "eval") for c in config.clients}
    with LocalConsortium(tmp_path / "consortium", 2, demo=True, policy=site_policy(config),
                         server={"stage_deadline_s": 60.0}) as consortium:
        declared = router_config(config, consortium.names)
        consortium.server_cfg["router"] = declared.model_dump(mode="json")
        for site, client in zip(consortium.names, config.clients, strict=True):
            consortium.client_cfg[site]["router_training"] = member_router_training(tmp_path,
                                                                                    client)
        consortium.start()
        consortium.wait_enrolled()
        _, rounds = train_router(config, consortium, declared, splits)
        ledgers = []
        for site in consortium.names:
            with sqlite3.connect(consortium.client_cfg[site]["db_path"]) as db:
                ledgers.append([e for (e,) in db.execute("SELECT epsilon FROM dp_ledger "
                                                         "ORDER BY at")])
    accountant = DPConfig(target_epsilon=config.dp_epsilon, rounds=2, clip_norm=1.0)
    server = [r["epsilon"] for r in rounds]
    assert server == pytest.approx([accountant.epsilon(1), accountant.epsilon(2)], rel=1e-6)
    assert server[-1] == pytest.approx(config.dp_epsilon, abs=0.02)
    assert ledgers == [pytest.approx(server, rel=1e-9)] * 2
    assert all(0 <= r["routing_accuracy"] <= 1 for r in rounds)
