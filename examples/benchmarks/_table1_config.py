"""Table 1's settings: one typed model, read from flags and/or a config file (``_table1_flags.py``).

The cross-field rules refuse settings a run would silently ignore. ``row_settings`` is what a
saved (seed, method) row depends on, compared by ``--resume`` (``_table1_rows.py``): its keys
and values must stay those of the saved runs, so a field that only chooses which rows to run
is left out of it, and a new field needs a default equal to the old behaviour.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from _table1_flags import Flag
from _table1_setup import WARMUP
from _table1_summary import ROW_COLUMNS
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sdk.alignment import WarmupConfig
from sdk.reward import LoraSettings

__all__ = ["Table1Config", "UsageError"]

# Fields that choose which rows to run (or where), not what a row is.
_NOT_ROW_SETTINGS = ("out", "resume", "seeds", "methods", "overhead_steps")
_WARMUP_FLAGS = {"stop_at_expected": "--warmup-target", "label_noise": "--warmup-label-noise"}


class UsageError(ValueError):
    """A setting refused once the run knows more than the flags say (e.g. the method names)."""


def _target(text: str) -> float | None:
    if text.lower() == "none":
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a P(right) in (0, 1] or none, not {text!r}") from None


class Table1Config(BaseModel):
    """What one ``table1.py`` run does; each field is the flag of the same name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    quick: bool = Field(default=False, description="a short run: fewer seeds, steps and eval "
                        "queries")
    seeds: int | None = Field(default=None, description="default: 1 quick, 3 full")
    overhead_steps: int | None = Field(
        default=None, description="GRPO steps per path for the REST overhead (default 8 quick, "
        "20; 0: not measured)")
    out: Path = Field(default=Path(tempfile.gettempdir()) / "fedmor-table1",
                      description="the run directory (data, caches, rows.jsonl)")
    methods: str | None = Field(
        default=None, description="comma-separated subset of the methods (default: all); the "
        "base row is always evaluated")
    raw_scales: Literal["mild", "mixed"] = Field(
        default="mixed", description="the task clients' raw score scales (what mor_no_norm "
        "sees; default: as different as the style clients' real reward models)")
    router_rounds: int = Field(default=30, description="FedAvg rounds of the offline router "
                               "(fewer: a weaker router)")
    router_epochs: int = Field(default=1, description="local epochs per router round")
    steps: int | None = Field(default=None, description="GRPO steps per run (default 150 "
                              "quick, 200)")
    beta: float | None = Field(default=None, description="GRPO's KL penalty to the reference "
                               "(default: GRPOSettings')")
    # Frozen by default: over 3 seeds a trained vision encoder lowered MoR's held-out
    # best-of-3 and left in-domain accuracy where it was.
    freeze_vision: bool = Field(
        default=True, description="GRPO trains the projector and language model only "
        "(default); --no-freeze-vision trains the vision encoder too (--lora-rank 0 only: "
        "under LoRA, --lora-vision decides)")
    # Rank-8 adapters by default: over 3 seeds and every method they beat training the weights,
    # in-domain and held out, and no seed collapsed.
    lora_rank: int = Field(
        default=8, description="GRPO trains LoRA adapters of this rank (alpha = 2 x rank) on "
        "the language model's attention projections (default 8; 0: the weights)")
    # Attention only: adapters on the MLPs or the vision tower too did not lift the hardest
    # category and read no better in-domain.
    lora_targets: str = Field(default=",".join(LoraSettings().target_modules),
                              description="comma-separated language-model projections that "
                              "get adapters")
    lora_vision: bool = Field(
        default=False, description="also adapt the vision tower's attention "
        "(LoraSettings.train_vision; needs --lora-rank > 0)")
    learning_rate: float | None = Field(
        default=None, description="GRPO's learning rate (default: 1e-3 with LoRA, "
        "GRPOSettings' without)")
    warmup_target: Annotated[float | None, Flag(_target)] = Field(
        default=WARMUP.stop_at_expected,
        description="the base policy's warm-up stops once the task categories' validation "
        f"P(right) averages this (default {WARMUP.stop_at_expected}; none: all {WARMUP.steps} "
        "steps)")
    warmup_label_noise: float = Field(
        default=WARMUP.label_noise, description="share of warm-up queries trained on a random "
        f"option (default {WARMUP.label_noise})")
    num_generations: int = Field(default=4, description="GRPO's group size M (completions per "
                                 "prompt)")
    grpo_temperature: float | None = Field(
        default=None, description="GRPO's sampling temperature (default: GRPOSettings'); the "
        "evaluation samples at 1.0 either way")
    scale_rewards: Literal["none", "group", "batch"] | None = Field(
        default=None, description="GRPO advantage scaling (default: GRPOSettings')")
    # -1.6: about what the normalized task judges give an unparseable answer themselves
    # (-1.58 / -1.37 / -1.70). At the clip floor (-3) the format penalty outweighed the
    # right/wrong signal and MoR learned less of the task categories.
    invalid_choice_reward: float = Field(
        default=-1.6, description="with style clients: the reward of an unparseable "
        "multiple-choice answer and of an empty answer")
    style: bool = Field(default=True, description="add the style clients (real reward models, "
                        "held-out judges)")
    resume: bool = Field(default=False, description="reuse the (seed, method) rows already in "
                         "OUT/rows.jsonl when they were made with the same settings")

    @model_validator(mode="after")
    def _vision_flags_take_effect(self) -> Self:
        # Under LoRA only the adapters train (GRPOSettings.lora), so the vision tower moves with
        # --lora-vision and never with --no-freeze-vision; with --lora-rank 0 there are no
        # adapters.
        if self.lora_rank < 0:
            raise ValueError(f"--lora-rank must be >= 0 (0: no LoRA), got {self.lora_rank}")
        if self.lora_rank and not self.freeze_vision:
            raise ValueError("--no-freeze-vision has no effect with LoRA (--lora-rank > 0): "
                             "--lora-vision trains adapters on the vision tower, --lora-rank 0 "
                             "trains its weights")
        if not self.lora_rank and self.lora_vision:
            raise ValueError("--lora-vision needs LoRA but --lora-rank is 0; "
                             "--no-freeze-vision trains the vision encoder's weights")
        return self

    @model_validator(mode="after")
    def _warmup_is_valid(self) -> Self:
        try:
            self.warmup()
        except ValidationError as e:
            error = e.errors()[0]
            raise ValueError(f"{_WARMUP_FLAGS[str(error['loc'][0])]}: {error['msg']}") from None
        return self

    def warmup(self) -> WarmupConfig:
        """The base policy's warm-up: the benchmark's, with this run's target and label noise."""
        return WarmupConfig.model_validate(WARMUP.model_dump()
                                           | {"stop_at_expected": self.warmup_target,
                                              "label_noise": self.warmup_label_noise})

    def row_settings(self) -> dict[str, Any]:
        """What a saved row depends on, as ``--resume`` compares it."""
        settings = self.model_dump(exclude=set(_NOT_ROW_SETTINGS))
        settings["row_columns"] = list(ROW_COLUMNS)  # rows saved before a column existed differ
        settings["warmup"] = self.warmup().model_dump()  # so do rows on another base policy
        return settings

    @classmethod
    def row_defaults(cls) -> dict[str, Any]:
        """What each row setting was where saved rows do not record it (a field added since,
        at its default; None for the derived ``row_columns`` and ``warmup``)."""
        return {**{k: field.default for k, field in cls.model_fields.items()
                   if k not in _NOT_ROW_SETTINGS},
                "row_columns": None, "warmup": None}
