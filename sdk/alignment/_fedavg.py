"""FedAvg of reward-model parameters (the FedAvgRM baseline), and the federated training of
that one shared model.

Secure aggregation reveals only the sum of ``n_k * theta_k`` and of ``n_k``; this is the same
average computed in the clear, which is what the server ends up holding.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from torch import Tensor

from sdk.alignment._errors import ArchitectureMismatchError
from sdk.models import Runtime
from sdk.reward import (
    ClientScorer,
    PairLike,
    RewardModel,
    RewardTrainingConfig,
    ScoreNormalizer,
    train_reward_model,
)

__all__ = ["fedavg_state_dicts", "train_fedavg_reward_model"]


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


def train_fedavg_reward_model(
    backbone_dir: str | Path,
    client_pairs: Sequence[Sequence[PairLike]],
    *,
    rounds: int,
    config: RewardTrainingConfig | None = None,
    runtime: Runtime | None = None,
) -> ClientScorer:
    """The FedAvg-RM baseline's one shared reward model, trained over ``rounds`` FedAvg rounds.

    Each round every client starts from the global parameters, trains locally with the
    Bradley-Terry loss on its own pairs (``config.total_steps``: ``config.steps`` steps, or
    ``config.epochs`` over those pairs when ``steps`` is None), and the server forms the
    pair-count-weighted average (:func:`fedavg_state_dicts`: what secure aggregation reveals).
    The model is built with ``config.lora`` (only the adapters and the head then train and are
    averaged) and its head is initialised from ``config.seed``. The score normalizer is fitted
    on the union of the clients' training responses, as a client fits its own. Every client
    must share ``backbone_dir``'s architecture: that is FedAvg's precondition. The model runs
    on ``runtime``'s device and dtype.
    """
    if rounds < 1 or not client_pairs or not all(client_pairs):
        raise ValueError("FedAvg-RM needs rounds >= 1 and at least one pair per client")
    cfg = config or RewardTrainingConfig(steps=20)
    local = cfg.model_copy(update={"fit_normalizer": False, "eval_every": 0})
    torch.manual_seed(cfg.seed)  # the head's (and the adapters') initial weights
    model = RewardModel.from_backbone(backbone_dir, lora=cfg.lora, runtime=runtime)
    for r in range(rounds):
        start = {name: t.detach().clone() for name, t in model.state_dict().items()}
        updates = []
        for k, pairs in enumerate(client_pairs):
            model.load_state_dict(start)
            # A distinct seed per (round, client): each local run samples its own batches.
            seed = cfg.seed + 1000 * r + k
            train_reward_model(model, pairs, [], local.model_copy(update={"seed": seed}),
                               progress=False)
            updates.append({name: t.detach().clone() for name, t in model.state_dict().items()})
        model.load_state_dict(fedavg_state_dicts(updates, [len(p) for p in client_pairs]))
    everything = [p for pairs in client_pairs for p in pairs]
    scores = model.score([p.image for p in everything] * 2, [p.prompt for p in everything] * 2,
                         [p.chosen for p in everything] + [p.rejected for p in everything])
    return ClientScorer(model, ScoreNormalizer.fit(scores, clip=cfg.clip_bound))
