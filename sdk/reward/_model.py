"""``RewardModel``: a VLM backbone plus a scalar head on the last non-pad token."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch
from peft import inject_adapter_in_model
from safetensors.torch import load_model, save_model
from torch import nn
from transformers import AutoConfig

from sdk.models import (
    VLMBundle,
    VLMInputError,
    encode_batch,
    get_architecture,
    load_vlm,
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

CHECKPOINT_CONFIG = "reward_config.json"
CHECKPOINT_WEIGHTS = "reward_model.safetensors"
_BACKBONE_DIR = "backbone"
_FORMAT_VERSION = 1


class RewardInputError(VLMInputError):
    """Bad reward-model input: non-image, empty response, text over the length limit."""


class RewardCheckpointError(ValueError):
    """A reward checkpoint that is missing, malformed, or of another architecture."""


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
        if lora is not None:
            inject_adapter_in_model(lora.peft_config(), self.backbone)
            for name, param in self.backbone.named_parameters():
                param.requires_grad = "lora_" in name
        self.head = nn.Linear(bundle.hidden_size, 1)
        nn.init.normal_(self.head.weight, std=1.0 / bundle.hidden_size**0.5)
        nn.init.zeros_(self.head.bias)

    @classmethod
    def from_backbone(cls, path: str | Path, *, lora: LoraSettings | None = None) -> RewardModel:
        """A fresh reward model over the VLM checkpoint directory ``path``."""
        return cls(load_vlm(path), lora=lora)

    # -- scoring -----------------------------------------------------------------------------
    def encode(
        self, images: Sequence[Any], prompts: Sequence[str], responses: Sequence[str]
    ) -> Mapping[str, torch.Tensor]:
        """Processor outputs for a batch; raises :class:`RewardInputError` on bad input."""
        try:
            return encode_batch(
                self.bundle.processor, images, prompts, responses, max_length=self.max_length
            )
        except RewardInputError:
            raise
        except VLMInputError as exc:
            raise RewardInputError(str(exc)) from exc

    def forward(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Rewards (B,) for a processor batch (input_ids (B, T), attention_mask (B, T), pixels)."""
        inputs = dict(batch)
        inputs.pop("labels", None)
        # The inner VLM (no lm_head): last_hidden_state is (B, T, H).
        hidden = self.backbone.model(**inputs).last_hidden_state
        mask = inputs["attention_mask"]  # (B, T), 1 on real tokens
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
        """Raw rewards (B,) for (image, prompt, response) triples, batched internally."""
        if not (len(images) == len(prompts) == len(responses)):
            raise RewardInputError(
                f"batch lengths differ: {len(images)} images, {len(prompts)} prompts, "
                f"{len(responses)} responses"
            )
        was_training = self.training
        self.eval()
        try:
            chunks = [
                self(self.encode(images[i : i + batch_size], prompts[i : i + batch_size],
                                 responses[i : i + batch_size]))
                for i in range(0, len(images), batch_size)
            ]
        finally:
            self.train(was_training)
        return torch.cat(chunks) if chunks else torch.empty(0)

    # -- checkpoints -------------------------------------------------------------------------
    def checkpoint_config(self) -> dict[str, Any]:
        """The JSON document stored beside the weights."""
        return {
            "format_version": _FORMAT_VERSION,
            "architecture": self.architecture,
            "model_type": get_architecture(self.architecture).model_type,
            "backbone": {"dir": _BACKBONE_DIR, "source": str(self.bundle.path)},
            "hidden_size": self.bundle.hidden_size,
            "max_length": self.max_length,
            "head": {"type": "linear", "in_features": self.bundle.hidden_size, "pooling": "last"},
            "lora": None if self.lora is None else self.lora.model_dump(mode="json"),
        }

    def save_pretrained(self, out_dir: str | Path, *, extra: Mapping[str, Any] | None = None
                        ) -> Path:
        """Write backbone config + processor, all weights (safetensors) and the JSON config."""
        out = Path(out_dir)
        backbone_dir = out / _BACKBONE_DIR
        backbone_dir.mkdir(parents=True, exist_ok=True)
        self.backbone.config.save_pretrained(backbone_dir)
        self.bundle.processor.save_pretrained(backbone_dir)
        save_model(self, str(out / CHECKPOINT_WEIGHTS))  # handles tied embeddings
        config = {**self.checkpoint_config(), **(extra or {})}
        (out / CHECKPOINT_CONFIG).write_text(json.dumps(config, indent=2))
        return out

    @staticmethod
    def read_checkpoint_config(path: str | Path) -> dict[str, Any]:
        """The checkpoint's JSON config, or a :class:`RewardCheckpointError`."""
        config_file = Path(path) / CHECKPOINT_CONFIG
        if not config_file.is_file():
            raise RewardCheckpointError(f"no reward checkpoint at {path}: {config_file} missing")
        try:
            config: dict[str, Any] = json.loads(config_file.read_text())
        except json.JSONDecodeError as exc:
            raise RewardCheckpointError(f"{config_file} is not valid JSON: {exc}") from exc
        if config.get("format_version") != _FORMAT_VERSION:
            raise RewardCheckpointError(
                f"{config_file} has format_version {config.get('format_version')!r}, "
                f"expected {_FORMAT_VERSION}"
            )
        return config

    @classmethod
    def from_pretrained(cls, path: str | Path, *, architecture: str | None = None
                        ) -> RewardModel:
        """Load a reward checkpoint; ``architecture`` (if given) must match the checkpoint's."""
        config = cls.read_checkpoint_config(path)
        if architecture is not None and get_architecture(architecture).name != config[
            "architecture"
        ]:
            raise RewardCheckpointError(
                f"checkpoint {path} holds a {config['architecture']} reward model, "
                f"not the requested {architecture}"
            )
        spec = get_architecture(config["architecture"])
        backbone_dir = Path(path) / config["backbone"]["dir"]
        # Random init from the stored config; every weight is then read from the checkpoint.
        model_config = AutoConfig.from_pretrained(backbone_dir)
        backbone = spec.model_class(model_config)
        text_config = model_config.get_text_config()
        bundle = VLMBundle(
            model=backbone,
            processor=spec.processor_class.from_pretrained(backbone_dir),
            architecture=spec.name,
            hidden_size=int(text_config.hidden_size),
            max_length=int(config["max_length"]),
            path=Path(config["backbone"]["source"]),
        )
        lora = None if config["lora"] is None else LoraSettings(**config["lora"])
        model = cls(bundle, lora=lora)
        model.load_weights(path)
        model.eval()
        return model

    def load_weights(self, path: str | Path) -> None:
        """Load a checkpoint's weights into this model; architectures and shapes must match."""
        config = self.read_checkpoint_config(path)
        if config["architecture"] != self.architecture:
            raise RewardCheckpointError(
                f"checkpoint {path} holds a {config['architecture']} reward model; it cannot "
                f"be loaded into this {self.architecture} reward model"
            )
        try:
            missing, unexpected = load_model(self, str(Path(path) / CHECKPOINT_WEIGHTS),
                                             strict=False)
        except RuntimeError as exc:  # shape mismatch: same architecture, other sizes
            raise RewardCheckpointError(f"checkpoint {path} does not fit this model: {exc}"
                                        ) from exc
        if missing or unexpected:
            raise RewardCheckpointError(
                f"checkpoint {path} does not fit this model: missing {sorted(missing)[:5]}, "
                f"unexpected {sorted(unexpected)[:5]}"
            )
