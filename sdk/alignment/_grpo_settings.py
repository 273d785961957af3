"""``GRPOSettings``: GRPO's hyper-parameters, apart from trl so that a command's settings and
``--help`` load without it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sdk.reward import LoraSettings

__all__ = ["GRPOSettings"]


class GRPOSettings(BaseModel):
    """GRPO hyper-parameters; the defaults and the runs that chose them are in
    docs/alignment.md, "GRPO defaults".

    ``beta`` > 0 keeps a KL penalty to the frozen reference (as in the paper). The learning rate
    and its warm-up are the highest that keep the answer format when some tasks are beyond what
    the policy can perceive (a higher one drifts off-format on those). ``scale_rewards``
    "none": advantages are reward minus the group mean, so the clients' score normalization is
    what puts them on one scale, and near-ties between scores are not blown up to unit size.
    ``freeze_vision``: learning one task in the vision tower costs the policy its held-out
    near-variants, so the tower stays frozen by default.
    ``lora``: train LoRA adapters on the language model instead of the policy's weights (what a
    real multi-billion VLM needs on one accelerator); the reference is the policy with its
    adapters off, so no second copy is held. The saved policy has the adapters merged in. Under
    LoRA only the adapters train, so ``lora.train_vision`` alone decides whether the vision tower
    changes; ``freeze_vision`` then follows it (``not lora.train_vision``) and setting it to the
    other value is an error.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    steps: int = Field(default=100, ge=1)
    prompts_per_step: int = Field(default=8, ge=1)
    num_generations: int = Field(default=4, ge=2, description="group size M")
    beta: float = Field(default=0.04, gt=0.0, description="KL penalty to the reference")
    epsilon: float = Field(default=0.2, gt=0.0, description="PPO-style ratio clip")
    learning_rate: float = Field(default=3e-4, gt=0.0)
    warmup_steps: int = Field(default=10, ge=0)
    max_completion_length: int = Field(default=12, ge=1)
    temperature: float = Field(default=1.0, gt=0.0)
    scale_rewards: Literal["group", "batch", "none"] = Field(
        default="none", description="trl's advantage scaling: divide by the group's std, the "
        "batch's std, or not at all")
    freeze_vision: bool = Field(
        default=True, description="keep the vision encoder (patch embedding and blocks) at the "
        "starting policy's weights; the projector and the language model still train. With "
        "`lora`, what trains is LoraSettings' choice: this field defaults to (and must equal) "
        "`not lora.train_vision`")
    lora: LoraSettings | None = Field(
        default=None, description="train LoRA adapters only (None: every unfrozen weight)")
    seed: int = 0
    # trl / transformers options a real run on accelerators needs, passed through unchanged
    # (precision and gradient checkpointing follow ``align``'s ``runtime``).
    gradient_accumulation_steps: int = Field(default=1, ge=1)
    deepspeed: Path | None = Field(default=None, description="a DeepSpeed config JSON (ZeRO); "
                                   "run under accelerate launch or torchrun")
    use_vllm: bool = Field(default=False, description="generate with vLLM (needs a GPU and the "
                           "vllm package; not run on CPU)")
    save_steps: int | None = Field(default=None, ge=1, description="a resumable checkpoint "
                                   "every this many steps under out_dir/trainer (None: none)")

    @model_validator(mode="before")
    @classmethod
    def _freeze_vision_follows_lora(cls, data: Any) -> Any:
        # peft freezes every base weight, so under LoRA the tower moves only through its own
        # adapters: the default True would misreport a run with lora.train_vision.
        if isinstance(data, dict) and data.get("lora") is not None and "freeze_vision" not in data:
            try:
                lora = LoraSettings.model_validate(data["lora"])
            except ValidationError:
                return data  # the field's own validation reports it
            return {**data, "freeze_vision": not lora.train_vision}
        return data

    @model_validator(mode="after")
    def _freeze_vision_agrees_with_lora(self) -> GRPOSettings:
        if self.lora is not None and self.freeze_vision == self.lora.train_vision:
            raise ValueError(
                f"freeze_vision={self.freeze_vision} contradicts lora.train_vision="
                f"{self.lora.train_vision}: under LoRA only the adapters train, so "
                "LoraSettings.train_vision alone decides whether the vision tower changes; "
                "leave freeze_vision unset (it follows lora.train_vision) and set "
                "LoraSettings(train_vision=True) to adapt the tower"
            )
        return self
