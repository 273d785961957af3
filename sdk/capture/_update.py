"""One captured router update on disk (format ``fedmor-captured-update-v1``).

- ``before.<param>``: the router parameters the round started from (what the server broadcast);
- ``after.<param>``: what the server learned: one member's parameters phi_k (``plaintext``) or
  the published weighted mean (``aggregate``);
- ``truth.embeddings`` / ``truth.pool``, optional: an auditor's ground truth (no server file
  holds them).

The safetensors header holds ``format`` and ``meta``, a JSON :class:`CaptureMeta`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from safetensors import SafetensorError, safe_open
from safetensors.numpy import load_file, save_file

__all__ = ["CAPTURE_FORMAT", "CaptureError", "CaptureMeta", "read_update_file",
           "write_update_file"]

CAPTURE_FORMAT = "fedmor-captured-update-v1"
"""Format tag of a captured router-update file."""


class CaptureError(ValueError):
    """A capture file or directory is malformed, tampered with, or would be overwritten."""


class CaptureMeta(BaseModel):
    """How a captured update was made; the attacker may use all of it (it is public or
    inferable: the federation's router config, the client count, the local training recipe)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    setting: Literal["plaintext", "aggregate"]
    description: str = ""
    router: dict[str, object] = Field(description="sdk.router RouterConfig fields")
    client_ids: list[str] = Field(min_length=1)
    encoder_id: str
    client_indices: list[int] = Field(min_length=1, description="router output of each sender")
    samples_per_client: list[int] = Field(min_length=1, description="encoded responses n_k")
    update: Literal["gradient", "parameters"] = Field(
        default="parameters",
        description="gradient: 'after' = before - gradient (FedSGD); parameters: trained phi_k",
    )
    local_optimizer: str = Field(default="AdamW", description="how phi_k was trained")
    local_steps: int = Field(default=1, ge=1, description="optimizer steps per client")
    tokens: int = Field(ge=1, description="encoder tokens per sample (padded length)")

    @model_validator(mode="after")
    def _consistent(self) -> CaptureMeta:
        if len(self.client_indices) != len(self.samples_per_client):
            raise ValueError("client_indices and samples_per_client must be equally long")
        if self.setting == "plaintext" and len(self.client_indices) != 1:
            raise ValueError("a plaintext update comes from exactly one client")
        if any(n < 1 for n in self.samples_per_client):
            raise ValueError("every client has at least one sample")
        k = len(self.client_ids)
        if any(not 0 <= i < k for i in self.client_indices):
            raise ValueError(f"client_indices must lie in [0, {k})")
        return self

    @property
    def n_samples(self) -> int:
        """Samples behind the update, all clients together."""
        return sum(self.samples_per_client)


def as_float32(t: Any) -> np.ndarray:
    """A numpy array or a torch tensor (duck-typed: no torch import here) as contiguous
    float32."""
    if hasattr(t, "detach"):
        t = t.detach().float().cpu().numpy()
    return np.ascontiguousarray(t, dtype=np.float32)


def write_update_file(path: str | Path, meta: CaptureMeta, tensors: Mapping[str, Any]) -> Path:
    """Write ``tensors`` (``before.*``, ``after.*``, optional ``truth.*``) with ``meta``."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: as_float32(v) for k, v in tensors.items()}, str(out),
              metadata={"format": CAPTURE_FORMAT, "meta": meta.model_dump_json()})
    return out


def read_update_file(path: str | Path) -> tuple[CaptureMeta, dict[str, np.ndarray]]:
    """Read a file written by :func:`write_update_file`; a clear error for anything else."""
    src = Path(path)
    if not src.is_file():
        raise CaptureError(f"no captured update file at {src}")
    try:
        with safe_open(str(src), framework="numpy") as f:
            header = f.metadata() or {}
        tensors = load_file(str(src))
    except (SafetensorError, OSError) as exc:
        raise CaptureError(f"{src} is not a safetensors file: {exc}") from exc
    if header.get("format") != CAPTURE_FORMAT:
        raise CaptureError(f"{src} has format {header.get('format')!r}, not {CAPTURE_FORMAT}")
    try:
        meta = CaptureMeta.model_validate_json(header.get("meta", ""))
    except ValidationError as exc:
        raise CaptureError(f"{src}: invalid capture metadata: {exc}") from exc
    return meta, tensors
