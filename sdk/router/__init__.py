"""Stage B: the frozen public encoder, the router, local router training and online routing."""

from sdk.router._aggregators import Aggregator, PlainAggregator, RoundAggregate, SecureAggregator
from sdk.router._encoder import EncodedBatch, Encoder, concat_batches, image_digest
from sdk.router._errors import RouterError
from sdk.router._evaluation import (
    AverageRM,
    PairScores,
    RandomRM,
    RewardScores,
    RouterSelection,
    SelectionMethod,
    SingleRM,
    Table4,
    encode_pairs,
    reward_scores,
    route_pairs,
    table4,
)
from sdk.router._federated import (
    DropoutSchedule,
    FederatedConfig,
    FederatedRouterTrainer,
    RoundStats,
    RouterClient,
)
from sdk.router._hashing_encoder import HashingEncoder, HashingEncoderConfig
from sdk.router._local import (
    LocalRouterUpdate,
    LocalTrainingConfig,
    fedavg_plain,
    train_router_locally,
)
from sdk.router._model import Router, RouterConfig
from sdk.router._neural_ts import NeuralThompsonRouter, NeuralTSConfig
from sdk.router._policy import route, soft_weights
from sdk.router._recipe import (
    default_federated_config,
    load_router_clients,
    train_federated_router,
)
from sdk.router._site_update import (
    RouterUpdateSpec,
    SiteData,
    SiteRound,
    load_router_update,
    local_router_update,
    router_update,
)
from sdk.router._vlm_encoder import VLMEncoder, VLMEncoderConfig

__all__ = [
    "Aggregator",
    "AverageRM",
    "DropoutSchedule",
    "EncodedBatch",
    "Encoder",
    "FederatedConfig",
    "FederatedRouterTrainer",
    "HashingEncoder",
    "HashingEncoderConfig",
    "LocalRouterUpdate",
    "LocalTrainingConfig",
    "NeuralTSConfig",
    "NeuralThompsonRouter",
    "PairScores",
    "PlainAggregator",
    "RandomRM",
    "RewardScores",
    "RoundAggregate",
    "RoundStats",
    "Router",
    "RouterClient",
    "RouterConfig",
    "RouterError",
    "RouterSelection",
    "RouterUpdateSpec",
    "SecureAggregator",
    "SelectionMethod",
    "SingleRM",
    "SiteData",
    "SiteRound",
    "Table4",
    "VLMEncoder",
    "VLMEncoderConfig",
    "concat_batches",
    "default_federated_config",
    "encode_pairs",
    "fedavg_plain",
    "image_digest",
    "load_router_clients",
    "load_router_update",
    "local_router_update",
    "reward_scores",
    "route",
    "route_pairs",
    "router_update",
    "soft_weights",
    "table4",
    "train_federated_router",
    "train_router_locally",
]
