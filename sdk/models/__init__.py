"""Offline VLMs of the real architectures: tiny-model factory, loading, input encoding.

Each name loads its module (torch, transformers, peft) on first use, so a command's ``--help``
imports none of them.
"""

from typing import TYPE_CHECKING

from sdk._lazy import lazy_exports

if TYPE_CHECKING:
    from sdk.models._architectures import ARCHITECTURES, ModelSize, get_architecture
    from sdk.models._factory import (
        BuildSize,
        VLMBundle,
        build_tiny_vlm,
        config_digest,
        load_vlm,
        read_model_type,
    )
    from sdk.models._inputs import VLMInputError, encode_batch, input_pixels, to_rgb
    from sdk.models._memory import vision_encoder
    from sdk.models._real_sizes import REAL_SIZES
    from sdk.models._runtime import Runtime

__all__ = [
    "ARCHITECTURES",
    "REAL_SIZES",
    "BuildSize",
    "ModelSize",
    "Runtime",
    "VLMBundle",
    "VLMInputError",
    "build_tiny_vlm",
    "config_digest",
    "encode_batch",
    "get_architecture",
    "input_pixels",
    "load_vlm",
    "read_model_type",
    "to_rgb",
    "vision_encoder",
]

if not TYPE_CHECKING:  # mypy reads the block above, so a mistyped name stays an error
    __getattr__, __dir__ = lazy_exports(__name__)
