"""Stage A at real sizes (slow): two LoRA steps in bfloat16, adapter checkpoint, scoring.

Each architecture is built at its published size (several GB), so these run only with
``-m slow``; the memory bound is derived from the weights' bytes: the weights once (memory-mapped
and shared with the page cache), plus the adapters, optimizer state, activations and the
interpreter, within 1.5x the weight bytes plus 1.5 GB.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parents[2] / "examples" / "benchmarks"))
import real_size


@pytest.mark.slow
@pytest.mark.parametrize("arch", real_size.FULL_ARCHITECTURES)
def test_real_size_lora_training_fits_in_memory(arch: str, tmp_path: Path) -> None:
    from sdk.data import SynthConfig, synthesize

    synthesize(SynthConfig(clients=("detail",), heldout=(), train_pairs=8, eval_pairs=2,
                           warmup_queries=0, policy_train_queries=0, policy_eval_queries=0),
               tmp_path / "data")
    result = real_size.measure(arch, tmp_path, tmp_path / "data" / "clients" / "detail" / "train",
                               dtype="bfloat16", device="cpu", steps=2, say=lambda _m: None)
    weights = result["weight_bytes"]
    assert result["dtype"] == "bfloat16"
    assert result["adapter_checkpoint_fraction"] <= real_size.ADAPTER_TARGET
    assert not (tmp_path / f"{arch}-reward" / "backbone").exists()
    for phase, peak in result["peak_rss"].items():
        assert peak <= 1.5 * weights + 1.5e9, (phase, peak, weights)


def test_real_size_phases_on_a_tiny_model(tmp_path: Path) -> None:
    """The benchmark's plumbing (one process per phase, peaks, checkpoint bytes) at tiny size."""
    from sdk.data import SynthConfig, synthesize

    synthesize(SynthConfig(clients=("detail",), heldout=(), train_pairs=4, eval_pairs=2,
                           warmup_queries=0, policy_train_queries=0, policy_eval_queries=0),
               tmp_path / "data")
    result = real_size.measure("qwen2_vl", tmp_path,
                               tmp_path / "data" / "clients" / "detail" / "train",
                               dtype="bfloat16", device="cpu", steps=1, say=lambda _m: None,
                               size="tiny")
    assert result["dtype"] == "bfloat16" and result["device"] == "cpu"
    assert 0 < result["trainable_params"] < result["params"]
    assert 0 < result["adapter_checkpoint_bytes"] < result["base_checkpoint_bytes"]
    assert set(result["peak_rss"]) == {"load", "train", "score"}
    assert all(v > 0 for v in result["peak_rss"].values())
    assert result["train_step_s"] > 0 and result["score_item_s"] > 0
    assert real_size._headline({"qwen2_vl": result})["dtype"] == "bfloat16"
