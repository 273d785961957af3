"""``fedmor demo --device/--dtype``: the flags become the demo's ``Runtime``, which every stage
gets (checked on the real warm-up stage, in bfloat16) and the client apps' settings carry."""

from pathlib import Path

import torch
from safetensors.torch import load_file

from client_app import ClientSettings
from fedmor_local._demo import DemoConfig, _policy, client_runtime, config_from_args
from sdk.cli import build_parser
from sdk.data import SynthConfig, synthesize
from sdk.models import Runtime


def _config(*flags: str) -> DemoConfig:
    return config_from_args(build_parser().parse_args(["demo", *flags]))


def test_demo_flags_become_the_runtime_of_every_stage_and_client_app(tmp_path: Path) -> None:
    config = _config("--device", "cpu", "--dtype", "bfloat16")
    assert config.runtime() == Runtime(device="cpu", dtype="bfloat16")
    assert _config().runtime() == Runtime()  # no flags: auto, as every other command
    # The saved run config keeps them.
    assert DemoConfig.model_validate_json(config.model_dump_json()).runtime() == config.runtime()
    # Each client app's settings (what the demo writes for it) place its scorer the same way.
    settings = ClientSettings(db_path=tmp_path / "c.db", **client_runtime(config))
    assert settings.reward_runtime() == config.runtime()


def test_demo_warm_up_runs_in_the_demo_dtype(tmp_path: Path) -> None:
    config = DemoConfig(clients=("detail",), dtype="bfloat16", device="cpu", warmup_steps=2)
    synthesize(SynthConfig(clients=config.clients, train_pairs=8, eval_pairs=8, heldout_pairs=8,
                           warmup_queries=8, policy_train_queries=4, policy_eval_queries=4),
               tmp_path / "data")
    policy = _policy(config, tmp_path, tmp_path / "cache")
    (weights,) = policy.glob("*.safetensors")
    assert {t.dtype for t in load_file(str(weights)).values()} == {torch.bfloat16}
