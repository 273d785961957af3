"""FedAvg of reward-model parameters (the FedAvgRM baseline).

Secure aggregation reveals only the sum of ``n_k * theta_k`` and of ``n_k``; this is the same
average computed in the clear, which is what the server ends up holding.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from sdk.alignment._errors import ArchitectureMismatchError

__all__ = ["fedavg_state_dicts"]


def fedavg_state_dicts(
    state_dicts: Sequence[Mapping[str, Tensor]], weights: Sequence[float] | None = None
) -> dict[str, Tensor]:
    """``sum_k w_k theta_k / sum_k w_k`` per floating tensor; integer buffers come from client 0.

    Raises :class:`ArchitectureMismatchError` when the clients' parameter names or shapes differ
    (FedAvg is only defined for clients sharing one architecture).
    """
    if not state_dicts:
        raise ValueError("fedavg_state_dicts needs at least one state dict")
    w = [1.0] * len(state_dicts) if weights is None else [float(x) for x in weights]
    if len(w) != len(state_dicts) or sum(w) <= 0 or min(w) < 0:
        raise ValueError(f"need one non-negative weight per client with a positive sum, got {w}")
    ref = state_dicts[0]
    for k, sd in enumerate(state_dicts[1:], start=1):
        if set(sd) != set(ref):
            diff = sorted(set(sd) ^ set(ref))[:5]
            raise ArchitectureMismatchError(
                f"client {k}'s reward model has different parameters than client 0 "
                f"(e.g. {diff}): FedAvg needs one shared architecture"
            )
        for name, t in sd.items():
            if t.shape != ref[name].shape:
                raise ArchitectureMismatchError(
                    f"parameter {name!r} is {tuple(t.shape)} at client {k} but "
                    f"{tuple(ref[name].shape)} at client 0: FedAvg needs one shared architecture"
                )
    total = sum(w)
    out: dict[str, Tensor] = {}
    for name, t0 in ref.items():
        if not torch.is_floating_point(t0):
            out[name] = t0.clone()
            continue
        acc = torch.zeros_like(t0, dtype=torch.float64)
        for wk, sd in zip(w, state_dicts, strict=True):
            acc += wk * sd[name].double()
        out[name] = (acc / total).to(t0.dtype)
    return out
