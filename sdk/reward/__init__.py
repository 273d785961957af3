"""Client reward models (stage A): Bradley-Terry training, normalization, the client scorer."""

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
