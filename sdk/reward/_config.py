"""Configuration of reward models: LoRA, DP-SGD, the training loop and the default clip bound."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from peft import LoraConfig

__all__ = ["DEFAULT_CLIP", "DPSettings", "LoraSettings", "RewardTrainingConfig"]

# c = 3: a z-score beyond 3 standard deviations of the client's own training scores carries
# little ranking information but could let one client dominate a mixture; 3 keeps 99.7% of a
# Gaussian unclipped while bounding each answer to [-3, 3].
DEFAULT_CLIP = 3.0
"""The clip bound c of normalized scores when a scorer declares none."""


class LoraSettings(BaseModel):
    """LoRA adapters (peft) on the language model's attention projections, and with
    ``train_vision`` on the vision tower's too. Used by reward models and by GRPO's policy
    (``GRPOSettings.lora``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    r: int = Field(default=8, ge=1)
    alpha: int = Field(default=16, ge=1)
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    train_vision: bool = False
    # Vision towers name their attention projections differently from the language model:
    # fused in Qwen2-VL's blocks (qkv, proj), separate in SigLIP's layers (q/k/v, out_proj).
    vision_target_modules: tuple[str, ...] = ("qkv", "proj", "q_proj", "k_proj", "v_proj",
                                              "out_proj")

    def peft_config(self) -> LoraConfig:
        """The peft config these settings stand for (peft loads here, not with the settings)."""
        from peft import LoraConfig

        pattern = rf".*language_model.*\.({'|'.join(self.target_modules)})$"
        if self.train_vision:
            # The tower's repeated blocks only: SigLIP's pooling head is an nn.MultiheadAttention,
            # which reads out_proj's weight directly, so an adapter there would never act.
            vision = "|".join(self.vision_target_modules)
            pattern = (rf"(?:{pattern})|"
                       rf"(?:.*(?:visual|vision_tower)\..*(?:blocks|layers)\.\d+\..*\.({vision})$)")
        return LoraConfig(r=self.r, lora_alpha=self.alpha, lora_dropout=self.dropout,
                          target_modules=pattern, bias="none")


class DPSettings(BaseModel):
    """Record-level DP-SGD: one record is one preference pair (chosen + rejected together)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    target_epsilon: float = Field(default=8.0, gt=0.0)
    delta: float = Field(default=1e-5, gt=0.0, lt=1.0)
    max_grad_norm: float = Field(default=1.0, gt=0.0)


class RewardTrainingConfig(BaseModel):
    """Bradley-Terry training of one client's reward model.

    ``steps`` wins over ``epochs`` when both are given. With eval pairs the model is evaluated
    every ``eval_every`` steps and at the last step (``eval_every=0``: at the last step only;
    None: :meth:`eval_interval`'s default), the weights of the best evaluation are the ones kept,
    and ``patience`` (None: off) stops the run after that many evaluations without improvement.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    lr: float = Field(default=3e-4, gt=0.0)
    weight_decay: float = Field(default=0.0, ge=0.0)
    warmup_steps: int = Field(default=20, ge=0)
    batch_size: int = Field(default=32, ge=1, description="pairs per step")
    steps: int | None = Field(default=None, ge=1)
    epochs: float = Field(default=1.0, gt=0.0)
    seed: int = 0
    eval_every: int | None = Field(default=None, ge=0)
    patience: int | None = Field(default=None, ge=1, description="evaluations without a new "
                                 "best before training stops (None: never)")
    eval_batch_size: int = Field(default=64, ge=1)
    max_grad_norm: float | None = Field(default=1.0, gt=0.0, description="clipping without DP")
    lora: LoraSettings | None = None
    dp: DPSettings | None = None
    fit_normalizer: bool = True
    clip_bound: float = Field(default=DEFAULT_CLIP, gt=0.0)

    def total_steps(self, n_pairs: int) -> int:
        """Optimizer steps for ``n_pairs`` training pairs."""
        if self.steps is not None:
            return self.steps
        per_epoch = max(1, -(-n_pairs // self.batch_size))
        return max(1, round(per_epoch * self.epochs))

    def eval_interval(self, total: int) -> int:
        """Steps between evaluations in a run of ``total`` steps (0: the last step only).

        Default: about ten evaluations per run, at most 50 steps apart, so a short run still
        has earlier checkpoints to choose from and a long one does not spend its time scoring.
        """
        if self.eval_every is not None:
            return self.eval_every
        return min(50, max(1, total // 10))
