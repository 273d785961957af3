"""Stage B: the frozen public encoder, the router, local router training and online routing.

Each name loads its module (torch; transformers and peft for the VLM encoder) on first use, so
``fedmor router history`` and a server that only routes rewards import none they do not call.
"""

from typing import TYPE_CHECKING

from sdk._lazy import lazy_exports

if TYPE_CHECKING:
    from sdk.router._aggregators import Aggregator, PlainAggregator, SecureAggregator
    from sdk.router._encoder import (
        EncodedBatch,
        Encoder,
        concat_batches,
        image_digest,
        image_ref,
        open_image,
    )
    from sdk.router._errors import RouterError
    from sdk.router._evaluation import (
        AverageRM,
        RandomRM,
        RouterSelection,
        SelectionMethod,
        SingleRM,
        Table4,
        encode_pairs,
        reward_scores,
        route_pairs,
        table4,
    )
    from sdk.router._federated import FederatedConfig, FederatedRouterTrainer, RouterClient
    from sdk.router._hashing_encoder import HashingEncoder, HashingEncoderConfig
    from sdk.router._local import LocalTrainingConfig, fedavg_plain, train_router_locally
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
    )
    from sdk.router._vlm_encoder import VLMEncoder, VLMEncoderConfig

__all__ = [
    "Aggregator",
    "AverageRM",
    "EncodedBatch",
    "Encoder",
    "FederatedConfig",
    "FederatedRouterTrainer",
    "HashingEncoder",
    "HashingEncoderConfig",
    "LocalTrainingConfig",
    "NeuralTSConfig",
    "NeuralThompsonRouter",
    "PlainAggregator",
    "RandomRM",
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
    "image_ref",
    "load_router_clients",
    "load_router_update",
    "local_router_update",
    "open_image",
    "reward_scores",
    "route",
    "route_pairs",
    "soft_weights",
    "table4",
    "train_federated_router",
    "train_router_locally",
]

if not TYPE_CHECKING:  # mypy reads the block above, so a mistyped name stays an error
    __getattr__, __dir__ = lazy_exports(__name__)
