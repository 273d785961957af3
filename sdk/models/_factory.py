"""Build tiny VLMs of the real architectures and load any VLM checkpoint from a directory."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import PreTrainedModel, ProcessorMixin

from sdk.models._architectures import ModelSize, get_architecture

__all__ = ["VLMBundle", "build_tiny_vlm", "load_vlm", "read_model_type"]


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
    size: ModelSize = "tiny",
    vocab_size: int = 1024,
) -> Path:
    """Build a randomly initialised VLM of ``architecture`` and save it to ``out_dir``.

    The tokenizer is trained on ``corpus`` plus a small built-in English corpus. Model, tokenizer,
    processor and chat template are written with ``save_pretrained``, so :func:`load_vlm` reads
    the directory exactly like a real checkpoint.
    """
    spec = get_architecture(architecture)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = spec.build_tokenizer(corpus, vocab_size=vocab_size)
    config = spec.build_config(size, tokenizer)
    torch.manual_seed(seed)
    model = spec.model_class(config)
    processor = spec.build_processor(tokenizer)
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


def load_vlm(path: str | Path, *, dtype: torch.dtype = torch.float32) -> VLMBundle:
    """Load a VLM checkpoint directory (a tiny one or a user's real one) with ``from_pretrained``."""
    spec = get_architecture(read_model_type(path))
    model = spec.model_class.from_pretrained(path, dtype=dtype)
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
