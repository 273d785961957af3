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
clients, how many samples each, gradient or trained parameters, the local optimizer). The
format, its metadata model and its writer live in ``sdk.capture`` (the server writes it too).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from attacks._errors import AttackInputError
from sdk.capture import (
    CAPTURE_FORMAT,
    CaptureError,
    CaptureMeta,
    read_update_file,
    write_update_file,
)

__all__ = ["CAPTURE_FORMAT", "CaptureMeta", "CapturedRouterUpdate"]


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
        """Write the documented safetensors file (sdk.capture's writer)."""
        tensors = {f"before.{n}": t for n, t in self.before.items()}
        tensors |= {f"after.{n}": t for n, t in self.after.items()}
        for name, t in (("truth.embeddings", self.truth), ("truth.pool", self.pool)):
            if t is not None:
                tensors[name] = t
        return write_update_file(path, self.meta, tensors)

    @classmethod
    def load(cls, path: str | Path) -> CapturedRouterUpdate:
        """Read a file written by :meth:`save`; a clear error for anything else."""
        try:
            meta, arrays = read_update_file(path)
        except CaptureError as exc:
            raise AttackInputError(str(exc)) from exc
        tensors = {k: torch.from_numpy(v) for k, v in arrays.items()}
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
