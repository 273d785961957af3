"""The demo's configuration and its progress printer (shared by the demo's stage modules)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sdk.progress import say as progress_line

if TYPE_CHECKING:
    from sdk.models import Runtime

__all__ = ["DemoConfig", "rm_config", "say"]


class DemoConfig(BaseModel):
    """What the demo runs; the defaults finish in minutes on 2 CPU cores."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = 0
    clients: tuple[str, ...] = ("diagram", "detail", "safety")
    architectures: tuple[str, ...] = ("qwen2_vl", "qwen2_5_vl", "llava_onevision")
    train_pairs: int = Field(default=600, ge=32)
    eval_pairs: int = Field(default=100, ge=8)
    heldout_pairs: int = Field(default=100, ge=8)
    rm_steps: int = Field(default=110, ge=1)
    rm_batch_size: int = Field(default=32, ge=2)
    # Stage B: the router (HashingEncoder features; sizes as in examples/benchmarks/table1.py).
    # The library's recipe (one local epoch, lr 3e-3 decayed by a cosine over the rounds), at
    # the round count that routes the demo clients' responses reliably (docs/router.md).
    capture: bool = Field(default=False, description="the server's capture mode (RUN/capture, "
                          "for fedmor audit capture)")
    router_rounds: int = Field(default=12, ge=1, description="secure-aggregation rounds")
    router_epochs: int = Field(default=1, ge=1, description="local epochs per round")
    router_max_pairs: int = Field(default=300, ge=1, description="local pairs per client")
    router_layers: int = Field(default=2, ge=1)
    router_d_model: int = Field(default=64, ge=4)
    # A round stage waits this long for slow clients; no cost while all answer in time, and a
    # generous deadline keeps a busy small machine from aborting a round of live members.
    stage_deadline_s: float = Field(default=300.0, gt=0)
    # Client-level DP of stage B's rounds (``fedmor demo --dp``): each member clips its delta
    # to dp_clip_norm and adds its share of the noise that reaches dp_epsilon (delta 1e-5)
    # over router_rounds rounds; the members' site policies then require DP and hold the same
    # epsilon budget.
    dp: bool = Field(default=False, description="client-level DP in the router rounds")
    dp_epsilon: float = Field(default=8.0, gt=0, description="epsilon over router_rounds")
    dp_clip_norm: float = Field(default=1.0, gt=0, description="L2 clip of a member's delta")
    # Stage C: alignment with MoR over REST (0 GRPO steps skips stage C).
    grpo_steps: int = Field(default=200, ge=0)
    grpo_prompts: int = Field(default=8, ge=1, description="prompts per GRPO step")
    # The hesitant base of docs/results.md ("A base that hesitates"): a warm-up on noisy labels
    # leaves the policy something to learn, and GRPO on the weights at lr 3e-4 with KL penalty
    # 0.2 is the setting where the reward rule matters (a base trained on clean labels is
    # already sure of the demo's task). A higher lr lets the real reward models teach
    # off-format answers.
    grpo_lr: float = Field(default=3e-4, gt=0)
    grpo_beta: float = Field(default=0.2, gt=0, description="GRPO's KL penalty")
    # None: the library's WarmupConfig default, which teaches the answer format on every
    # category (far fewer steps leave the base policy off format on held-out categories).
    warmup_steps: int | None = Field(default=None, ge=0)
    warmup_label_noise: float = Field(default=0.4, ge=0, lt=1, description="share of warm-up "
                                      "queries trained on a random option (a base that "
                                      "hesitates)")
    # The reward of an unparseable or empty answer to a multiple-choice prompt (no client is
    # asked). A reward model may score an off-format answer above a wrong one, so the rule is
    # needed; the value sits a little below a normalized wrong answer, not at the clip
    # floor, where "be in format" would outweigh "be right" (docs/alignment.md, "Format rule").
    invalid_choice_reward: float = Field(default=-1.6, lt=0)
    eval_queries: int = Field(default=32, ge=1, description="eval queries per category")
    # Every stage that loads a model (reward models, judges, warm-up, GRPO, evaluation, the
    # client apps' scorers) runs on this device and dtype (sdk.models.Runtime; kept as plain
    # fields so that building the CLI parser imports no torch).
    device: str = Field(default="auto", pattern=r"^(auto|cpu|mps|cuda(:\d+)?)$")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    gradient_checkpointing: bool = False

    def runtime(self) -> Runtime:
        """The :class:`~sdk.models.Runtime` every stage gets."""
        from sdk.models import Runtime

        return Runtime(device=self.device, dtype=self.dtype,
                       gradient_checkpointing=self.gradient_checkpointing)


def say(message: str) -> None:
    """A demo progress line (stderr; none in quiet mode)."""
    progress_line(f"[demo] {message}")


def rm_config(config: DemoConfig) -> Any:
    """Training of the clients' reward models (and of the held-out style judges)."""
    from sdk.reward import RewardTrainingConfig

    return RewardTrainingConfig(
        steps=config.rm_steps, batch_size=config.rm_batch_size, lr=3e-4, warmup_steps=20,
        eval_every=max(config.rm_steps // 3, 1), seed=config.seed,
    )
