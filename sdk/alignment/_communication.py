"""Communication accounting per method and stage (the paper's Figure 5), as pure arithmetic.

Bytes are counted in both directions. Stages:

- ``router_rounds`` (MoR): each client uploads its masked, weighted router (secure-aggregation
  bytes per element, 4 for uint32 masks) and downloads the new float32 router, every round.
- ``reward_queries``: per routed completion the server sends prompt + response text and receives
  one float32 score. Without the image cache the image travels with every completion; with it,
  each image travels once to each distinct client that scores one of its completions (bounded
  by ``min(M, K)`` per query for MoR and by ``K`` for query-everyone methods).
- ``rm_rounds`` (FedAvg RM): the full reward model up (masked) and down, every round.
- ``lora_rounds``: a LoRA adapter of the policy up (masked) and down, every round.
"""

from __future__ import annotations

import copy

from peft import LoraConfig, get_peft_model
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

__all__ = [
    "CommunicationSetting",
    "communication_bytes",
    "lora_parameter_count",
    "parameter_count",
]


class CommunicationSetting(BaseModel):
    """Sizes and counts of one federation; bytes in, bytes out."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_clients: int = Field(default=3, ge=1, description="K")
    router_params: int = Field(default=100_000, ge=0)
    rounds: int = Field(default=10, ge=0, description="federated rounds (router, RM or LoRA)")
    secagg_bytes_per_element: int = Field(default=4, ge=1, description="uint32 masked upload")
    float_bytes: int = Field(default=4, ge=1, description="float32 download and score")
    queries: int = Field(default=4_000, ge=0, description="GRPO prompts over the whole run")
    unique_images: int | None = Field(
        default=None, ge=0, description="distinct images among them (None: all distinct)"
    )
    group_size: int = Field(default=4, ge=1, description="M completions per prompt")
    image_bytes: int = Field(default=21_168, ge=0, description="one image on the wire (84x84 RGB)")
    text_bytes: int = Field(default=200, ge=0, description="prompt + response per completion")
    rm_params: int = Field(default=1_000_000, ge=0, description="full reward-model parameters")
    lora_params: int = Field(default=100_000, ge=0, description="policy LoRA-adapter parameters")


def _round_trip(s: CommunicationSetting, params: int) -> int:
    """One round of secure aggregation of ``params`` elements for all K clients (up + down)."""
    return s.num_clients * s.rounds * params * (s.secagg_bytes_per_element + s.float_bytes)


def _queries(s: CommunicationSetting, clients_per_completion: int, cached: bool) -> int:
    completions = s.queries * s.group_size
    per_completion = clients_per_completion * (s.text_bytes + s.float_bytes)
    if cached:
        # Each distinct image reaches each client that scores one of its completions once:
        # at most min(M, K) clients when routed, K when every client is queried.
        unique = s.queries if s.unique_images is None else min(s.unique_images, s.queries)
        distinct = min(s.group_size * clients_per_completion, s.num_clients)
        images = unique * distinct * s.image_bytes
    else:
        images = completions * clients_per_completion * s.image_bytes
    return completions * per_completion + images


def communication_bytes(s: CommunicationSetting) -> dict[str, dict[str, int]]:
    """Bytes per stage for each method; each method also carries a ``total``."""
    k = s.num_clients
    methods: dict[str, dict[str, int]] = {
        "mor_cached": {
            "router_rounds": _round_trip(s, s.router_params),
            "reward_queries": _queries(s, 1, cached=True),
        },
        "mor_uncached": {
            "router_rounds": _round_trip(s, s.router_params),
            "reward_queries": _queries(s, 1, cached=False),
        },
        "avg_rm_cached": {"reward_queries": _queries(s, k, cached=True)},
        "fedavg_rm": {"rm_rounds": _round_trip(s, s.rm_params)},
        "lora": {"lora_rounds": _round_trip(s, s.lora_params)},
    }
    for stages in methods.values():
        stages["total"] = sum(stages.values())
    return methods


def lora_parameter_count(model: nn.Module, config: LoraConfig) -> int:
    """Parameters of the LoRA adapter ``config`` would add to ``model`` (model left untouched).

    Works on a model built on the ``meta`` device, so billion-parameter architectures are
    counted from their config without weights.
    """
    wrapped = get_peft_model(copy.deepcopy(model), copy.deepcopy(config))
    return sum(p.numel() for n, p in wrapped.named_parameters() if "lora_" in n)


def parameter_count(model: nn.Module) -> int:
    """All parameters of ``model``."""
    return sum(p.numel() for p in model.parameters())

