"""Turn (images, prompts, responses) into model inputs through the processor's chat template."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from PIL import Image
from transformers import BatchFeature, ProcessorMixin

__all__ = ["VLMInputError", "chat_texts", "encode_batch", "input_pixels", "to_rgb"]

PaddingSide = Literal["left", "right"]


class VLMInputError(ValueError):
    """An image, prompt or response the model cannot take; the message names the bad input."""


def to_rgb(image: Any, index: int = 0) -> Image.Image:
    """``image`` as an RGB PIL image, or a :class:`VLMInputError` naming its position."""
    if not isinstance(image, Image.Image):
        raise VLMInputError(
            f"image {index} is a {type(image).__name__}, expected a PIL.Image.Image"
        )
    if image.width < 1 or image.height < 1:
        raise VLMInputError(f"image {index} is empty ({image.width}x{image.height} pixels)")
    try:
        image.load()  # a lazily opened, truncated or corrupt file fails here, not mid-batch
        return image if image.mode == "RGB" else image.convert("RGB")
    except (ValueError, OSError) as exc:
        raise VLMInputError(
            f"image {index} (mode {image.mode!r}) cannot be read as RGB: {exc}"
        ) from exc


def _size_field(size: Any, name: str) -> int | None:
    value = size.get(name) if isinstance(size, dict) else getattr(size, name, None)
    return int(value) if value else None


def input_pixels(processor: Any) -> int | None:
    """The most pixels of one image the model ever sees, read from its image processor's
    settings (None: it declares no bound). A larger image is shrunk by the processor anyway,
    so a caller may scale it down to this first (``sdk.data.fit_to_pixels``).

    Qwen2-VL / Qwen2.5-VL: ``max_pixels`` (kept as ``size["longest_edge"]``); LLaVA-OneVision:
    its largest anyres grid pinpoint; a fixed-size processor: ``height x width``.
    """
    images = getattr(processor, "image_processor", processor)
    pinpoints = getattr(images, "image_grid_pinpoints", None)
    if pinpoints:
        return max(int(h) * int(w) for h, w in pinpoints)
    own = getattr(images, "max_pixels", None)
    if own:
        return int(own)
    size = getattr(images, "size", None)
    if size is None:
        return None
    if "Qwen2VL" in type(images).__name__:  # its ``longest_edge`` is a pixel count
        return _size_field(size, "longest_edge") or _size_field(size, "max_pixels")
    height, width = _size_field(size, "height"), _size_field(size, "width")
    return height * width if height and width else _size_field(size, "max_pixels")


def chat_texts(
    processor: ProcessorMixin,
    prompts: Sequence[str],
    responses: Sequence[str] | None = None,
) -> list[str]:
    """One chat-formatted string per sample: user turn (image + prompt), then the response.

    Without ``responses`` each text ends with the generation prompt (for a policy to continue).
    """
    texts = []
    for i, prompt in enumerate(prompts):
        if not isinstance(prompt, str):
            raise VLMInputError(f"prompt {i} is a {type(prompt).__name__}, expected str")
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}
        ]
        if responses is not None:
            response = responses[i]
            if not isinstance(response, str) or not response.strip():
                raise VLMInputError(f"response {i} is empty or not a string: {response!r}")
            messages.append(
                {"role": "assistant", "content": [{"type": "text", "text": response}]}
            )
        texts.append(
            processor.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=responses is None
            )
        )
    return texts


def encode_batch(
    processor: ProcessorMixin,
    images: Sequence[Any],
    prompts: Sequence[str],
    responses: Sequence[str] | None = None,
    *,
    max_length: int,
    padding_side: PaddingSide = "right",
    pad_to_multiple_of: int | None = None,
) -> BatchFeature:
    """Processor outputs (input_ids (B, T), attention_mask (B, T), pixel tensors) for a batch.

    Use ``padding_side="left"`` for generation prompts; scoring works with either side.
    ``pad_to_multiple_of``: T rounded up to a multiple of it (fewer distinct shapes).
    Raises :class:`VLMInputError` for a bad image, an empty response, mismatched lengths, or a
    sample longer than ``max_length`` tokens (image tokens included).
    """
    n = len(images)
    if len(prompts) != n or (responses is not None and len(responses) != n):
        raise VLMInputError(
            f"batch lengths differ: {n} images, {len(prompts)} prompts, "
            f"{'no' if responses is None else len(responses)} responses"
        )
    if n == 0:
        raise VLMInputError("empty batch: no images, prompts or responses given")
    rgb = [to_rgb(image, i) for i, image in enumerate(images)]
    texts = chat_texts(processor, prompts, responses)
    tokenizer = processor.tokenizer
    previous_side = tokenizer.padding_side
    tokenizer.padding_side = padding_side
    try:
        batch = processor(images=rgb, text=texts, padding=True,
                          pad_to_multiple_of=pad_to_multiple_of, return_tensors="pt")
    finally:
        tokenizer.padding_side = previous_side
    lengths = batch["attention_mask"].sum(dim=1)  # (B,)
    too_long = (lengths > max_length).nonzero().flatten().tolist()
    if too_long:
        i = too_long[0]
        raise VLMInputError(
            f"sample {i} is {int(lengths[i])} tokens long (image tokens included), "
            f"over the model's limit of {max_length} tokens"
        )
    return batch
