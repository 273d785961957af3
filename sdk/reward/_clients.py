"""Train one reward model per client (each possibly on another architecture) and compare them.

Reused by ``examples/benchmarks/reward_models.py`` and the demo.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sdk.models import ModelSize, Runtime, build_tiny_vlm
from sdk.reward._config import RewardTrainingConfig
from sdk.reward._model import PairLike, RewardModel
from sdk.reward._training import RewardTrainingResult, pairwise_accuracy, train_reward_model

__all__ = [
    "ClientRewardModel",
    "cross_accuracy",
    "format_accuracy_matrix",
    "pair_texts",
    "train_client_reward_models",
]


@dataclass
class ClientRewardModel:
    """One client's trained reward model and how it got there."""

    client: str
    architecture: str
    model: RewardModel
    result: RewardTrainingResult
    checkpoint: Path


def pair_texts(pairs: Sequence[PairLike]) -> list[str]:
    """Every prompt and response of ``pairs`` (a tokenizer corpus)."""
    return [text for p in pairs for text in (p.prompt, p.chosen, p.rejected)]


def train_client_reward_models(
    data_dir: str | Path,
    clients: Sequence[str],
    architectures: Sequence[str],
    out_dir: str | Path,
    *,
    config: RewardTrainingConfig | None = None,
    size: ModelSize = "tiny",
    max_train_pairs: int | None = None,
    progress: bool = True,
    runtime: Runtime | None = None,
) -> dict[str, ClientRewardModel]:
    """Train a reward model per client on ``data_dir/clients/<client>/{train,eval}``.

    Client i gets ``architectures[i % len(architectures)]``, a tiny backbone of that architecture
    (tokenizer trained on the client's own texts) and its checkpoint in ``out_dir/<client>``;
    every model runs on ``runtime``'s device and dtype.
    """
    from sdk.data import load_pairs  # the data format lives in sdk.data

    if not architectures:
        raise ValueError("at least one architecture is needed")
    root, out = Path(data_dir), Path(out_dir)
    trained: dict[str, ClientRewardModel] = {}
    for client, arch in zip(clients, itertools.cycle(architectures), strict=False):
        train = load_pairs(root / "clients" / client / "train")[:max_train_pairs]
        evals = load_pairs(root / "clients" / client / "eval")
        backbone = build_tiny_vlm(arch, out / client / "backbone-init", corpus=pair_texts(train),
                                  size=size, seed=(config.seed if config else 0))
        model = RewardModel.from_backbone(
            backbone, lora=None if config is None else config.lora, runtime=runtime
        )
        result = train_reward_model(model, train, evals, config, out_dir=out / client,
                                    progress=progress)
        assert result.checkpoint is not None  # out_dir was given
        trained[client] = ClientRewardModel(client, arch, model, result, result.checkpoint)
    return trained


def cross_accuracy(
    models: Mapping[str, RewardModel], splits: Mapping[str, Sequence[PairLike]]
) -> dict[str, dict[str, float]]:
    """Pairwise accuracy of every model (rows) on every split (columns)."""
    return {
        name: {split: pairwise_accuracy(model, pairs) for split, pairs in splits.items()}
        for name, model in models.items()
    }


def format_accuracy_matrix(
    matrix: Mapping[str, Mapping[str, float]], architectures: Mapping[str, str]
) -> str:
    """The cross-client matrix as a fixed-width table: rows = reward models, columns = splits."""
    columns = list(next(iter(matrix.values())))
    head = f"{'RM (arch)':<28}" + "".join(f"{c:>10}" for c in columns)
    rows = [head, "-" * len(head)]
    for client, accs in matrix.items():
        label = f"{client} ({architectures[client]})"
        rows.append(f"{label:<28}" + "".join(f"{accs[c]:>10.3f}" for c in columns))
    return "\n".join(rows)
