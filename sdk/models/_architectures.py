"""The supported VLM architectures: their tiny configs, special tokens and processors.

Each architecture is one small ``ArchitectureSpec`` in a registry (no string if/elif chains).
A spec knows how to build a tiny config of the *real* transformers class and the matching
processor (PIL image processor, no torchvision) around a locally trained tokenizer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from transformers import (
    LlavaOnevisionConfig,
    LlavaOnevisionForConditionalGeneration,
    LlavaOnevisionImageProcessorPil,
    LlavaOnevisionProcessor,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    ProcessorMixin,
    Qwen2_5_VLConfig,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2_5_VLProcessor,
    Qwen2VLConfig,
    Qwen2VLForConditionalGeneration,
    Qwen2VLImageProcessorPil,
    Qwen2VLProcessor,
)

from sdk.models._tokenizer import train_tokenizer

__all__ = [
    "ARCHITECTURES",
    "ArchitectureSpec",
    "ModelSize",
    "UnknownArchitectureError",
    "get_architecture",
    "size_with_hidden",
]

ModelSize = Literal["tiny", "small"]
"""Size preset of a built model: ``tiny`` (tests, demo) or ``small``."""

# Images are 84x84 in the benchmark: Qwen's 14-pixel patches merged 2x2 give a 3x3 grid
# (9 image tokens); LLaVA-OneVision's 42-pixel crops of 14-pixel patches give 9 per crop.
_IMAGE_SIDE = 84
_QWEN_PATCH = 14
_QWEN_MERGE = 2
_LLAVA_CROP = 42

# Text width per size: (hidden, intermediate, layers, heads, kv_heads).
_TEXT_DIMS: dict[ModelSize, tuple[int, int, int, int, int]] = {
    "tiny": (64, 128, 2, 4, 2),
    "small": (128, 256, 4, 4, 2),
}
_MAX_POSITIONS = 512

_QWEN_SPECIALS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
_LLAVA_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<video>")


def _chat_template(image_markup: str) -> str:
    # ChatML, as both Qwen and LLaVA-OneVision (Qwen2 language model) checkpoints use it.
    return (
        "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
        "{% if message['content'] is string %}{{ message['content'] }}"
        "{% else %}{% for part in message['content'] %}"
        "{% if part['type'] == 'image' %}" + image_markup + "{% elif part['type'] == 'text' %}"
        "{{ part['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )


class UnknownArchitectureError(ValueError):
    """An architecture name (or a checkpoint's model_type) that fedmor does not support."""


def _text_config(size: ModelSize, vocab: int, tok: PreTrainedTokenizerFast) -> dict[str, Any]:
    hidden, inter, layers, heads, kv = _TEXT_DIMS[size]
    return {
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "max_position_embeddings": _MAX_POSITIONS,
        "pad_token_id": tok.pad_token_id,
        "eos_token_id": tok.eos_token_id,
        "bos_token_id": _token_id(tok, "<|endoftext|>"),
        "tie_word_embeddings": True,
    }


def _mrope(size: ModelSize) -> dict[str, Any]:
    hidden, _, _, heads, _ = _TEXT_DIMS[size]
    half = hidden // heads // 2  # mrope sections (t, h, w) must sum to head_dim / 2
    return {"rope_type": "default", "mrope_section": [half - 2 * (half // 3), half // 3, half // 3],
            "rope_theta": 10000.0}


def _token_id(tok: PreTrainedTokenizerFast, token: str) -> int:
    return int(tok.convert_tokens_to_ids(token))  # type: ignore[arg-type]


def _qwen_ids(tok: PreTrainedTokenizerFast) -> dict[str, Any]:
    def ids(token: str) -> int:
        return _token_id(tok, token)

    return {
        "image_token_id": ids("<|image_pad|>"),
        "video_token_id": ids("<|video_pad|>"),
        "vision_start_token_id": ids("<|vision_start|>"),
        "vision_end_token_id": ids("<|vision_end|>"),
    }


def _qwen2_vl_config(size: ModelSize, tok: PreTrainedTokenizerFast) -> PretrainedConfig:
    text = {**_text_config(size, len(tok), tok), "rope_parameters": _mrope(size)}
    vision = {"depth": 2, "embed_dim": 32, "hidden_size": text["hidden_size"], "num_heads": 2,
              "mlp_ratio": 2, "patch_size": _QWEN_PATCH, "spatial_merge_size": _QWEN_MERGE,
              "temporal_patch_size": 2}
    return Qwen2VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True,
                         **_qwen_ids(tok))


def _qwen2_5_vl_config(size: ModelSize, tok: PreTrainedTokenizerFast) -> PretrainedConfig:
    text = {**_text_config(size, len(tok), tok), "rope_parameters": _mrope(size)}
    vision = {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
              "out_hidden_size": text["hidden_size"], "patch_size": _QWEN_PATCH,
              "spatial_merge_size": _QWEN_MERGE, "temporal_patch_size": 2,
              "window_size": _IMAGE_SIDE, "fullatt_block_indexes": [1]}
    return Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True,
                            **_qwen_ids(tok))


def _llava_ov_config(size: ModelSize, tok: PreTrainedTokenizerFast) -> PretrainedConfig:
    text = {"model_type": "qwen2", **_text_config(size, len(tok), tok)}
    vision = {"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 64,
              "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": _LLAVA_CROP,
              "patch_size": _QWEN_PATCH}
    return LlavaOnevisionConfig(
        text_config=text, vision_config=vision, tie_word_embeddings=True,
        image_token_index=_token_id(tok, "<image>"),
        video_token_index=_token_id(tok, "<video>"),
        vision_feature_select_strategy="full", vision_feature_layer=-1,
        image_grid_pinpoints=[[_IMAGE_SIDE, _IMAGE_SIDE]],
    )


def _qwen_image_processor() -> Qwen2VLImageProcessorPil:
    side = _IMAGE_SIDE
    return Qwen2VLImageProcessorPil(min_pixels=side * side, max_pixels=side * side,
                                    patch_size=_QWEN_PATCH, merge_size=_QWEN_MERGE,
                                    temporal_patch_size=2)


def _image_only(base: type[ProcessorMixin]) -> type[ProcessorMixin]:
    """``base`` without its video processor.

    Video processors need torchvision, which does not import beside this torch build. The
    processor's sub-components are read from ``__init__``'s signature, so a subclass whose
    ``__init__`` has no ``video_processor`` parameter is an image-only processor.
    """

    def __init__(self: ProcessorMixin, image_processor: Any = None, tokenizer: Any = None,
                 chat_template: str | None = None, **kwargs: Any) -> None:
        base.__init__(self, image_processor=image_processor, tokenizer=tokenizer,
                      video_processor=None, chat_template=chat_template, **kwargs)

    return type(base.__name__, (base,), {"__init__": __init__, "__module__": __name__})


ImageOnlyQwen2VLProcessor = _image_only(Qwen2VLProcessor)
ImageOnlyQwen2_5_VLProcessor = _image_only(Qwen2_5_VLProcessor)


class ImageOnlyLlavaOnevisionProcessor(LlavaOnevisionProcessor):
    """LLaVA-OneVision's processor without a video processor (its options named, so they save)."""

    def __init__(self, image_processor: Any = None, tokenizer: Any = None,
                 num_image_tokens: int | None = None,
                 vision_feature_select_strategy: str | None = None,
                 chat_template: str | None = None, image_token: str = "<image>",
                 video_token: str = "<video>", vision_aspect_ratio: str = "anyres_max_9",
                 **kwargs: Any) -> None:
        super().__init__(image_processor=image_processor, tokenizer=tokenizer,
                         video_processor=None, num_image_tokens=num_image_tokens,
                         vision_feature_select_strategy=vision_feature_select_strategy,
                         chat_template=chat_template, image_token=image_token,
                         video_token=video_token, vision_aspect_ratio=vision_aspect_ratio,
                         **kwargs)


def _qwen2_vl_processor(tok: PreTrainedTokenizerFast) -> ProcessorMixin:
    return ImageOnlyQwen2VLProcessor(image_processor=_qwen_image_processor(), tokenizer=tok,
                                     chat_template=tok.chat_template)


def _qwen2_5_vl_processor(tok: PreTrainedTokenizerFast) -> ProcessorMixin:
    return ImageOnlyQwen2_5_VLProcessor(image_processor=_qwen_image_processor(), tokenizer=tok,
                                        chat_template=tok.chat_template)


def _llava_ov_processor(tok: PreTrainedTokenizerFast) -> ProcessorMixin:
    image_processor = LlavaOnevisionImageProcessorPil(
        size={"height": _LLAVA_CROP, "width": _LLAVA_CROP},
        image_grid_pinpoints=[[_IMAGE_SIDE, _IMAGE_SIDE]],
    )
    return ImageOnlyLlavaOnevisionProcessor(
        image_processor=image_processor, tokenizer=tok,
        num_image_tokens=(_LLAVA_CROP // _QWEN_PATCH) ** 2,
        vision_feature_select_strategy="full", chat_template=tok.chat_template,
        vision_aspect_ratio="anyres_max_9",
    )


@dataclass(frozen=True)
class ArchitectureSpec:
    """How to build one architecture: its model class, special tokens and processor."""

    name: str
    model_type: str  # the checkpoint's config.model_type
    model_class: type[PreTrainedModel]
    special_tokens: tuple[str, ...]
    image_token: str
    image_markup: str  # what the chat template writes for one image
    build_config: Callable[[ModelSize, PreTrainedTokenizerFast], PretrainedConfig]
    build_processor: Callable[[PreTrainedTokenizerFast], ProcessorMixin]
    processor_class: type[ProcessorMixin]

    def build_tokenizer(self, corpus: Iterable[str], *, vocab_size: int = 1024
                        ) -> PreTrainedTokenizerFast:
        """Train this architecture's tokenizer (special tokens and chat template included)."""
        return train_tokenizer(
            corpus, self.special_tokens, vocab_size=vocab_size, pad_token="<|endoftext|>",
            eos_token="<|im_end|>", chat_template=_chat_template(self.image_markup),
        )


ARCHITECTURES: dict[str, ArchitectureSpec] = {
    spec.name: spec
    for spec in (
        ArchitectureSpec("qwen2_vl", "qwen2_vl", Qwen2VLForConditionalGeneration, _QWEN_SPECIALS,
                         "<|image_pad|>", "<|vision_start|><|image_pad|><|vision_end|>",
                         _qwen2_vl_config, _qwen2_vl_processor, ImageOnlyQwen2VLProcessor),
        ArchitectureSpec("qwen2_5_vl", "qwen2_5_vl", Qwen2_5_VLForConditionalGeneration,
                         _QWEN_SPECIALS, "<|image_pad|>",
                         "<|vision_start|><|image_pad|><|vision_end|>",
                         _qwen2_5_vl_config, _qwen2_5_vl_processor,
                         ImageOnlyQwen2_5_VLProcessor),
        ArchitectureSpec("llava_onevision", "llava_onevision",
                         LlavaOnevisionForConditionalGeneration, _LLAVA_SPECIALS, "<image>",
                         "<image>\n", _llava_ov_config, _llava_ov_processor,
                         ImageOnlyLlavaOnevisionProcessor),
    )
}
"""The supported VLM architectures by name (``qwen2_vl``, ``qwen2_5_vl``, ``llava_onevision``)."""


def size_with_hidden(hidden_size: int) -> ModelSize | None:
    """The size whose language model is ``hidden_size`` wide; None for a checkpoint that no
    size here builds (a real one)."""
    for size, dims in _TEXT_DIMS.items():
        if dims[0] == hidden_size:
            return size
    return None


def get_architecture(name: str) -> ArchitectureSpec:
    """Look up an architecture by name or by a checkpoint's ``model_type``."""
    for spec in ARCHITECTURES.values():
        if name in (spec.name, spec.model_type):
            return spec
    raise UnknownArchitectureError(
        f"unknown VLM architecture {name!r}; supported: {sorted(ARCHITECTURES)}"
    )
