"""Reward checkpoints on disk: adapter-only under LoRA, whole otherwise.

Layout (``format_version`` 2)::

    reward_config.json        architecture, head, LoRA settings, the base reference, training
    reward_head.safetensors   the trained tensors: head, and under LoRA the adapters
    backbone/                 fully fine-tuned only: the VLM (``save_pretrained``) + processor
    normalizer.json           written by training

Under LoRA the backbone is the user's base checkpoint, unchanged: the checkpoint records its
path and the sha256 of its config.json, and loading refuses a base that does not match. A 2B
model's adapter checkpoint is then megabytes instead of the gigabytes of its weights. Version-1
checkpoints (every weight in ``reward_model.safetensors``, the backbone's config and processor
in ``backbone/``) still load.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import torch
from safetensors.torch import load_file, load_model, save_file
from torch import nn
from transformers import AutoConfig, PreTrainedModel

from sdk.models import Runtime, VLMBundle, config_digest, get_architecture, load_vlm
from sdk.reward._config import LoraSettings

__all__ = [
    "CHECKPOINT_CONFIG",
    "CHECKPOINT_WEIGHTS",
    "CheckpointedModel",
    "RewardCheckpointError",
    "checkpoint_bundle",
    "checkpoint_document",
    "load_checkpoint_weights",
    "read_checkpoint_config",
    "save_checkpoint",
]

CHECKPOINT_CONFIG = "reward_config.json"
CHECKPOINT_WEIGHTS = "reward_head.safetensors"
_LEGACY_WEIGHTS = "reward_model.safetensors"  # format 1: every weight
_BACKBONE_DIR = "backbone"
_FORMAT_VERSION = 2
_READABLE_VERSIONS = (1, 2)


class CheckpointedModel(Protocol):
    """What a checkpoint reads and writes of a reward model (``RewardModel`` is the one), so
    that this module need not import the model module that imports it."""

    @property
    def architecture(self) -> str: ...
    @property
    def bundle(self) -> VLMBundle: ...
    @property
    def backbone(self) -> PreTrainedModel: ...
    @property
    def lora(self) -> LoraSettings | None: ...
    @property
    def max_length(self) -> int: ...
    @property
    def device(self) -> torch.device: ...

    def trained_state(self) -> dict[str, torch.Tensor]:
        """The tensors a checkpoint stores: the head, and under LoRA the adapters."""
        ...

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True,
                        assign: bool = False) -> Any:
        """``nn.Module.load_state_dict``."""
        ...


class RewardCheckpointError(ValueError):
    """A reward checkpoint that is missing, malformed, of another architecture, or whose base
    checkpoint is absent or not the one its adapters were trained on."""


def checkpoint_document(model: CheckpointedModel) -> dict[str, Any]:
    """The JSON document stored beside the weights."""
    source = model.bundle.path.resolve()
    try:
        digest: str | None = config_digest(source)
    except FileNotFoundError:  # a backbone built in memory: nothing to point at
        digest = None
    adapter_only = model.lora is not None
    return {
        "format_version": _FORMAT_VERSION,
        "architecture": model.architecture,
        "model_type": get_architecture(model.architecture).model_type,
        "backbone": {"dir": None if adapter_only else _BACKBONE_DIR, "source": str(source),
                     "config_sha256": digest, "adapter_only": adapter_only},
        "dtype": str(next(model.backbone.parameters()).dtype).removeprefix("torch."),
        "hidden_size": model.bundle.hidden_size,
        "max_length": model.max_length,
        "head": {"type": "linear", "in_features": model.bundle.hidden_size, "pooling": "last"},
        "lora": None if model.lora is None else model.lora.model_dump(mode="json"),
    }


def save_checkpoint(model: CheckpointedModel, out_dir: str | Path, *,
                    extra: Mapping[str, Any] | None = None) -> Path:
    """Write ``model`` to ``out_dir`` (layout in the module docstring)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    document = {**checkpoint_document(model), **(extra or {})}
    if document["backbone"]["config_sha256"] is None and model.lora is not None:
        raise RewardCheckpointError(
            f"cannot save an adapter checkpoint: the base {model.bundle.path} has no config.json "
            "to reference; load the backbone from a checkpoint directory")
    if model.lora is None:
        backbone_dir = out / _BACKBONE_DIR
        model.backbone.save_pretrained(backbone_dir)
        model.bundle.processor.save_pretrained(backbone_dir)
    tensors = {k: v.cpu().contiguous() for k, v in model.trained_state().items()}
    save_file(tensors, str(out / CHECKPOINT_WEIGHTS))
    (out / _LEGACY_WEIGHTS).unlink(missing_ok=True)  # a format-1 file would contradict this one
    (out / CHECKPOINT_CONFIG).write_text(json.dumps(document, indent=2))
    return out


def read_checkpoint_config(path: str | Path) -> dict[str, Any]:
    """The checkpoint's JSON config, or a :class:`RewardCheckpointError`."""
    config_file = Path(path) / CHECKPOINT_CONFIG
    if not config_file.is_file():
        raise RewardCheckpointError(f"no reward checkpoint at {path}: {config_file} missing")
    try:
        config: dict[str, Any] = json.loads(config_file.read_text())
    except json.JSONDecodeError as exc:
        raise RewardCheckpointError(f"{config_file} is not valid JSON: {exc}") from exc
    if config.get("format_version") not in _READABLE_VERSIONS:
        raise RewardCheckpointError(
            f"{config_file} has format_version {config.get('format_version')!r}, "
            f"expected one of {_READABLE_VERSIONS}"
        )
    return config


def _base_dir(path: str | Path, config: Mapping[str, Any], base: str | Path | None) -> Path:
    """The base checkpoint an adapter checkpoint loads over, checked against its config hash."""
    recorded = config["backbone"]
    base_dir = Path(base) if base is not None else Path(recorded["source"])
    if not (base_dir / "config.json").is_file():
        raise RewardCheckpointError(
            f"reward checkpoint {path} holds LoRA adapters only; its base VLM checkpoint "
            f"{base_dir} is missing (trained on {recorded['source']}): pass the base directory "
            "(--base / base=...)")
    found = config_digest(base_dir)
    if found != recorded["config_sha256"]:
        raise RewardCheckpointError(
            f"base checkpoint {base_dir} does not match reward checkpoint {path}: its config.json "
            f"hashes to {found[:12]}, the adapters were trained on {recorded['source']} "
            f"({str(recorded['config_sha256'])[:12]}); pass the base they were trained on")
    return base_dir


def checkpoint_bundle(path: str | Path, config: Mapping[str, Any], *,
                      base: str | Path | None, runtime: Runtime | None) -> VLMBundle:
    """The backbone a checkpoint loads over: its own (full), its base (adapters), or, for a
    format-1 checkpoint, an empty model of its stored config that its weights then fill."""
    backbone = config["backbone"]
    if config["format_version"] >= 2:
        directory = _base_dir(path, config, base) if backbone["adapter_only"] \
            else Path(path) / backbone["dir"]
        bundle = load_vlm(directory, runtime=runtime)
        bundle.max_length = int(config["max_length"])
        return bundle
    spec = get_architecture(config["architecture"])
    backbone_dir = Path(path) / backbone["dir"]
    device, dtype = (runtime or Runtime()).resolve()
    model_config = AutoConfig.from_pretrained(backbone_dir)
    model = spec.model_class._from_config(model_config, dtype=dtype).to(device)
    return VLMBundle(
        model=model, processor=spec.processor_class.from_pretrained(backbone_dir),
        architecture=spec.name, hidden_size=int(model_config.get_text_config().hidden_size),
        max_length=int(config["max_length"]), path=Path(backbone["source"]),
    )


def load_checkpoint_weights(model: CheckpointedModel, path: str | Path) -> None:
    """Load a checkpoint's trained tensors (and, fully fine-tuned, its backbone) into ``model``."""
    config = read_checkpoint_config(path)
    if config["architecture"] != model.architecture:
        raise RewardCheckpointError(
            f"checkpoint {path} holds a {config['architecture']} reward model; it cannot "
            f"be loaded into this {model.architecture} reward model"
        )
    try:
        if config["format_version"] == 1:
            _load_legacy(model, path)
            return
        state = load_file(str(Path(path) / CHECKPOINT_WEIGHTS), device=str(model.device))
        expected = set(model.trained_state())
        if set(state) != expected:
            raise RewardCheckpointError(
                f"checkpoint {path} does not fit this model: missing "
                f"{sorted(expected - set(state))[:5]}, unexpected {sorted(set(state) - expected)[:5]}")
        model.load_state_dict(state, strict=False)
        if not config["backbone"]["adapter_only"] and model.bundle.path.resolve() != (
                Path(path) / _BACKBONE_DIR).resolve():
            source = load_vlm(Path(path) / _BACKBONE_DIR, runtime=Runtime(device="cpu"))
            model.backbone.load_state_dict(source.model.state_dict())
    except RuntimeError as exc:  # shape mismatch: same architecture, other sizes
        raise RewardCheckpointError(f"checkpoint {path} does not fit this model: {exc}") from exc


def _load_legacy(model: CheckpointedModel, path: str | Path) -> None:
    assert isinstance(model, nn.Module)  # format 1 stored the whole module's state
    missing, unexpected = load_model(model, str(Path(path) / _LEGACY_WEIGHTS), strict=False,
                                     device=str(model.device))
    if missing or unexpected:
        raise RewardCheckpointError(
            f"checkpoint {path} does not fit this model: missing {sorted(missing)[:5]}, "
            f"unexpected {sorted(unexpected)[:5]}"
        )

