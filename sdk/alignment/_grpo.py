"""``align``: GRPO on trl's GRPOTrainer with a routed (or baseline) reward function."""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch
from datasets import Dataset
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_callback import PrinterCallback
from trl import GRPOConfig, GRPOTrainer

from sdk.alignment._export import write_base_reference
from sdk.alignment._grpo_settings import GRPOSettings
from sdk.alignment._plots import plot_alignment
from sdk.data import Query
from sdk.models import Runtime, load_vlm, vision_encoder
from sdk.progress import Steps
from sdk.storage import replace_file

__all__ = ["GRPORewardFunction", "StepTimer", "align", "query_dataset"]


class GRPORewardFunction(Protocol):
    """What :func:`align` trains with: trl's async reward callable plus what it reports.

    :class:`~sdk.alignment.SelectionRewardFunction` (rewards in this process) and
    :class:`~sdk.alignment.RestRewardFunction` (rewards from the consortium server) are two.
    """

    __name__: str
    history: list[float]

    @property
    def method(self) -> str:
        """The reward-selection method's name."""
        ...

    def trainer_callbacks(self) -> list[TrainerCallback]:
        """Callbacks the method needs (the online router's feedback), each with ``history``."""
        ...

    async def __call__(self, prompts: Sequence[Any], completions: Sequence[Any],
                       **columns: Any) -> list[float]:
        """One reward per completion."""
        ...


def query_dataset(queries: Sequence[Query]) -> Dataset:
    """A trl dataset: conversational ``prompt`` (image + text), ``image``, ``category`` and
    ``options`` columns (trl hands the extra columns to the reward function)."""
    rows = [
        {
            "prompt": [
                {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": q.prompt}]}
            ],
            "image": q.image,
            "category": q.category,
            "options": list(q.options),  # empty for open prompts; read by the format rule
        }
        for q in queries
    ]
    return Dataset.from_list(rows)


class StepTimer(TrainerCallback):
    """Wall time of each optimizer step (seconds) and the step it ended (``steps``)."""

    def __init__(self) -> None:
        self.durations: list[float] = []
        self.steps: list[int] = []
        self._start = 0.0

    def on_step_begin(self, args: TrainingArguments, state: TrainerState,
                      control: TrainerControl, **kwargs: Any) -> None:
        """Start the clock."""
        self._start = time.perf_counter()

    def on_step_end(self, args: TrainingArguments, state: TrainerState,
                    control: TrainerControl, **kwargs: Any) -> None:
        """Stop the clock."""
        self.durations.append(time.perf_counter() - self._start)
        self.steps.append(state.global_step)


class _StepPeriod(StepTimer):
    """Seconds from one step's end to the next (the first from the start of training): the
    whole period, with the logging callbacks (the router feedback post) that run after a step
    ends and that :class:`StepTimer` and trl's ``step_time`` leave out."""

    def on_train_begin(self, args: TrainingArguments, state: TrainerState,
                       control: TrainerControl, **kwargs: Any) -> None:
        """Start the first period."""
        self._start = time.perf_counter()

    def on_step_begin(self, args: TrainingArguments, state: TrainerState,
                      control: TrainerControl, **kwargs: Any) -> None:
        """A period runs on through the next step's start."""

    def on_step_end(self, args: TrainingArguments, state: TrainerState,
                    control: TrainerControl, **kwargs: Any) -> None:
        """Close this period and open the next."""
        super().on_step_end(args, state, control, **kwargs)
        self._start = time.perf_counter()


def align(
    policy_dir: str | Path,
    reward_fn: GRPORewardFunction,
    queries: Sequence[Query],
    settings: GRPOSettings | None = None,
    *,
    out_dir: str | Path,
    callbacks: Sequence[TrainerCallback] = (),
    progress: Callable[[str], None] | None = print,
    progress_every: int | None = None,
    runtime: Runtime | None = None,
    merge_lora: bool = False,
    resume: bool = False,
) -> Path:
    """Run GRPO from ``policy_dir`` on ``queries``; save the aligned policy to ``out_dir``.

    Online strategies (MoR) get their feedback callback (``reward_fn.trainer_callbacks()``:
    in process a :class:`RouterFeedbackCallback`, over REST the server's) automatically. Writes
    ``out_dir/policy`` (model + processor); under ``lora`` instead ``out_dir/adapter`` (the
    adapter, the processor and the base's path and config hash; merge it with
    :func:`export_policy`, or here with ``merge_lora``, which also writes ``policy``), and
    ``out_dir/metrics.json`` (trl's log history, seconds per step, the reward per call and the
    router feedback) with its plots in ``out_dir/plots`` (reward, KL, seconds per step) and
    returns ``out_dir``. ``progress`` gets one line (step, loss, reward, KL, seconds per
    step) every ``progress_every`` steps (default: about every tenth of the run); None keeps it
    quiet. ``runtime`` places the policy (device, dtype) and sets trl's ``bf16`` / ``fp16`` /
    ``gradient_checkpointing`` to match. ``resume``: continue from the newest checkpoint under
    ``out_dir/trainer`` (written every ``settings.save_steps``), if there is one.
    """
    s = settings or GRPOSettings()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(s.seed)
    rt = runtime or Runtime()
    # trl turns gradient checkpointing on itself (GRPOConfig), so the load does not.
    bundle = load_vlm(policy_dir, runtime=rt.model_copy(update={"gradient_checkpointing": False}))
    # Left padding: prompts of different lengths otherwise break Qwen's rope index (DESIGN.md).
    bundle.processor.tokenizer.padding_side = "left"
    if s.freeze_vision and s.lora is None:  # peft freezes every base weight under LoRA
        _freeze_vision_encoder(bundle.model)
    args = _grpo_config(s, out / "trainer", rt)
    feedback = reward_fn.trainer_callbacks()
    clock = _StepPeriod()
    all_callbacks: list[TrainerCallback] = [*callbacks, *feedback, clock]
    if progress is not None:
        every = progress_every or max(s.steps // 10, 1)
        all_callbacks.append(_Progress(progress, every=every, total=s.steps))
    reward_funcs: list[Any] = [reward_fn]  # trl accepts async callables; its hint predates them
    trainer = GRPOTrainer(
        model=bundle.model,
        reward_funcs=reward_funcs,
        args=args,
        train_dataset=query_dataset(queries),
        processing_class=bundle.processor,
        callbacks=all_callbacks,
        peft_config=None if s.lora is None else s.lora.peft_config(),
    )
    # Without tqdm, transformers prints every raw log dict; _Progress says the same in one line.
    trainer.remove_callback(PrinterCallback)
    checkpoint = _newest_checkpoint(out / "trainer") if resume else None
    with warnings.catch_warnings():
        # trl reads transformers' deprecated ``is_gradient_checkpointing`` at every
        # generation: a notice about trl's code that nobody running alignment can act on.
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*",
                                category=FutureWarning)
        trainer.train(resume_from_checkpoint=None if checkpoint is None else str(checkpoint))
    if trainer.accelerator.is_main_process:
        _save_policy(trainer.accelerator.unwrap_model(trainer.model), bundle.processor,
                     Path(policy_dir), out, lora=s.lora is not None, merge_lora=merge_lora)
        _write_metrics(out, s, reward_fn, trainer.state.log_history, feedback,
                       _step_seconds(None if checkpoint is None else out / "metrics.json", clock))
    return out


def _write_metrics(out: Path, s: GRPOSettings, reward_fn: GRPORewardFunction,
                   log_history: list[dict[str, Any]], feedback: Sequence[TrainerCallback],
                   step_seconds: list[dict[str, float]]) -> None:
    """``out/metrics.json`` and its plots: what the run was told, what trl logged, and what the
    reward function and the router's feedback recorded."""
    metrics: dict[str, Any] = {
        "settings": s.model_dump(),
        "selection": reward_fn.method,
        "log_history": log_history,
        "step_seconds": step_seconds,
        "mean_reward_per_call": reward_fn.history,
        "router_feedback": [h for cb in feedback for h in getattr(cb, "history", [])],
    }
    metrics["plots"] = plot_alignment(metrics, out / "plots")
    # Replaced whole, never written in place: a resume reads it, and a crash mid-write would
    # leave it torn.
    replace_file(out / "metrics.json", json.dumps(metrics, indent=1, default=str), mode=0o666)


def _grpo_config(s: GRPOSettings, trainer_dir: Path, rt: Runtime) -> GRPOConfig:
    """trl's configuration of one run of ``s``: a log entry every step (the progress line and
    metrics.json read it), checkpoints under ``trainer_dir`` every ``s.save_steps``, no tqdm."""
    return GRPOConfig(
        output_dir=str(trainer_dir),
        max_steps=s.steps,
        per_device_train_batch_size=s.prompts_per_step * s.num_generations,
        num_generations=s.num_generations,
        beta=s.beta,
        epsilon=s.epsilon,
        learning_rate=s.learning_rate,
        warmup_steps=s.warmup_steps,
        max_completion_length=s.max_completion_length,
        temperature=s.temperature,
        scale_rewards=s.scale_rewards,
        seed=s.seed,
        logging_steps=1,
        save_strategy="no" if s.save_steps is None else "steps",
        save_steps=s.save_steps or 500,
        report_to="none",
        gradient_accumulation_steps=s.gradient_accumulation_steps,
        deepspeed=None if s.deepspeed is None else str(s.deepspeed),
        use_vllm=s.use_vllm,
        disable_tqdm=True,
        **rt.trainer_precision(),
    )


def _newest_checkpoint(trainer_dir: Path) -> Path | None:
    """trl's newest complete ``checkpoint-<step>`` under ``trainer_dir`` (by step, not by
    name), if any. Complete: it holds ``trainer_state.json``, which the trainer writes after
    the weights, optimizer and RNG states; a job killed while saving leaves a checkpoint
    without it, which the trainer cannot resume from, so the one before it is taken."""
    steps = {int(p.name.removeprefix("checkpoint-")): p for p in trainer_dir.glob("checkpoint-*")
             if p.name.removeprefix("checkpoint-").isdigit()
             and (p / "trainer_state.json").is_file()}
    return steps[max(steps)] if steps else None


def _save_policy(policy: Any, processor: Any, policy_dir: Path, out: Path, *, lora: bool,
                 merge_lora: bool) -> None:
    """Write ``out/policy`` (model + processor); under LoRA ``out/adapter`` instead, and the
    merged ``out/policy`` too with ``merge_lora``."""
    if lora:
        policy.save_pretrained(out / "adapter")  # what a federated LoRA round would ship
        processor.save_pretrained(out / "adapter")
        write_base_reference(out / "adapter", policy_dir)
        policy = policy.merge_and_unload() if merge_lora else None
    if policy is not None:
        policy.save_pretrained(out / "policy")
        processor.save_pretrained(out / "policy")


def _step_seconds(previous: Path | None, clock: StepTimer) -> list[dict[str, float]]:
    """Seconds per step of this run, after those of the run it resumed (its steps before the
    first one trained here; the checkpoint restores trl's log but not our clock)."""
    first = clock.steps[0] if clock.steps else float("inf")
    earlier = []
    if previous is not None and previous.is_file():
        earlier = [t for t in json.loads(previous.read_text()).get("step_seconds", [])
                   if t["step"] < first]
    return earlier + [{"step": step, "seconds": round(seconds, 4)}
                      for step, seconds in zip(clock.steps, clock.durations, strict=True)]


# Qwen2-VL and Qwen2.5-VL keep their projector (``merger``) inside the tower; LLaVA-OneVision's
# ``multi_modal_projector`` sits beside it, so its whole tower freezes.
_PROJECTOR_IN_TOWER = "merger."


def _freeze_vision_encoder(model: torch.nn.Module) -> None:
    """Stop gradients into the vision encoder; its projector keeps training."""
    encoder = vision_encoder(model)
    if encoder is None:
        raise ValueError(f"freeze_vision: {type(model).__name__} has no vision encoder "
                         "(`visual` or `vision_tower`)")
    for name, param in encoder.named_parameters():
        if not name.startswith(_PROJECTOR_IN_TOWER):
            param.requires_grad_(False)


class _Progress(TrainerCallback):
    """One line of GRPO progress every ``every`` steps, and a bar of all steps while stderr is
    a terminal (``sdk.progress``: none in quiet mode)."""

    def __init__(self, say: Callable[[str], None], *, every: int, total: int) -> None:
        self.say, self.every, self.total = say, every, total
        self._last = time.perf_counter()
        self._last_step = 0
        self._bar: Steps | None = None

    def on_train_begin(self, args: TrainingArguments, state: TrainerState,
                       control: TrainerControl, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            self._bar = Steps("GRPO", self.total).__enter__()
            self._bar.advance(state.global_step)  # a resumed run starts where it stopped

    def on_step_end(self, args: TrainingArguments, state: TrainerState,
                    control: TrainerControl, **kwargs: Any) -> None:
        if self._bar is not None:
            self._bar.advance()

    def on_train_end(self, args: TrainingArguments, state: TrainerState,
                     control: TrainerControl, **kwargs: Any) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
               logs: dict[str, float] | None = None, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        if logs and "loss" in logs and state.global_step % self.every == 0:
            now = time.perf_counter()
            per_step = (now - self._last) / max(state.global_step - self._last_step, 1)
            self._last, self._last_step = now, state.global_step
            self.say(f"GRPO step {state.global_step}/{self.total} loss {logs['loss']:.4f} "
                     f"reward {logs.get('reward', float('nan')):.3f} "
                     f"kl {logs.get('kl', float('nan')):.3g} {per_step:.1f} s/step")
