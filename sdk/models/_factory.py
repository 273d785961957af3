"""Build tiny VLMs of the real architectures and load any VLM checkpoint from a directory."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from transformers import PreTrainedModel, ProcessorMixin

from sdk.models._architectures import ModelSize, get_architecture
from sdk.models._memory import return_freed_host_memory, run_frozen_without_graph, vision_encoder
from sdk.models._real_sizes import REAL_SIZES
from sdk.models._runtime import Runtime

__all__ = ["VLMBundle", "build_tiny_vlm", "config_digest", "load_vlm", "read_model_type"]

BuildSize = ModelSize | Literal["real"]
"""A size ``build_tiny_vlm`` builds: a tiny one for tests or the published real size."""


@dataclass
class VLMBundle:
    """A loaded VLM: the ForConditionalGeneration model, its processor and key facts."""

    model: PreTrainedModel
    processor: ProcessorMixin
    architecture: str
    hidden_size: int
    max_length: int
    path: Path


def build_tiny_vlm(
    architecture: str,
    out_dir: str | Path,
    *,
    corpus: Iterable[str] = (),
    seed: int = 0,
    size: BuildSize = "tiny",
    vocab_size: int = 1024,
    dtype: torch.dtype = torch.float32,
) -> Path:
    """Build a randomly initialised VLM of ``architecture`` and save it to ``out_dir``.

    ``size="real"`` builds the architecture at its published size (``sdk.models.REAL_SIZES``),
    with the published image processor settings; build it with ``dtype=torch.bfloat16``: the
    weights are created in that dtype (no float32 copy), as a real checkpoint ships.
    The tokenizer is trained on ``corpus`` plus a small built-in English corpus. Model, tokenizer,
    processor and chat template are written with ``save_pretrained``, so :func:`load_vlm` reads
    the directory exactly like a real checkpoint.
    """
    spec = get_architecture(architecture)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = spec.build_tokenizer(corpus, vocab_size=vocab_size)
    if size == "real":
        real = REAL_SIZES[spec.name]
        config, processor = real.config(tokenizer), real.processor(tokenizer)
    else:
        config, processor = spec.build_config(size, tokenizer), spec.build_processor(tokenizer)
    torch.manual_seed(seed)
    model = spec.model_class._from_config(config, dtype=dtype)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out


def read_model_type(path: str | Path) -> str:
    """The ``model_type`` in a checkpoint directory's ``config.json``."""
    config_file = Path(path) / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"no VLM checkpoint at {path}: {config_file} is missing")
    model_type = json.loads(config_file.read_text()).get("model_type")
    if not isinstance(model_type, str):
        raise ValueError(f"{config_file} names no model_type")
    return model_type


def config_digest(path: str | Path) -> str:
    """sha256 of a checkpoint directory's ``config.json`` (canonical JSON): what an adapter
    checkpoint records of the base it was trained on."""
    config_file = Path(path) / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"no VLM checkpoint at {path}: {config_file} is missing")
    canonical = json.dumps(json.loads(config_file.read_text()), sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


def load_vlm(path: str | Path, *, runtime: Runtime | None = None) -> VLMBundle:
    """Load a VLM checkpoint directory (a tiny one or a user's real one) with ``from_pretrained``.

    The weights are read straight into ``runtime``'s dtype and device (memory-mapped
    safetensors, no float32 copy first); the default runtime is float32 on the CPU when no GPU
    is present. The processor is the checkpoint's own (``preprocessor_config.json``). A frozen
    vision tower runs without an autograd graph; on a CPU, freed tensors go back to the OS
    (``return_freed_host_memory`` in ``sdk/models/_memory.py``).
    """
    spec = get_architecture(read_model_type(path))
    device, dtype = (runtime or Runtime()).resolve()
    if device.type == "cpu":
        return_freed_host_memory()
    # device_map reads the weights straight onto an accelerator; on the CPU they stay mmapped.
    model = spec.model_class.from_pretrained(
        path, dtype=dtype, device_map=None if device.type == "cpu" else str(device))
    if runtime is not None and runtime.gradient_checkpointing:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    tower = vision_encoder(model)
    if tower is not None:
        run_frozen_without_graph(tower)
    processor = spec.processor_class.from_pretrained(path)
    text_config = model.config.get_text_config()
    return VLMBundle(
        model=model,
        processor=processor,
        architecture=spec.name,
        hidden_size=int(text_config.hidden_size),
        max_length=int(text_config.max_position_embeddings),
        path=Path(path),
    )
