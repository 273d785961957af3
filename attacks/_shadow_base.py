"""Where LiRA's shadow reward models start from: the target's own base checkpoint.

A shadow is the target's twin only if it starts from the weights the target started from.
In order of preference:

1. a base directory the auditor names (``AuditConfig.shadow_base``, ``--shadow-base``);
2. for a LoRA target, its base: an adapter checkpoint is loaded over the base it records
   (hash-checked); an older checkpoint that stores the whole frozen backbone has it written
   out once as a plain VLM directory;
3. the base directory the checkpoint records (``backbone.source``), when it is still there
   with weights of the target's width;
4. failing all three (a fully fine-tuned target whose base moved away): random weights of the
   target's own architecture and size, from the config its checkpoint stores. The label says
   so: such shadows are not the target's twins, and the audit should be rerun with (1).

Any size fedmor can load works: nothing here depends on the sizes fedmor builds itself.

An auditor who queries a live member holds no checkpoint, only the member's
``reward_config.json`` (no weights): :func:`recorded_shadow_base` takes (1) or the base it
records, checked against the recorded hash of its config.json, and refuses anything else.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from attacks._errors import AttackInputError

if TYPE_CHECKING:
    from sdk.reward import RewardModel

__all__ = ["ShadowBase", "recorded_shadow_base", "resolve_shadow_base"]


@dataclass(frozen=True)
class ShadowBase:
    """A VLM checkpoint directory every shadow loads (``RewardModel.from_backbone``), and
    words saying where it came from."""

    path: Path
    label: str
    exact: bool  # False: random weights, not the target's base


def _has_weights(path: Path) -> bool:
    return (path / "config.json").is_file() and (
        any(path.glob("*.safetensors")) or (path / "pytorch_model.bin").is_file()
    )


def _hidden(path: Path) -> int:
    from transformers import AutoConfig

    return int(AutoConfig.from_pretrained(path).get_text_config().hidden_size)


def _write_frozen_base(target: RewardModel, config_dir: Path, out: Path) -> Path:
    """The backbone weights of a LoRA target without its adapters, as a VLM directory."""
    from transformers import AutoConfig

    from sdk.models import get_architecture

    spec = get_architecture(target.architecture)
    # Built without memory on the meta device; every stored weight is then assigned (strict),
    # so a real-size base costs no second copy of its weights.
    with torch.device("meta"):
        base = spec.model_class(AutoConfig.from_pretrained(config_dir))
    state = {
        k.replace(".base_layer.", "."): v
        for k, v in target.backbone.state_dict().items()
        if "lora_" not in k
    }
    base.load_state_dict(state, strict=True, assign=True)
    base.save_pretrained(out)
    target.bundle.processor.save_pretrained(out)
    return out


def resolve_shadow_base(
    ckpt: Path,
    target: RewardModel,
    work: Path,
    *,
    explicit: Path | None = None,
    seed: int = 0,
) -> ShadowBase:
    """The base the shadows of the target at ``ckpt`` (loaded as ``target``) start from;
    ``work`` is a scratch directory that must outlive the shadows."""
    from transformers import AutoConfig

    from sdk.models import get_architecture
    from sdk.reward import RewardModel

    config: dict[str, Any] = RewardModel.read_checkpoint_config(ckpt)
    width = int(target.bundle.hidden_size)
    what = f"{target.architecture}, hidden {width}"
    if explicit is not None:
        _check_explicit(explicit, target.architecture, width)
        return ShadowBase(explicit, f"{what}, from the given base {explicit}", True)
    if target.lora is not None and config["backbone"].get("adapter_only"):
        # An adapter checkpoint stores no backbone: the target was loaded over its recorded
        # base (hash-checked), which LoRA leaves untouched.
        return ShadowBase(Path(target.bundle.path), f"{what}, from the target's base "
                          f"{target.bundle.path}", True)
    stored = ckpt / str(config["backbone"]["dir"])
    out = work / "shadow-base"
    out.parent.mkdir(parents=True, exist_ok=True)
    if target.lora is not None:
        path = _write_frozen_base(target, stored, out)
        return ShadowBase(path, f"{what}, from the frozen base in the target's checkpoint", True)
    source = Path(str(config["backbone"].get("source", "")))
    if source.is_dir() and _has_weights(source) and _hidden(source) == width:
        return ShadowBase(source, f"{what}, from the target's base {source}", True)
    spec = get_architecture(target.architecture)
    torch.manual_seed(seed)
    model = spec.model_class(AutoConfig.from_pretrained(stored))
    model.save_pretrained(out)
    target.bundle.processor.save_pretrained(out)
    return ShadowBase(
        out,
        f"{what}, from RANDOM weights: the target's base {source} is not here "
        "(name it with --shadow-base for shadows that are the target's twins)",
        False,
    )


def _check_explicit(explicit: Path, architecture: str, width: int) -> str:
    """``explicit``'s architecture name, or an AttackInputError if it is not a VLM directory
    of ``architecture`` and hidden size ``width``."""
    from sdk.models import get_architecture, read_model_type

    if not _has_weights(explicit):
        raise AttackInputError(f"shadow base {explicit} is not a VLM checkpoint directory")
    kind = get_architecture(read_model_type(explicit)).name
    if kind != architecture or _hidden(explicit) != width:
        raise AttackInputError(
            f"shadow base {explicit} is a {kind} of hidden {_hidden(explicit)}; the target "
            f"is a {architecture}, hidden {width}"
        )
    return kind


def recorded_shadow_base(config: dict[str, Any], explicit: Path | None = None) -> ShadowBase:
    """The base of the target whose ``reward_config.json`` is ``config`` (a live member's: its
    weights stay with it): ``explicit``, or the base directory it records when that is here
    with the config hash it records."""
    from sdk.models import config_digest

    architecture, width = str(config["architecture"]), int(config["hidden_size"])
    what = f"{architecture}, hidden {width}"
    if explicit is not None:
        _check_explicit(explicit, architecture, width)
        return ShadowBase(explicit, f"{what}, from the given base {explicit}", True)
    recorded = config["backbone"]
    source = Path(str(recorded.get("source", "")))
    if not _has_weights(source):
        raise AttackInputError(
            f"the target's base {source} is not here: name a copy of it with --shadow-base "
            "(LiRA's shadows must start from the weights the target started from)"
        )
    if recorded.get("config_sha256") and config_digest(source) != recorded["config_sha256"]:
        raise AttackInputError(
            f"{source}/config.json does not hash to the target's recorded base: not the base "
            "it was trained from; name the right one with --shadow-base"
        )
    _check_explicit(source, architecture, width)
    return ShadowBase(source, f"{what}, from the target's recorded base {source}", True)
