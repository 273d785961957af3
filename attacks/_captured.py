"""The captured router update: what the server (or an eavesdropper) sees of one round, on disk.

One ``.safetensors`` file per captured update, documented in docs/attacks.md:

- ``before.<param>``: the router parameters the round started from (what the server broadcast);
- ``after.<param>``: what the server learned. ``setting="plaintext"``: one client's trained
  parameters phi_k (no secure aggregation); ``setting="aggregate"``: the weighted mean
  sum_k n_k phi_k / sum_k n_k, the only thing secure aggregation reveals;
- ``truth.embeddings`` (N, D), optional: the pooled encoder embeddings of the N samples behind the
  update, in client order. The auditor scores reconstructions against them; no attack reads them;
- ``truth.pool`` (M, D), optional: embeddings of other samples of the same distribution (the
  dataset-mean and unrelated-sample baselines).

The string metadata (safetensors header) holds ``format``, and ``meta``: a JSON
:class:`CaptureMeta` with the router's architecture and how the update was made (how many
clients, how many samples each, gradient or trained parameters, the local optimizer).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from safetensors import SafetensorError
from safetensors.torch import load_file, safe_open, save_file

from attacks._errors import AttackInputError

__all__ = ["CAPTURE_FORMAT", "CaptureMeta", "CapturedRouterUpdate"]

CAPTURE_FORMAT = "fedmor-captured-update-v1"
"""Format tag of a captured router-update file."""


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


@dataclass(frozen=True)
class CapturedRouterUpdate:
    """A captured update in memory: parameter dicts keyed like ``Router.named_parameters()``."""

    meta: CaptureMeta
    before: dict[str, torch.Tensor]
    after: dict[str, torch.Tensor]
    truth: torch.Tensor | None = None  # (N, D) pooled embeddings, for scoring only
    pool: torch.Tensor | None = None  # (M, D) other samples, for the baselines

    def __post_init__(self) -> None:
        if not self.before or set(self.before) != set(self.after):
            raise AttackInputError("before and after must hold the same, non-empty parameters")
        for name, t in self.before.items():
            if t.shape != self.after[name].shape:
                raise AttackInputError(
                    f"{name}: before {tuple(t.shape)} != after {tuple(self.after[name].shape)}"
                )
        if self.truth is not None and self.truth.shape[0] != self.meta.n_samples:
            raise AttackInputError(
                f"truth has {self.truth.shape[0]} rows for {self.meta.n_samples} samples"
            )

    def delta(self) -> dict[str, torch.Tensor]:
        """after - before, per parameter (a descent step: minus lr times gradients)."""
        return {n: (self.after[n] - self.before[n]).detach() for n in self.before}

    def save(self, path: str | Path) -> Path:
        """Write the documented safetensors file."""
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        tensors = {f"before.{n}": t for n, t in self.before.items()}
        tensors |= {f"after.{n}": t for n, t in self.after.items()}
        for name, t in (("truth.embeddings", self.truth), ("truth.pool", self.pool)):
            if t is not None:
                tensors[name] = t
        tensors = {k: v.detach().float().contiguous().cpu() for k, v in tensors.items()}
        save_file(
            tensors,
            str(out),
            metadata={"format": CAPTURE_FORMAT, "meta": self.meta.model_dump_json()},
        )
        return out

    @classmethod
    def load(cls, path: str | Path) -> CapturedRouterUpdate:
        """Read a file written by :meth:`save`; a clear error for anything else."""
        src = Path(path)
        if not src.is_file():
            raise AttackInputError(f"no captured update file at {src}")
        try:
            with safe_open(str(src), framework="pt") as f:
                header = f.metadata() or {}
            tensors = load_file(str(src))
        except (SafetensorError, OSError) as exc:
            raise AttackInputError(f"{src} is not a safetensors file: {exc}") from exc
        if header.get("format") != CAPTURE_FORMAT:
            raise AttackInputError(
                f"{src} has format {header.get('format')!r}, not {CAPTURE_FORMAT}"
            )
        try:
            meta = CaptureMeta.model_validate_json(header.get("meta", ""))
        except ValidationError as exc:
            raise AttackInputError(f"{src}: invalid capture metadata: {exc}") from exc
        part = {
            p: {k[len(p) + 1 :]: v for k, v in tensors.items() if k.startswith(p + ".")}
            for p in ("before", "after")
        }
        return cls(
            meta,
            part["before"],
            part["after"],
            tensors.get("truth.embeddings"),
            tensors.get("truth.pool"),
        )
