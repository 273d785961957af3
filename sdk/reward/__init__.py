"""Client reward models (stage A): Bradley-Terry training, normalization, the client scorer.

Each name loads its module (torch, transformers, peft) on first use, so ``fedmor rm --help``
imports none of them.
"""

from typing import TYPE_CHECKING

from sdk._lazy import lazy_exports

if TYPE_CHECKING:
    from sdk.reward._clients import (
        cross_accuracy,
        format_accuracy_matrix,
        pair_texts,
        train_client_reward_models,
    )
    from sdk.reward._config import DEFAULT_CLIP, DPSettings, LoraSettings, RewardTrainingConfig
    from sdk.reward._dp import PairDPSGD
    from sdk.reward._model import PairLike, RewardCheckpointError, RewardModel
    from sdk.reward._scorer import ClientScorer, ScoreNormalizer
    from sdk.reward._training import pairwise_accuracy, train_reward_model

__all__ = [
    "DEFAULT_CLIP",
    "ClientScorer",
    "DPSettings",
    "LoraSettings",
    "PairDPSGD",
    "PairLike",
    "RewardCheckpointError",
    "RewardModel",
    "RewardTrainingConfig",
    "ScoreNormalizer",
    "cross_accuracy",
    "format_accuracy_matrix",
    "pair_texts",
    "pairwise_accuracy",
    "train_client_reward_models",
    "train_reward_model",
]

if not TYPE_CHECKING:  # mypy reads the block above, so a mistyped name stays an error
    __getattr__, __dir__ = lazy_exports(__name__)
