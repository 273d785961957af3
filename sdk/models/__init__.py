"""Offline VLMs of the real architectures: tiny-model factory, loading, input encoding."""

from sdk.models._architectures import (
    ARCHITECTURES,
    ArchitectureSpec,
    ModelSize,
    UnknownArchitectureError,
    get_architecture,
    size_with_hidden,
)
from sdk.models._factory import (
    BuildSize,
    VLMBundle,
    build_tiny_vlm,
    config_digest,
    load_vlm,
    read_model_type,
)
from sdk.models._inputs import VLMInputError, chat_texts, encode_batch, input_pixels, to_rgb
from sdk.models._memory import (
    MMAP_THRESHOLD_BYTES,
    return_freed_host_memory,
    run_frozen_without_graph,
    vision_encoder,
)
from sdk.models._real_sizes import REAL_SIZES, RealSize
from sdk.models._runtime import DTypeName, Placement, Runtime
from sdk.models._tokenizer import DEFAULT_CORPUS, train_tokenizer

__all__ = [
    "ARCHITECTURES",
    "DEFAULT_CORPUS",
    "MMAP_THRESHOLD_BYTES",
    "REAL_SIZES",
    "ArchitectureSpec",
    "BuildSize",
    "DTypeName",
    "ModelSize",
    "Placement",
    "RealSize",
    "Runtime",
    "UnknownArchitectureError",
    "VLMBundle",
    "VLMInputError",
    "build_tiny_vlm",
    "chat_texts",
    "config_digest",
    "encode_batch",
    "get_architecture",
    "input_pixels",
    "load_vlm",
    "read_model_type",
    "return_freed_host_memory",
    "run_frozen_without_graph",
    "size_with_hidden",
    "to_rgb",
    "train_tokenizer",
    "vision_encoder",
]
