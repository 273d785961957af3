import pytest
from peft import LoraConfig
from torch import nn

from sdk.alignment import CommunicationSetting, communication_bytes, lora_parameter_count


def test_bytes_per_stage_by_hand() -> None:
    s = CommunicationSetting(num_clients=3, router_params=10, rounds=2, queries=5, group_size=4,
                             unique_images=2, image_bytes=100, text_bytes=6, rm_params=1000,
                             lora_params=50)
    b = communication_bytes(s)
    router = 3 * 2 * 10 * (4 + 4)  # K x rounds x params x (uint32 up + float32 down)
    completions = 5 * 4
    assert b["mor_cached"]["router_rounds"] == router
    assert b["mor_cached"]["reward_queries"] == completions * (6 + 4) + 2 * 3 * 100
    assert b["mor_uncached"]["reward_queries"] == completions * (6 + 4 + 100)
    assert b["avg_rm_cached"]["reward_queries"] == completions * 3 * (6 + 4) + 2 * 3 * 100
    assert b["fedavg_rm"] == {"rm_rounds": 3 * 2 * 1000 * 8, "total": 3 * 2 * 1000 * 8}
    assert b["lora"]["total"] == 3 * 2 * 50 * 8
    assert b["mor_cached"]["total"] < b["mor_uncached"]["total"]


def test_cache_bound_uses_min_of_group_size_and_clients() -> None:
    one = CommunicationSetting(num_clients=8, group_size=2, queries=10, image_bytes=1,
                               text_bytes=0, router_params=0)
    # 20 completions x 4 score bytes, plus each image to min(M=2, K=8) clients.
    assert communication_bytes(one)["mor_cached"]["reward_queries"] == 20 * 4 + 10 * 2


def test_lora_count_is_exact_and_leaves_the_model_alone() -> None:
    model = nn.Sequential()
    model.add_module("q_proj", nn.Linear(16, 32))
    model.add_module("other", nn.Linear(32, 4))
    count = lora_parameter_count(model, LoraConfig(r=2, target_modules=["q_proj"]))
    assert count == 2 * 16 + 32 * 2  # A (r x in) + B (out x r)
    assert not any("lora" in n for n, _ in model.named_parameters())


def test_negative_sizes_are_rejected() -> None:
    with pytest.raises(ValueError):
        CommunicationSetting(num_clients=0)
