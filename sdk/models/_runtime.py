"""``Runtime``: the one setting that says where a model runs (device) and in what precision.

Every stage that loads a model (reward training and scoring, the router's VLM encoder, the
policy warm-up, GRPO, evaluation, the audit's shadow models) takes a ``Runtime``; the CLI's
``--device`` / ``--dtype`` flags build one. ``auto`` picks CUDA when present, else the CPU, and
bfloat16 on a GPU that supports it, float32 otherwise, so a CPU run keeps full precision.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    import torch

__all__ = ["DTypeName", "Placement", "Runtime"]

DTypeName = Literal["auto", "float32", "bfloat16", "float16"]
"""A dtype ``Runtime`` accepts by name (``auto`` resolves per device)."""


class Placement(NamedTuple):
    """A resolved runtime: the concrete device and dtype."""

    device: torch.device
    dtype: torch.dtype


class Runtime(BaseModel):
    """Device, dtype and gradient checkpointing for one stage (torch loads when one resolves,
    so a command's settings and ``--help`` stay light).

    ``device``: ``auto`` (CUDA if available, else CPU), ``cpu``, ``cuda``, ``cuda:N`` or ``mps``.
    ``dtype``: ``auto`` (bfloat16 on a GPU that supports it, float32 otherwise), ``float32``,
    ``bfloat16`` or ``float16``. ``gradient_checkpointing`` trades compute for activation memory
    in training (it changes nothing when scoring).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    device: str = Field(default="auto", pattern=r"^(auto|cpu|mps|cuda(:\d+)?)$")
    dtype: DTypeName = "auto"
    gradient_checkpointing: bool = False

    def resolve_device(self) -> torch.device:
        """The concrete device; a named accelerator that is absent raises ValueError."""
        import torch

        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        device = torch.device(self.device)
        if device.type == "cuda":
            if not torch.cuda.is_available():
                raise ValueError(f"device {self.device!r} requested but CUDA is not available "
                                 "(torch.cuda.is_available() is False); use --device cpu")
            if device.index is not None and device.index >= torch.cuda.device_count():
                raise ValueError(f"device {self.device!r} requested but only "
                                 f"{torch.cuda.device_count()} CUDA device(s) exist")
        if device.type == "mps" and not torch.backends.mps.is_available():
            raise ValueError("device 'mps' requested but MPS is not available; use --device cpu")
        return device

    def resolve_dtype(self, device: torch.device | None = None) -> torch.dtype:
        """The concrete dtype on ``device`` (default: :meth:`resolve_device`)."""
        import torch

        if self.dtype != "auto":
            dtype: torch.dtype = getattr(torch, self.dtype)  # a DTypeName is torch's own name
            return dtype
        device = device or self.resolve_device()
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32

    def resolve(self) -> Placement:
        """Device and dtype, both concrete."""
        device = self.resolve_device()
        return Placement(device, self.resolve_dtype(device))

    def trainer_precision(self) -> dict[str, Any]:
        """The ``bf16`` / ``fp16`` / ``use_cpu`` / ``activation_checkpointing`` arguments of a
        transformers ``TrainingArguments`` (trl's GRPOConfig) for this runtime (the setting's
        name is transformers' own; ``gradient_checkpointing`` is its deprecated alias)."""
        import torch

        device, dtype = self.resolve()
        return {
            "bf16": dtype == torch.bfloat16,
            "fp16": dtype == torch.float16,
            "use_cpu": device.type == "cpu",
            "activation_checkpointing": self.gradient_checkpointing,
        }
