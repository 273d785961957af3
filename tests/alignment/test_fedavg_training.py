"""train_fedavg_reward_model: one shared reward model from FedAvg rounds over the clients' pairs."""

from pathlib import Path

import pytest
import torch

from sdk.alignment import train_fedavg_reward_model
from sdk.alignment._fedavg import fedavg_state_dicts
from sdk.data import load_pairs
from sdk.models import build_tiny_vlm
from sdk.reward import LoraSettings, RewardModel, RewardTrainingConfig, train_reward_model


def test_one_round_is_the_pair_weighted_average_of_the_local_models(
        data_dir: Path, tmp_path: Path) -> None:
    backbone = build_tiny_vlm("qwen2_vl", tmp_path / "vlm", corpus=["which bar", "red", "SALE"])
    clients = [load_pairs(data_dir / "clients" / c / "train") for c in ("diagram", "poster")]
    clients[1] = clients[1][:2]  # unequal sizes: the weights matter
    config = RewardTrainingConfig(steps=2, batch_size=2, warmup_steps=0)
    torch.manual_seed(0)
    scorer = train_fedavg_reward_model(backbone, clients, rounds=1, config=config)

    # The same round by hand: both clients start from the same initial model.
    torch.manual_seed(0)
    model = RewardModel.from_backbone(backbone)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    local = config.model_copy(update={"fit_normalizer": False, "eval_every": 0})
    states = []
    for k, pairs in enumerate(clients):
        model.load_state_dict(start)
        train_reward_model(model, pairs, [], local.model_copy(update={"seed": k}), progress=False)
        states.append({n: v.clone() for n, v in model.state_dict().items()})
    expected = fedavg_state_dicts(states, [len(p) for p in clients])
    got = scorer._model.state_dict()
    for name, value in expected.items():
        torch.testing.assert_close(got[name], value)
    assert not torch.equal(states[0]["head.weight"], states[1]["head.weight"])

    pairs = clients[0]
    scores = scorer.score([p.image for p in pairs], [p.prompt for p in pairs],
                          [p.chosen for p in pairs])
    assert all(-scorer.clip <= s <= scorer.clip for s in scores)


def test_no_pairs_or_no_round_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one pair per client"):
        train_fedavg_reward_model(tmp_path, [[]], rounds=1)
    with pytest.raises(ValueError, match="rounds >= 1"):
        train_fedavg_reward_model(tmp_path, [[object()]], rounds=0)  # type: ignore[list-item]


def test_the_shared_model_takes_the_configs_lora_and_seed(data_dir: Path, tmp_path: Path) -> None:
    backbone = build_tiny_vlm("qwen2_vl", tmp_path / "vlm", corpus=["which bar", "red", "SALE"])
    clients = [load_pairs(data_dir / "clients" / c / "train")[:2] for c in ("diagram", "poster")]
    config = RewardTrainingConfig(steps=1, batch_size=2, warmup_steps=0, seed=3,
                                  lora=LoraSettings(r=2, alpha=4))
    states = []
    for outside_seed in (0, 1):  # whatever the caller's torch seed, config.seed decides
        torch.manual_seed(outside_seed)
        model = train_fedavg_reward_model(backbone, clients, rounds=1, config=config)._model
        assert model.lora == config.lora
        states.append(model.state_dict())
    assert any(".lora_A." in name for name in states[0])
    for name, value in states[0].items():
        torch.testing.assert_close(states[1][name], value, atol=0, rtol=0)
