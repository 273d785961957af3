"""Which modules LoraSettings adapts, on every supported architecture."""

from __future__ import annotations

from pathlib import Path

import pytest

from sdk.models import ARCHITECTURES
from sdk.reward import LoraSettings, RewardModel

_VISION = ("model.visual.", "model.vision_tower.")


def _adapted(path: Path, lora: LoraSettings) -> set[str]:
    model = RewardModel.from_backbone(path, lora=lora)
    return {n.split(".lora_")[0] for n, _ in model.backbone.named_parameters() if ".lora_A." in n}


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_train_vision_adapts_the_vision_towers_attention_too(
        arch: str, backbones: dict[str, Path]) -> None:
    language_only = _adapted(backbones[arch], LoraSettings(r=2))
    both = _adapted(backbones[arch], LoraSettings(r=2, train_vision=True))
    assert language_only and all(".language_model." in n for n in language_only)
    assert {n.rsplit(".", 1)[1] for n in language_only} == {"q_proj", "k_proj", "v_proj",
                                                            "o_proj"}
    vision = both - language_only
    assert both >= language_only and vision
    assert all(n.startswith(_VISION) and ".head." not in n for n in vision)
    # Every block of the tower gets its attention adapted, whatever the projections are named.
    blocks = {n.split(".attn.")[0].split(".self_attn.")[0] for n in vision}
    assert len(blocks) >= 2 and all(".mlp." not in n for n in vision)
