"""Offline VLMs of the real architectures: tiny-model factory, loading, input encoding."""

from sdk.models._architectures import (
    ARCHITECTURES,
    ArchitectureSpec,
    ModelSize,
    UnknownArchitectureError,
    get_architecture,
    size_with_hidden,
)
from sdk.models._factory import VLMBundle, build_tiny_vlm, load_vlm, read_model_type
from sdk.models._inputs import VLMInputError, chat_texts, encode_batch, to_rgb
from sdk.models._tokenizer import DEFAULT_CORPUS, train_tokenizer

__all__ = [
    "ARCHITECTURES",
    "DEFAULT_CORPUS",
    "ArchitectureSpec",
    "ModelSize",
    "UnknownArchitectureError",
    "VLMBundle",
    "VLMInputError",
    "build_tiny_vlm",
    "chat_texts",
    "encode_batch",
    "get_architecture",
    "load_vlm",
    "read_model_type",
    "size_with_hidden",
    "to_rgb",
    "train_tokenizer",
]
