"""``VLMEncoder``: the frozen reference VLM's last hidden states as the router's input.

One forward pass of the base model (no LM head) over the chat-formatted (image, prompt, response);
the image tokens' states are mean-pooled to ``image_tokens`` and the last ``max_text_tokens``
text states are kept, so the router sees a short sequence. The vision tower's output for each
image is cached by content hash and handed back through transformers' ``mm_encoder_outputs``, so
an image shared by M responses goes through the vision tower once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import torch
from PIL import Image
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor
from transformers import PreTrainedModel, ProcessorMixin
from transformers.modeling_outputs import BaseModelOutputWithPooling

from sdk.models import encode_batch, to_rgb
from sdk.router._encoder import (
    EncodedBatch,
    ImageFeatureCache,
    check_triples,
    image_key,
    open_image,
)
from sdk.router._errors import RouterShapeError
from sdk.wire import ImageRef

__all__ = ["VLMEncoder", "VLMEncoderConfig"]


class VLMEncoderConfig(BaseModel):
    """How much of the VLM's hidden-state sequence the router sees."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    image_tokens: int = Field(default=4, ge=1, description="image states mean-pooled to this many")
    max_text_tokens: int = Field(default=24, ge=1, description="last text states kept")
    batch_size: int = Field(default=16, ge=1, description="triples per forward pass")


def _weights_fingerprint(model: PreTrainedModel) -> str:
    h = hashlib.sha256(str(model.config.model_type).encode())
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def _image_token_id(model: PreTrainedModel) -> int:
    for attr in ("image_token_id", "image_token_index"):
        value = getattr(model.config, attr, None)
        if isinstance(value, int):
            return value
    raise RouterShapeError(
        f"{type(model).__name__} config names no image_token_id / image_token_index"
    )


class VLMEncoder:
    """Frozen VLM encoder over a transformers ``...ForConditionalGeneration`` model and its
    processor (tested with tiny Qwen2-VL, Qwen2.5-VL and LLaVA-OneVision); satisfies :class:`~sdk.router.Encoder`.
    The VLM runs where it was loaded (``load_vlm(path, runtime=...)``), in its dtype; the
    encodings come back as float32 on the CPU.

    ``encoder_id`` defaults to the model type plus a sha256 of all weights; pass one explicitly
    for large checkpoints (e.g. the checkpoint's published hash).
    """

    def __init__(
        self,
        model: PreTrainedModel,
        processor: ProcessorMixin,
        *,
        config: VLMEncoderConfig | None = None,
        encoder_id: str | None = None,
        max_length: int | None = None,
    ) -> None:
        self.config = config or VLMEncoderConfig()
        self.model = model.eval().requires_grad_(False)
        self.processor = processor
        text_config = model.config.get_text_config()
        self._dim = int(text_config.hidden_size)
        self._max_length = int(max_length or text_config.max_position_embeddings)
        self._image_token = _image_token_id(model)
        self._device = next(model.parameters()).device  # where the VLM was loaded (Runtime)
        self._encoder_id = encoder_id or (
            f"vlm:{model.config.model_type}:{_weights_fingerprint(model)}"
        )
        self.image_cache = ImageFeatureCache()

    @property
    def dim(self) -> int:
        """Hidden size of the VLM's text model."""
        return self._dim

    @property
    def encoder_id(self) -> str:
        """Model type and weights fingerprint."""
        return self._encoder_id

    def _image_features(self, image: Image.Image, key: str) -> Tensor:
        """Vision-tower output for one image (n_image_tokens, H), from the cache when possible."""
        cached = self.image_cache.get(key)
        if cached is not None:
            return cached
        pixels: dict[str, Any] = {
            k: v.to(self._device)
            for k, v in self.processor.image_processor([image], return_tensors="pt").items()
        }
        out = self.model.model.get_image_features(**pixels, return_dict=True)
        features = out.pooler_output[0]
        self.image_cache.put(key, features)
        return features

    def _pool(self, hidden: Tensor, input_ids: Tensor, attention: Tensor) -> EncodedBatch:
        """(B, L, H) model states -> (B, image_tokens + max_text_tokens, H) router tokens."""
        c = self.config
        b = hidden.shape[0]
        out = torch.zeros(b, c.image_tokens + c.max_text_tokens, self._dim)
        mask = torch.zeros(b, c.image_tokens + c.max_text_tokens, dtype=torch.bool)
        is_image = input_ids == self._image_token  # (B, L)
        for i in range(b):
            img = hidden[i, is_image[i]]  # (n_img, H)
            if img.shape[0]:
                pooled = torch.nn.functional.adaptive_avg_pool1d(img.T.unsqueeze(0), c.image_tokens)
                out[i, : c.image_tokens] = pooled[0].T
                mask[i, : c.image_tokens] = True
            text = hidden[i, attention[i].bool() & ~is_image[i]][-c.max_text_tokens :]  # (n, H)
            out[i, c.image_tokens : c.image_tokens + text.shape[0]] = text
            mask[i, c.image_tokens : c.image_tokens + text.shape[0]] = True
        return EncodedBatch(hidden=out, mask=mask)

    @torch.no_grad()
    def _encode_chunk(
        self, images: Sequence[Image.Image], keys: Sequence[str], prompts: Sequence[str],
        responses: Sequence[str],
    ) -> EncodedBatch:
        batch = encode_batch(
            self.processor, images, prompts, responses, max_length=self._max_length
        )
        inputs = {
            k: v.to(self._device) for k, v in batch.items()
            if k not in ("pixel_values", "pixel_values_videos")
        }
        features = tuple(self._image_features(img, key)
                         for img, key in zip(images, keys, strict=True))
        out = self.model.model(
            **inputs,
            # transformers takes one (n_tokens, H) tensor per image in pooler_output
            mm_encoder_outputs={"image": BaseModelOutputWithPooling(pooler_output=features)},  # type: ignore[arg-type]
        )
        # The router's inputs are float32 on the CPU, whatever the VLM's device and dtype.
        return self._pool(
            out.last_hidden_state.float().cpu(), batch["input_ids"], batch["attention_mask"]
        )

    def encode(
        self,
        images: Sequence[Image.Image | ImageRef | None],
        prompts: Sequence[str],
        responses: Sequence[str],
    ) -> EncodedBatch:
        """Encode B triples (every triple needs an image) in chunks of ``config.batch_size``;
        the processor needs every image's pixels, so references are decoded here."""
        check_triples(images, prompts, responses)
        if not images:
            raise RouterShapeError("VLMEncoder.encode needs at least one triple")
        rgb, keys = [], []
        for i, image in enumerate(images):
            if image is None:
                raise RouterShapeError(f"image {i} is None: VLMEncoder needs an image per triple")
            rgb.append(to_rgb(open_image(image), i))
            keys.append(image_key(image))
        step = self.config.batch_size
        chunks = [
            self._encode_chunk(rgb[s : s + step], keys[s : s + step], prompts[s : s + step],
                               responses[s : s + step])
            for s in range(0, len(rgb), step)
        ]
        return EncodedBatch(
            hidden=torch.cat([ch.hidden for ch in chunks]),
            mask=torch.cat([ch.mask for ch in chunks]),
        )
