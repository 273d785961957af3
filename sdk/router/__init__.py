"""Stage B: the frozen public encoder, the router, local router training and online routing."""

import importlib
from typing import TYPE_CHECKING, Any

from sdk.router._aggregators import (
    AGGREGATORS,
    Aggregator,
    PlainAggregator,
    RoundAggregate,
    SecureAggregator,
)
from sdk.router._encoder import (
    EncodedBatch,
    Encoder,
    ImageFeatureCache,
    concat_batches,
    image_digest,
    image_ref,
    open_image,
)
from sdk.router._errors import RouterError, RouterMismatchError, RouterShapeError
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
    ROUTER_SPEC_ENV,
    ROUTER_UPDATES_GROUP,
    RouterUpdateError,
    RouterUpdateSpec,
    SiteData,
    SiteRound,
    load_router_update,
    local_router_update,
    router_update,
)

if TYPE_CHECKING:
    from sdk.reward import PairLike
    from sdk.router._vlm_encoder import VLMEncoder, VLMEncoderConfig

# transformers and peft load on first use of these names: a server that only routes rewards
# (the hashing encoder, the router head, Neural TS) never needs them.
_LAZY = {"PairLike": "sdk.reward", "VLMEncoder": "sdk.router._vlm_encoder",
         "VLMEncoderConfig": "sdk.router._vlm_encoder"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "AGGREGATORS",
    "ROUTER_SPEC_ENV",
    "ROUTER_UPDATES_GROUP",
    "Aggregator",
    "AverageRM",
    "DropoutSchedule",
    "EncodedBatch",
    "Encoder",
    "FederatedConfig",
    "FederatedRouterTrainer",
    "HashingEncoder",
    "HashingEncoderConfig",
    "ImageFeatureCache",
    "LocalRouterUpdate",
    "LocalTrainingConfig",
    "NeuralTSConfig",
    "NeuralThompsonRouter",
    "PairLike",
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
    "RouterMismatchError",
    "RouterSelection",
    "RouterShapeError",
    "RouterUpdateError",
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
    "image_ref",
    "load_router_clients",
    "load_router_update",
    "local_router_update",
    "open_image",
    "reward_scores",
    "route",
    "route_pairs",
    "router_update",
    "soft_weights",
    "table4",
    "train_federated_router",
    "train_router_locally",
]
