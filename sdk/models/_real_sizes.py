"""Configs and processors of each architecture at its published size, for random real-size models.

No hub is reachable, so the real-size path (memory, dtype, checkpoints) is tested on randomly
initialised models whose configs are written from the published checkpoints' ``config.json``
(Qwen2-VL-2B-Instruct, Qwen2.5-VL-3B-Instruct, llava-onevision-qwen2-0.5b-ov-hf). The vocabulary
keeps the published size (the embedding is a large share of a small model's bytes) although the
locally trained tokenizer uses only its first ids. The processors carry the published image
settings (Qwen: 56x56 to 3584x3584 pixels; LLaVA-OneVision: 384-pixel crops), not the
benchmark's 84 pixels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from transformers import (
    LlavaOnevisionConfig,
    LlavaOnevisionImageProcessorPil,
    PretrainedConfig,
    PreTrainedTokenizerFast,
    ProcessorMixin,
    Qwen2_5_VLConfig,
    Qwen2VLConfig,
    Qwen2VLImageProcessorPil,
)

from sdk.models._architectures import (
    ImageOnlyLlavaOnevisionProcessor,
    ImageOnlyQwen2_5_VLProcessor,
    ImageOnlyQwen2VLProcessor,
    _qwen_ids,
    _token_id,
)

__all__ = ["REAL_SIZES", "RealSize"]

_QWEN_VOCAB = 151936
_LLAVA_VOCAB = 152000
# LLaVA-OneVision's published any-resolution grid: multiples of 384 up to 6x6 crops.
_LLAVA_PINPOINTS = [[384 * h, 384 * w] for h in range(1, 7) for w in range(1, 7)]


def _text(tok: PreTrainedTokenizerFast, *, vocab: int, hidden: int, inter: int, layers: int,
          heads: int, kv: int, max_positions: int) -> dict[str, Any]:
    return {
        "vocab_size": vocab, "hidden_size": hidden, "intermediate_size": inter,
        "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv,
        "max_position_embeddings": max_positions, "rms_norm_eps": 1e-6,
        "hidden_act": "silu", "tie_word_embeddings": True,
        "pad_token_id": tok.pad_token_id, "eos_token_id": tok.eos_token_id,
        "bos_token_id": _token_id(tok, "<|endoftext|>"),
    }


_QWEN_ROPE = {"rope_type": "default", "mrope_section": [16, 24, 24], "rope_theta": 1_000_000.0}


def _qwen2_vl_2b(tok: PreTrainedTokenizerFast) -> PretrainedConfig:
    text = {**_text(tok, vocab=_QWEN_VOCAB, hidden=1536, inter=8960, layers=28, heads=12, kv=2,
                    max_positions=32768), "rope_parameters": _QWEN_ROPE}
    vision = {"depth": 32, "embed_dim": 1280, "hidden_size": 1536, "num_heads": 16,
              "mlp_ratio": 4, "patch_size": 14, "spatial_merge_size": 2,
              "temporal_patch_size": 2, "in_channels": 3, "hidden_act": "quick_gelu"}
    return Qwen2VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True,
                         **_qwen_ids(tok))


def _qwen2_5_vl_3b(tok: PreTrainedTokenizerFast) -> PretrainedConfig:
    text = {**_text(tok, vocab=_QWEN_VOCAB, hidden=2048, inter=11008, layers=36, heads=16, kv=2,
                    max_positions=128000), "rope_parameters": _QWEN_ROPE}
    vision = {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16,
              "out_hidden_size": 2048, "patch_size": 14, "spatial_merge_size": 2,
              "temporal_patch_size": 2, "window_size": 112, "hidden_act": "silu",
              "fullatt_block_indexes": [7, 15, 23, 31], "in_channels": 3}
    return Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True,
                            **_qwen_ids(tok))


def _llava_ov_0_5b(tok: PreTrainedTokenizerFast) -> PretrainedConfig:
    text = {"model_type": "qwen2", "rope_theta": 1_000_000.0,
            **_text(tok, vocab=_LLAVA_VOCAB, hidden=896, inter=4864, layers=24, heads=14, kv=2,
                    max_positions=32768)}
    vision = {"model_type": "siglip_vision_model", "hidden_size": 1152,
              "intermediate_size": 4304, "num_hidden_layers": 26, "num_attention_heads": 16,
              "image_size": 384, "patch_size": 14, "vision_use_head": False}
    return LlavaOnevisionConfig(
        text_config=text, vision_config=vision, tie_word_embeddings=True,
        image_token_index=_token_id(tok, "<image>"), video_token_index=_token_id(tok, "<video>"),
        vision_feature_select_strategy="full", vision_feature_layer=-1,
        image_grid_pinpoints=_LLAVA_PINPOINTS, projector_hidden_act="gelu",
    )


def _qwen_processor(cls: type[ProcessorMixin]) -> Callable[[PreTrainedTokenizerFast],
                                                           ProcessorMixin]:
    def build(tok: PreTrainedTokenizerFast) -> ProcessorMixin:
        image = Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=28 * 28 * 16384,
                                         patch_size=14, merge_size=2, temporal_patch_size=2)
        return cls(image_processor=image, tokenizer=tok, chat_template=tok.chat_template)

    return build


def _llava_processor(tok: PreTrainedTokenizerFast) -> ProcessorMixin:
    image = LlavaOnevisionImageProcessorPil(size={"height": 384, "width": 384},
                                            image_grid_pinpoints=_LLAVA_PINPOINTS)
    return ImageOnlyLlavaOnevisionProcessor(
        image_processor=image, tokenizer=tok, num_image_tokens=729,
        vision_feature_select_strategy="full", chat_template=tok.chat_template,
        vision_aspect_ratio="anyres_max_9",
    )


class RealSize:
    """The published config and processor of one architecture."""

    def __init__(self, label: str,
                 config: Callable[[PreTrainedTokenizerFast], PretrainedConfig],
                 processor: Callable[[PreTrainedTokenizerFast], ProcessorMixin]) -> None:
        self.label = label  # the published checkpoint these sizes come from
        self.config = config
        self.processor = processor


REAL_SIZES: dict[str, RealSize] = {
    "qwen2_vl": RealSize("Qwen2-VL-2B-Instruct", _qwen2_vl_2b,
                         _qwen_processor(ImageOnlyQwen2VLProcessor)),
    "qwen2_5_vl": RealSize("Qwen2.5-VL-3B-Instruct", _qwen2_5_vl_3b,
                           _qwen_processor(ImageOnlyQwen2_5_VLProcessor)),
    "llava_onevision": RealSize("llava-onevision-qwen2-0.5b-ov-hf", _llava_ov_0_5b,
                                _llava_processor),
}
"""Config overrides of each architecture at its published size (random weights, built offline)."""
