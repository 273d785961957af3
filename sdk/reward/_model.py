"""``RewardModel``: a VLM backbone plus a scalar head on the last non-pad token."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch
from peft import inject_adapter_in_model
from torch import nn

from sdk.models import Runtime, VLMBundle, VLMInputError, encode_batch, get_architecture, load_vlm
from sdk.reward._checkpoint import (
    CHECKPOINT_CONFIG,
    CHECKPOINT_WEIGHTS,
    RewardCheckpointError,
    checkpoint_bundle,
    checkpoint_document,
    load_checkpoint_weights,
    read_checkpoint_config,
    save_checkpoint,
)
from sdk.reward._config import LoraSettings

__all__ = [
    "CHECKPOINT_CONFIG",
    "CHECKPOINT_WEIGHTS",
    "PairLike",
    "RewardCheckpointError",
    "RewardInputError",
    "RewardModel",
]

ACTIVATION_BUDGET = 1 << 23
"""Most rows x tokens x MLP width one forward pass takes (one MLP intermediate of 2^23
elements); more rows go through several forwards, so only long sequences reach it. Scoring
takes the same budget: on a CPU long rows score as fast one at a time as several a forward, in
less activation memory (docs/hardware.md)."""


def length_bucket(tokens: int) -> int:
    """What a row of ``tokens`` tokens is padded to a multiple of when it goes alone: the
    largest power of two at most tokens / 16, so at most 1/16 more tokens.

    On a CPU every new sequence length leaves new oneDNN kernels cached, so resident memory
    grows with each distinct row length; lengths in a few buckets keep that cache small
    (docs/hardware.md).
    """
    return 1 << max(0, tokens.bit_length() - 5)


class RewardInputError(VLMInputError):
    """Bad reward-model input: non-image, empty response, text over the length limit."""


class PairLike(Protocol):
    """What a preference pair must offer (``sdk.data.PreferencePair`` does)."""

    @property
    def image(self) -> Any: ...
    @property
    def prompt(self) -> str: ...
    @property
    def chosen(self) -> str: ...
    @property
    def rejected(self) -> str: ...


class RewardModel(nn.Module):
    """R(x, y): backbone hidden state of the last non-pad token -> linear head -> scalar."""

    def __init__(self, bundle: VLMBundle, *, lora: LoraSettings | None = None) -> None:
        super().__init__()
        self.bundle = bundle
        self.architecture = bundle.architecture
        self.max_length = bundle.max_length
        self.lora = lora
        self.backbone = bundle.model
        text_config = bundle.model.config.get_text_config()
        self._mlp_width = int(getattr(text_config, "intermediate_size", 4 * bundle.hidden_size))
        if lora is not None:
            inject_adapter_in_model(lora.peft_config(), self.backbone)
            for name, param in self.backbone.named_parameters():
                param.requires_grad = "lora_" in name
                if param.requires_grad:
                    # Adapters train in float32 over a bfloat16 / float16 backbone (peft casts
                    # the activations); they are a few MB.
                    param.data = param.data.float()
        device = next(self.backbone.parameters()).device
        # The head stays float32: forward casts the pooled state to it, so scores are float32.
        self.head = nn.Linear(bundle.hidden_size, 1, device=device)
        nn.init.normal_(self.head.weight, std=1.0 / bundle.hidden_size**0.5)
        nn.init.zeros_(self.head.bias)

    @classmethod
    def from_backbone(cls, path: str | Path, *, lora: LoraSettings | None = None,
                      runtime: Runtime | None = None) -> RewardModel:
        """A fresh reward model over the VLM checkpoint directory ``path``, loaded on
        ``runtime``'s device in its dtype (default: float32 on the CPU without a GPU)."""
        return cls(load_vlm(path, runtime=runtime), lora=lora)

    # -- scoring -----------------------------------------------------------------------------
    def encode(
        self, images: Sequence[Any], prompts: Sequence[str], responses: Sequence[str],
        *, pad_to_multiple_of: int | None = None,
    ) -> Mapping[str, torch.Tensor]:
        """Processor outputs for a batch (right-padded); raises :class:`RewardInputError` on
        bad input."""
        try:
            return encode_batch(
                self.bundle.processor, images, prompts, responses, max_length=self.max_length,
                pad_to_multiple_of=pad_to_multiple_of,
            )
        except RewardInputError:
            raise
        except VLMInputError as exc:
            raise RewardInputError(str(exc)) from exc

    def rows_per_forward(self, tokens: int) -> int:
        """How many rows of ``tokens`` tokens one forward pass may take (at least 1): the
        activations of a forward grow with rows x tokens x MLP width (:data:`ACTIVATION_BUDGET`).
        """
        return max(1, ACTIVATION_BUDGET // max(1, tokens * self._mlp_width))

    @property
    def device(self) -> torch.device:
        """Where the model's trained head (and so its output) lives."""
        return self.head.weight.device

    def forward(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Rewards (B,) in float32 for a processor batch (input_ids (B, T), attention_mask
        (B, T), pixels), on the model's device."""
        device = self.device
        inputs = {k: v.to(device) for k, v in batch.items() if k != "labels"}
        mask = inputs["attention_mask"]  # (B, T), 1 on real tokens
        if mask.shape[0] == 1 and bool((mask[:, :-1] >= mask[:, 1:]).all()):
            # A row alone, right-padded to its length bucket: in a causal decoder no real token
            # attends to a later pad, so the mask changes nothing read here, and without it
            # attention takes its causal kernel, faster than a padded one. Batches keep their
            # mask: their numbers do not change.
            inputs["attention_mask"] = torch.ones_like(mask)
        # The inner VLM (no lm_head): last_hidden_state is (B, T, H).
        hidden = self.backbone.model(**inputs).last_hidden_state
        positions = torch.arange(mask.shape[1], device=mask.device)
        last = (mask * positions).argmax(dim=1)  # (B,) last real token, either padding side
        pooled = hidden[torch.arange(hidden.shape[0], device=hidden.device), last]  # (B, H)
        return self.head(pooled.to(self.head.weight.dtype)).squeeze(-1)  # (B,)

    @torch.no_grad()
    def score(
        self,
        images: Sequence[Any],
        prompts: Sequence[str],
        responses: Sequence[str],
        *,
        batch_size: int = 32,
    ) -> torch.Tensor:
        """Raw rewards (B,) for (image, prompt, response) triples, batched internally; float32
        on the CPU."""
        if not (len(images) == len(prompts) == len(responses)):
            raise RewardInputError(
                f"batch lengths differ: {len(images)} images, {len(prompts)} prompts, "
                f"{len(responses)} responses"
            )
        was_training = self.training
        self.eval()
        try:
            chunks = [self.rewards(images[i : i + batch_size], prompts[i : i + batch_size],
                                   responses[i : i + batch_size])
                      for i in range(0, len(images), batch_size)]
        finally:
            self.train(was_training)
        # Whatever the model's dtype and device, the scores are float32 on the CPU.
        return torch.cat(chunks).float().cpu() if chunks else torch.empty(0)

    def rewards(self, images: Sequence[Any], prompts: Sequence[str], responses: Sequence[str],
                *, batch: Mapping[str, torch.Tensor] | None = None) -> torch.Tensor:
        """Rewards (B,) like :meth:`forward` (with a graph when grad is on), in forwards of at
        most :meth:`rows_per_forward` rows (each padded to its own longest row: the same
        rewards). ``batch``: these rows already encoded.

        Separate forwards make separate graphs, and backward finishes one before it starts the
        next, so under activation checkpointing only one forward's layer is recomputed at a time.
        Rows that go alone are padded to a length in :func:`length_bucket`.
        """
        batch = self.encode(images, prompts, responses) if batch is None else batch
        tokens = batch["input_ids"].shape[1]
        rows = self.rows_per_forward(tokens)
        if rows == 1:
            multiple = length_bucket(tokens)
            return torch.cat([self(self.encode(images[i : i + 1], prompts[i : i + 1],
                                               responses[i : i + 1], pad_to_multiple_of=multiple))
                              for i in range(len(images))])
        if rows >= len(images):
            return self(batch)
        return torch.cat([self(self.encode(images[i : i + rows], prompts[i : i + rows],
                                           responses[i : i + rows]))
                          for i in range(0, len(images), rows)])

    # -- checkpoints -------------------------------------------------------------------------
    def trained_state(self) -> dict[str, torch.Tensor]:
        """The tensors training changed, under LoRA: the head and the adapters (not the
        backbone). Without LoRA the head only (the backbone is saved whole beside it)."""
        return {name: param.detach() for name, param in self.named_parameters()
                if name.startswith("head.") or (self.lora is not None and "lora_" in name)}

    def checkpoint_config(self) -> dict[str, Any]:
        """The JSON document stored beside the weights."""
        return checkpoint_document(self)

    def save_pretrained(self, out_dir: str | Path, *, extra: Mapping[str, Any] | None = None
                        ) -> Path:
        """Write the checkpoint: under LoRA the adapters, head and a reference to the base
        checkpoint (path and config hash); fully fine-tuned, the backbone too."""
        return save_checkpoint(self, out_dir, extra=extra)

    @staticmethod
    def read_checkpoint_config(path: str | Path) -> dict[str, Any]:
        """The checkpoint's JSON config, or a :class:`RewardCheckpointError`."""
        return read_checkpoint_config(path)

    @classmethod
    def from_pretrained(cls, path: str | Path, *, architecture: str | None = None,
                        base: str | Path | None = None, runtime: Runtime | None = None
                        ) -> RewardModel:
        """Load a reward checkpoint; ``architecture`` (if given) must match the checkpoint's.

        An adapter (LoRA) checkpoint is loaded over its base VLM: ``base`` or, by default, the
        directory it was trained on; a base whose config.json differs from the recorded hash
        is refused. ``runtime`` says where and in which dtype the model lives.
        """
        config = read_checkpoint_config(path)
        if architecture is not None and get_architecture(architecture).name != config[
            "architecture"
        ]:
            raise RewardCheckpointError(
                f"checkpoint {path} holds a {config['architecture']} reward model, "
                f"not the requested {architecture}"
            )
        bundle = checkpoint_bundle(path, config, base=base, runtime=runtime)
        lora = None if config["lora"] is None else LoraSettings(**config["lora"])
        model = cls(bundle, lora=lora)
        model.load_weights(path)
        model.eval()
        return model

    def load_weights(self, path: str | Path) -> None:
        """Load a checkpoint's weights into this model; architectures and shapes must match."""
        load_checkpoint_weights(self, path)
