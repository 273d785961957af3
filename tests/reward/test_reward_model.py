"""RewardModel: scoring, the last-non-pad-token head, checkpoints, bad inputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from sdk.models import ARCHITECTURES
from sdk.reward import RewardCheckpointError, RewardModel
from sdk.reward._model import RewardInputError

ARCHS = sorted(ARCHITECTURES)
IMAGES = [Image.new("RGB", (84, 84), c) for c in ((200, 0, 0), (0, 0, 200), (0, 200, 0))]
PROMPTS = ["What color?", "What color is the big square in the middle?", "Color?"]
RESPONSES = ["red", "It is a blue square, drawn in the middle of a white picture.", "green"]




@pytest.mark.parametrize("arch", ARCHS)
def test_scores_ignore_padding_and_survive_save_load(
    arch: str, backbones: dict[str, Path], tmp_path: Path
) -> None:
    torch.manual_seed(0)
    model = RewardModel.from_backbone(backbones[arch])
    batch = model.encode(IMAGES, PROMPTS, RESPONSES)
    lengths = batch["attention_mask"].sum(1)
    assert len(set(lengths.tolist())) > 1  # the batch really is padded
    scores = model.score(IMAGES, PROMPTS, RESPONSES)
    assert scores.shape == (3,)
    assert scores.std() > 0  # the head reads different tokens for different samples
    # Each sample alone (no padding) scores the same as inside the padded batch.
    alone = torch.cat([model.score([i], [p], [r]) for i, p, r in
                       zip(IMAGES, PROMPTS, RESPONSES, strict=True)])
    torch.testing.assert_close(alone, scores, atol=1e-4, rtol=1e-4)
    # Batching inside score() does not change anything either.
    torch.testing.assert_close(model.score(IMAGES, PROMPTS, RESPONSES, batch_size=2), scores,
                               atol=1e-4, rtol=1e-4)
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "reward_config.json").read_text())
    assert config["architecture"] == arch
    assert config["head"]["in_features"] == 64
    loaded = RewardModel.from_pretrained(tmp_path)
    torch.testing.assert_close(loaded.score(IMAGES, PROMPTS, RESPONSES), scores, atol=0, rtol=0)


def test_head_reads_the_last_real_token(backbones: dict[str, Path]) -> None:
    model = RewardModel.from_backbone(backbones["qwen2_vl"]).eval()
    batch = model.encode(IMAGES[:2], PROMPTS[:2], RESPONSES[:2])
    with torch.no_grad():
        hidden = model.backbone.model(**batch).last_hidden_state  # (B, T, H)
        expected = torch.stack([
            model.head(hidden[b, int(batch["attention_mask"][b].sum()) - 1]).squeeze()
            for b in range(2)
        ])
        torch.testing.assert_close(model(batch), expected)


def test_wrong_architecture_checkpoint(backbones: dict[str, Path], tmp_path: Path) -> None:
    RewardModel.from_backbone(backbones["qwen2_vl"]).save_pretrained(tmp_path / "qwen")
    llava = RewardModel.from_backbone(backbones["llava_onevision"])
    with pytest.raises(RewardCheckpointError, match="qwen2_vl reward model; it cannot be loaded "
                                                    "into this llava_onevision"):
        llava.load_weights(tmp_path / "qwen")
    with pytest.raises(RewardCheckpointError, match="not the requested qwen2_5_vl"):
        RewardModel.from_pretrained(tmp_path / "qwen", architecture="qwen2_5_vl")
    with pytest.raises(RewardCheckpointError, match=r"reward_config\.json missing"):
        RewardModel.from_pretrained(tmp_path / "nothing-here")


def test_bad_inputs(backbones: dict[str, Path]) -> None:
    model = RewardModel.from_backbone(backbones["qwen2_5_vl"])
    with pytest.raises(RewardInputError, match="image 1 is a ndarray"):
        model.score([IMAGES[0], np.zeros((84, 84, 3))], ["q", "q"], ["a", "b"])
    with pytest.raises(RewardInputError, match="image 0 is a str"):
        model.score(["cat.png"], ["q"], ["a"])
    with pytest.raises(RewardInputError, match="response 0 is empty"):
        model.score([IMAGES[0]], ["q"], [""])
    too_long = " ".join(["elephant"] * 600)
    with pytest.raises(RewardInputError, match=r"over the model's limit of 512 tokens"):
        model.score([IMAGES[0]], ["q"], [too_long])
    with pytest.raises(RewardInputError, match="batch lengths differ"):
        model.score(IMAGES, PROMPTS, RESPONSES[:2])
    assert issubclass(RewardInputError, ValueError)
