"""Shared fixtures: a tiny synthetic benchmark, a tiny Qwen2.5-VL policy and a real router."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from sdk.alignment import NeuralTSChooser
from sdk.data import SynthConfig, load_queries, synthesize
from sdk.models import build_tiny_vlm
from sdk.router import HashingEncoder, NeuralThompsonRouter, Router, RouterConfig


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bench")
    synthesize(
        SynthConfig(train_pairs=4, eval_pairs=4, heldout_pairs=4, warmup_queries=16,
                    policy_train_queries=8, policy_eval_queries=4),
        out,
    )
    return out


@pytest.fixture(scope="session")
def base_policy(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    prompts = [q.prompt for q in load_queries(data_dir / "policy" / "warmup")]
    return build_tiny_vlm("qwen2_5_vl", tmp_path_factory.mktemp("base"), corpus=prompts)


def make_chooser(num_clients: int = 3, seed: int = 0) -> NeuralTSChooser:
    """A real router (tiny) over the deterministic hashing encoder."""
    encoder = HashingEncoder()
    router = Router(RouterConfig(input_dim=encoder.dim, d_model=16, num_layers=1, num_heads=2,
                                 dim_feedforward=32, seed=seed),
                    [f"client{k}" for k in range(num_clients)], encoder.encoder_id)
    return NeuralTSChooser(encoder, NeuralThompsonRouter(router))


def grey(value: int = 128) -> Image.Image:
    return Image.new("RGB", (32, 32), (value, value, value))
