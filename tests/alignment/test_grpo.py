"""A tiny GRPO run on a real tiny Qwen2.5-VL: the policy moves and metrics are written."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from sdk.alignment import (
    AlignmentError,
    GRPOSettings,
    InProcessRewardSource,
    SelectionRewardFunction,
    WarmupConfig,
    align,
    lora_parameter_count,
    warmup_policy,
)
from sdk.alignment._export import export_policy
from sdk.alignment._grpo import _freeze_vision_encoder, query_dataset
from sdk.alignment._selection import MoRSelection
from sdk.alignment._warmup import _noisy_answers, warmup_cache_key
from sdk.data import load_queries
from sdk.models import ARCHITECTURES, Runtime, build_tiny_vlm, load_vlm
from sdk.reward import LoraSettings
from tests.alignment.conftest import make_chooser


def _weights(directory: Path) -> dict[str, torch.Tensor]:
    return load_file(str(directory / "model.safetensors"))


def test_warmup_is_cached_and_changes_the_policy(base_policy: Path, data_dir: Path,
                                                 tmp_path: Path) -> None:
    queries = load_queries(data_dir / "policy" / "warmup")
    cfg = WarmupConfig(steps=2, batch_size=4)
    first = warmup_policy(base_policy, queries, tmp_path, cfg)
    mtime = (first / "model.safetensors").stat().st_mtime_ns
    assert warmup_policy(base_policy, queries, tmp_path, cfg) == first  # cache hit
    assert (first / "model.safetensors").stat().st_mtime_ns == mtime
    other = warmup_policy(base_policy, queries, tmp_path, WarmupConfig(steps=1, batch_size=4))
    assert other != first  # the config is part of the key
    # Without a target the early-stop fields change nothing: the key (and older caches) stay.
    usable = [q for q in queries if q.answer is not None]
    key = warmup_cache_key(cfg, base_policy, usable)
    assert warmup_cache_key(cfg.model_copy(update={"check_every": 7}), base_policy, usable) == key
    assert warmup_cache_key(cfg.model_copy(update={"stop_at_expected": 0.5}), base_policy,
                            usable) != key
    before, after = _weights(base_policy), _weights(first)
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_warmup_stops_at_its_validation_target(base_policy: Path, data_dir: Path,
                                               tmp_path: Path) -> None:
    queries = load_queries(data_dir / "policy" / "warmup")
    validation = {c: load_queries(data_dir / "policy" / "eval" / c)
                  for c in ("diagram", "position")}
    with pytest.raises(ValueError, match="validation"):
        warmup_policy(base_policy, queries, tmp_path, WarmupConfig(steps=4, stop_at_expected=0.5))

    def record(cfg: WarmupConfig) -> dict[str, Any]:
        out = warmup_policy(base_policy, queries, tmp_path, cfg, validation=validation)
        return json.loads((out / "warmup.json").read_text())

    # A target the tiny policy cannot reach: every check runs, the warm-up runs to the end.
    full = record(WarmupConfig(steps=6, batch_size=4, check_every=2, stop_at_expected=1.0))
    assert full["steps_done"] == 6 and [s for s, _ in full["validation_expected"]] == [2, 4, 6]
    # A target just below what the first check reads: it stops there.
    first = full["validation_expected"][0][1]
    early = record(WarmupConfig(steps=6, batch_size=4, check_every=2,
                                stop_at_expected=first * 0.999))
    assert early["steps_done"] == 2 and early["validation_expected"] == [[2, first]]


def test_label_noise_trains_a_share_of_queries_on_random_options(data_dir: Path) -> None:
    queries = [q for q in load_queries(data_dir / "policy" / "warmup") if q.options] * 40
    assert _noisy_answers(queries, 0.0, seed=0) == [q.answer for q in queries]
    noisy = _noisy_answers(queries, 0.4, seed=0)
    assert all(a in q.options for a, q in zip(noisy, queries, strict=True))
    wrong = sum(a != q.answer for a, q in zip(noisy, queries, strict=True)) / len(queries)
    options = len(queries[0].options)
    assert abs(wrong - 0.4 * (options - 1) / options) < 0.05  # a random pick may be right
    assert _noisy_answers(queries, 0.4, seed=0) == noisy != _noisy_answers(queries, 0.4, seed=1)


def test_tiny_grpo_run_with_mor_changes_the_policy(base_policy: Path, data_dir: Path,
                                                   tmp_path: Path) -> None:
    queries = load_queries(data_dir / "policy" / "train")

    def longer_is_better(images, prompts, responses):  # distinct rewards within a group
        return [float(len(r)) for r in responses]

    sel = MoRSelection(make_chooser(num_clients=2))
    fn = SelectionRewardFunction(sel, InProcessRewardSource([longer_is_better] * 2))
    settings = GRPOSettings(steps=2, prompts_per_step=2, num_generations=2,
                            max_completion_length=4, warmup_steps=0, learning_rate=1e-2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = align(base_policy, fn, queries, settings, out_dir=tmp_path / "run")
    # No deprecation notice from the libraries under the run: none is the user's to act on.
    assert not [w for w in caught if "gradient_checkpointing" in str(w.message)]
    before, after = _weights(base_policy), _weights(out / "policy")
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed, "GRPO left every parameter unchanged"
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["selection"] == "mor"
    assert len(metrics["mean_reward_per_call"]) >= 1
    # The second logged loss produced bandit feedback for that step's routed pairs.
    feedback = metrics["router_feedback"]
    assert len(feedback) == 2 and feedback[0][2] is None and feedback[1][2] in (0.0, 1.0)
    assert feedback[1][3] == 2 * 2


def _two_steps(base_policy: Path, data_dir: Path, out: Path, *, merge_lora: bool = False,
               runtime: Runtime | None = None, **settings: Any) -> Path:
    """Two GRPO steps with one client that prefers longer answers (distinct group rewards)."""

    def longer_is_better(images, prompts, responses):
        return [float(len(r)) for r in responses]

    sel = MoRSelection(make_chooser(num_clients=1), online=False)
    fn = SelectionRewardFunction(sel, InProcessRewardSource([longer_is_better]))
    grpo = GRPOSettings(steps=2, prompts_per_step=2, num_generations=2,
                        max_completion_length=4, warmup_steps=0, **settings)
    return align(base_policy, fn, load_queries(data_dir / "policy" / "train"), grpo,
                 out_dir=out, progress=None, merge_lora=merge_lora, runtime=runtime)


@pytest.mark.parametrize("freeze", [True, False])
def test_freeze_vision_trains_only_the_projector_and_language_model(
        base_policy: Path, data_dir: Path, tmp_path: Path, freeze: bool) -> None:
    out = _two_steps(base_policy, data_dir, tmp_path / "run", learning_rate=1e-2,
                     freeze_vision=freeze)
    before, after = _weights(base_policy), _weights(out / "policy")
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    encoder = {k for k in before if k.startswith("visual.") and ".merger." not in k}
    assert encoder and bool(changed & encoder) is not freeze
    assert any(".merger." in k for k in changed) and any(k.startswith("model.") for k in changed)


def test_lora_trains_adapters_on_the_language_model_and_saves_them_merged(
        base_policy: Path, data_dir: Path, tmp_path: Path) -> None:
    lora = LoraSettings(r=2, alpha=4)
    out = _two_steps(base_policy, data_dir, tmp_path / "run", learning_rate=5e-2, lora=lora,
                     merge_lora=True)
    before, after = _weights(base_policy), _weights(out / "policy")
    assert set(after) == set(before)  # merged: a plain checkpoint, loadable as the base was
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    # peft starts B at zero, so after two steps only the adapted projections have moved.
    assert changed and all(k.startswith("model.layers.") and k.split(".")[-2] in
                           ("q_proj", "k_proj", "v_proj", "o_proj") for k in changed)
    adapter = load_file(str(out / "adapter" / "adapter_model.safetensors"))
    assert adapter and all("lora_" in k for k in adapter)
    assert sum(v.numel() for v in adapter.values()) == lora_parameter_count(
        load_vlm(base_policy).model, lora.peft_config())


def test_lora_policy_is_its_adapter_and_export_merges_it_over_the_checked_base(
        base_policy: Path, data_dir: Path, tmp_path: Path) -> None:
    out = _two_steps(base_policy, data_dir, tmp_path / "run", learning_rate=5e-2,
                     lora=LoraSettings(r=2, alpha=4))
    assert not (out / "policy").exists()  # no merged copy unless asked for
    assert (out / "adapter" / "base.json").is_file()
    merged = export_policy(out / "adapter", tmp_path / "merged")
    before, after = _weights(base_policy), _weights(merged)
    assert set(after) == set(before)
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert load_vlm(merged).architecture == "qwen2_5_vl"
    other = build_tiny_vlm("qwen2_5_vl", tmp_path / "other", size="small")
    with pytest.raises(AlignmentError, match="does not match adapter"):
        export_policy(out / "adapter", tmp_path / "refused", base=other)


def test_grpo_runs_in_bfloat16_with_gradient_checkpointing(
        base_policy: Path, data_dir: Path, tmp_path: Path) -> None:
    runtime = Runtime(device="cpu", dtype="bfloat16", gradient_checkpointing=True)
    out = _two_steps(base_policy, data_dir, tmp_path / "run", lora=LoraSettings(r=2, alpha=4),
                     runtime=runtime)
    adapter = load_file(str(out / "adapter" / "adapter_model.safetensors"))
    assert adapter and all(torch.isfinite(v.float()).all() for v in adapter.values())
    log = json.loads((out / "metrics.json").read_text())["log_history"]
    assert any("loss" in entry for entry in log)


def test_freeze_vision_needs_a_vision_encoder() -> None:
    with pytest.raises(ValueError, match="no vision encoder"):
        _freeze_vision_encoder(torch.nn.Linear(2, 2))


# Where each supported architecture keeps its vision encoder, and the projector that must train.
_TOWERS = ("model.visual.", "model.vision_tower.")
_PROJECTORS = ("model.visual.merger.", "model.multi_modal_projector.")


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_freeze_vision_freezes_every_architectures_tower_but_not_its_projector(
        arch: str, tmp_path: Path) -> None:
    model = load_vlm(build_tiny_vlm(arch, tmp_path / arch, corpus=["what color", "red"])).model
    _freeze_vision_encoder(model)
    names = [n for n, _ in model.named_parameters()]
    frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
    assert frozen and frozen == {n for n in names
                                 if n.startswith(_TOWERS) and not n.startswith(_PROJECTORS)}
    assert any(n.startswith(_PROJECTORS) for n in names)


def test_under_lora_freeze_vision_follows_train_vision() -> None:
    assert GRPOSettings(lora=LoraSettings()).freeze_vision is True
    adapted = GRPOSettings(lora=LoraSettings(train_vision=True))
    assert adapted.freeze_vision is False  # what metrics.json records
    assert GRPOSettings(lora=LoraSettings(train_vision=True), freeze_vision=False) == adapted
    # The dump align() writes to metrics.json reads back as the same settings.
    assert GRPOSettings.model_validate_json(adapted.model_dump_json()) == adapted
    assert GRPOSettings(**adapted.model_dump()) == adapted
    assert GRPOSettings(freeze_vision=False).freeze_vision is False  # without LoRA: its own


@pytest.mark.parametrize(("freeze", "train_vision"), [(False, False), (True, True)])
def test_under_lora_a_freeze_vision_against_train_vision_is_refused(
        freeze: bool, train_vision: bool) -> None:
    with pytest.raises(ValueError, match=r"LoraSettings\.train_vision alone decides"):
        GRPOSettings(lora=LoraSettings(train_vision=train_vision), freeze_vision=freeze)


def test_cache_key_depends_on_the_data(base_policy: Path, data_dir: Path) -> None:
    queries = load_queries(data_dir / "policy" / "warmup")
    cfg = WarmupConfig(steps=2)
    key = warmup_cache_key(cfg, base_policy, queries)
    assert key == warmup_cache_key(cfg, base_policy, list(queries))
    assert key != warmup_cache_key(cfg, base_policy, queries[:-1])


def test_query_dataset_is_conversational_with_an_image_column(data_dir: Path) -> None:
    queries = load_queries(data_dir / "policy" / "train")[:3]
    ds = query_dataset(queries)
    assert len(ds) == 3 and set(ds.column_names) == {"prompt", "image", "category", "options"}
    content = ds[0]["prompt"][0]["content"]
    assert [p["type"] for p in content] == ["image", "text"]
    assert content[1]["text"] == queries[0].prompt


def test_resume_takes_the_newest_complete_checkpoint(tmp_path: Path) -> None:
    """A job killed while trl saved checkpoint-3 left it without ``trainer_state.json`` (trl
    writes it last): a resume starts from checkpoint-2, not from a checkpoint trl cannot load."""
    from sdk.alignment._grpo import _newest_checkpoint

    assert _newest_checkpoint(tmp_path / "trainer") is None  # no folder yet: a fresh run
    for step, complete in ((2, True), (10, False), (3, False), (1, True)):
        folder = tmp_path / "trainer" / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(b"")
        if complete:
            (folder / "trainer_state.json").write_text("{}")
    (tmp_path / "trainer" / "checkpoint-latest").mkdir()  # not one of trl's names
    assert _newest_checkpoint(tmp_path / "trainer") == tmp_path / "trainer" / "checkpoint-2"
