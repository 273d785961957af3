"""The consortium's router configuration, declared once in the server's settings (``[router]``),
and the router's wire schemas: a configuration's reference and listing, a version's metadata,
a rollback.

The encoder, the router's architecture, its head order and the federated schedule: what every
member needs to train the round's router locally and what fixes the length of every router
round. Kept free of torch, so that the server validates it, hashes it and counts its
parameters at start-up without loading a model; ``sdk.router`` re-exports the part configs.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sdk.wire._schemas import _SHA256, _Reply, _Wire

__all__ = [
    "ConsortiumRouterConfig",
    "FederatedConfig",
    "HashingEncoderConfig",
    "LocalTrainingConfig",
    "RouterConfig",
    "RouterConfigInfo",
    "RouterConfigRef",
    "RouterRollback",
    "RouterVersionInfo",
    "default_federated_config",
    "router_param_count",
]

_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"


class HashingEncoderConfig(BaseModel):
    """Sizes of the hashing encoder; every field enters ``encoder_id``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dim: int = Field(default=64, ge=1)
    image_grid: int = Field(default=2, ge=1, description="image tokens = image_grid ** 2")
    patch_size: int = Field(default=8, ge=1, description="pixels per patch side after resizing")
    num_buckets: int = Field(default=4096, ge=2, description="hash buckets of the word table")
    max_prompt_tokens: int = Field(default=16, ge=1, description="first prompt words kept")
    max_response_tokens: int = Field(default=16, ge=1, description="last response words kept")
    seed: int = 0


class RouterConfig(BaseModel):
    """Architecture of the router; ``input_dim`` must equal the encoder's ``dim``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_dim: int = Field(default=64, ge=1, description="encoder feature size D")
    d_model: int = Field(default=64, ge=1)
    num_layers: int = Field(default=4, ge=1)
    num_heads: int = Field(default=4, ge=1)
    dim_feedforward: int = Field(default=128, ge=1)
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    seed: int = Field(default=0, description="seed of the parameter initialisation")


class LocalTrainingConfig(BaseModel):
    """Hyper-parameters of one client's local router training in one round."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    epochs: int = Field(default=2, ge=1)
    batch_size: int = Field(default=32, ge=1)
    lr: float = Field(default=1e-3, gt=0.0)
    weight_decay: float = Field(default=0.0, ge=0.0)
    max_grad_norm: float | None = Field(default=1.0, gt=0.0)
    seed: int = 0
    # A client refuses to train (so to contribute) on fewer samples: an update of very few
    # samples can be inverted even inside a secure aggregate (docs/attacks.md). Lower it only
    # deliberately.
    min_samples: int = Field(default=16, ge=1)


class FederatedConfig(BaseModel):
    """Schedule of federated router training. Give at most one of ``clients_per_round`` and
    ``fraction``; with neither, every client takes part in every round."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rounds: int = Field(default=5, ge=1)
    clients_per_round: int | None = Field(default=None, ge=1)
    fraction: float | None = Field(default=None, gt=0.0, le=1.0)
    local: LocalTrainingConfig = LocalTrainingConfig()
    # Clients each hold one label, so every round pulls the router towards its own client and
    # the late rounds swing routing between pairs of similar clients; decaying the local lr over
    # the rounds damps the swing (docs/router.md).
    lr_schedule: Literal["constant", "cosine"] = "constant"
    final_lr_fraction: float = Field(default=0.1, gt=0.0, le=1.0,
                                     description="cosine: last round's lr / local.lr")
    seed: int = 0

    @model_validator(mode="after")
    def _one_sampling_rule(self) -> FederatedConfig:
        if self.clients_per_round is not None and self.fraction is not None:
            raise ValueError("give clients_per_round or fraction, not both")
        return self

    def local_config(self, round_index: int, client_index: int) -> LocalTrainingConfig:
        """Client ``client_index``'s local settings in round ``round_index`` (lr and seed)."""
        lr = self.local.lr
        if self.lr_schedule == "cosine" and self.rounds > 1:
            progress = min(round_index, self.rounds - 1) / (self.rounds - 1)
            f = self.final_lr_fraction
            lr *= f + (1 - f) * 0.5 * (1 + math.cos(math.pi * progress))
        seed = self.local.seed + 7919 * round_index + 104729 * client_index
        return self.local.model_copy(update={"lr": lr, "seed": seed})

    def per_round(self, num_clients: int) -> int:
        """How many clients each round samples."""
        if self.clients_per_round is not None:
            return min(self.clients_per_round, num_clients)
        if self.fraction is not None:
            return max(1, round(self.fraction * num_clients))
        return num_clients


def default_federated_config(rounds: int = 30, seed: int = 0) -> FederatedConfig:
    """Every client in every round, one local epoch, lr 3e-3 decayed (cosine) to 3e-4.

    Client k holds only label k, so each local model drifts towards "always me": a single epoch
    keeps the discriminative part through FedAvg, and the decaying lr stops the last rounds from
    swinging routing between similar clients (docs/router.md, "Label skew").
    """
    local = LocalTrainingConfig(epochs=1, batch_size=64, lr=3e-3, seed=seed)
    return FederatedConfig(rounds=rounds, local=local, lr_schedule="cosine",
                           final_lr_fraction=0.1, seed=seed)


def router_param_count(router: RouterConfig, outputs: int) -> int:
    """Length of the flat parameter vector of ``sdk.router.Router(router, K = outputs)``,
    counted without building it (so without torch): input projection, pre-norm Transformer
    layers (attention, feed-forward, two LayerNorms), the final LayerNorm and the head."""
    d, ff = router.d_model, router.dim_feedforward
    attention = (3 * d * d + 3 * d) + (d * d + d)  # in_proj (q, k, v) and out_proj
    feed_forward = (d * ff + ff) + (ff * d + d)
    layer = attention + feed_forward + 2 * (2 * d)  # two LayerNorms (gain, bias)
    return (router.input_dim * d + d) + router.num_layers * layer + 2 * d + (d * outputs
                                                                             + outputs)


class ConsortiumRouterConfig(BaseModel):
    """The consortium's encoder and router, declared once (the server's ``[router]``).

    Its ``sha256`` (of the canonical JSON) and ``num_params`` follow from it: every router
    round and version carries both, and a member trains only on a configuration whose hash it
    recomputed from the copy it fetched (``GET /v1/router/config``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    encoder: HashingEncoderConfig = Field(default_factory=HashingEncoderConfig,
                                          description="the public encoder")
    router: RouterConfig = Field(default_factory=RouterConfig, description="the router; "
                                 "input_dim equals encoder.dim")
    heads: list[str] = Field(min_length=1, description="roster names of the members, in the "
                             "router's output order (a member's head index is its place here)")
    federated: FederatedConfig = Field(
        default_factory=default_federated_config, description="the local recipe and its lr "
        "schedule over the rounds (each round says its index, params.router_round)")
    max_pairs: int | None = Field(default=None, ge=1, description="local pairs a member uses "
                                  "per round (None: all of its training pairs)")

    @field_validator("heads")
    @classmethod
    def _unique_names(cls, heads: list[str]) -> list[str]:
        bad = [h for h in heads if not re.match(_NAME, h)]
        if bad:
            raise ValueError(f"heads must be roster names; not: {bad}")
        if len(set(heads)) != len(heads):
            raise ValueError(f"heads name a member twice: {heads}")
        return heads

    @model_validator(mode="after")
    def _shapes_fit(self) -> ConsortiumRouterConfig:
        if self.router.input_dim != self.encoder.dim:
            raise ValueError(f"router.input_dim {self.router.input_dim} differs from "
                             f"encoder.dim {self.encoder.dim}")
        if self.router.d_model % self.router.num_heads:
            raise ValueError(f"router.d_model {self.router.d_model} is not divisible by "
                             f"router.num_heads {self.router.num_heads}")
        return self

    def canonical_json(self) -> str:
        """Every field, defaults filled, keys sorted, no spaces: equal configurations give
        equal text however they were written."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))

    @property
    def sha256(self) -> str:
        """Hex sha256 of :meth:`canonical_json`: the configuration's identity."""
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()

    @property
    def num_params(self) -> int:
        """The length of every router round and router version under this configuration."""
        return router_param_count(self.router, len(self.heads))

    def head_index(self, name: str) -> int:
        """Member ``name``'s output of the router; ``ValueError`` if it has none."""
        if name not in self.heads:
            raise ValueError(f"{name!r} has no head in router configuration "
                             f"{self.sha256[:12]} (heads: {', '.join(self.heads)})")
        return self.heads.index(name)

    def describe(self) -> str:
        """The configuration in one phrase, as refusals name it."""
        return (f"router configuration sha256 {self.sha256[:12]} ({self.num_params} "
                f"parameters, heads {', '.join(self.heads)})")


class RouterConfigRef(_Reply):
    """Which router configuration a round or a router version follows: its lineage, hash and
    parameter count (the configuration itself: ``GET /v1/router/config``)."""

    lineage: int = Field(description="router lineage (a new one starts with a new head order: "
                         "a member's enrollment, or an operator's ``POST /v1/router/lineage``)")
    sha256: str = Field(pattern=_SHA256, description="ConsortiumRouterConfig.sha256")
    num_params: int = Field(description="the configuration's router parameter count")


class RouterConfigInfo(RouterConfigRef):
    """``GET /v1/router/config``: a lineage's router configuration, with its reference."""

    config: ConsortiumRouterConfig
    created_at: float
    current: bool = Field(description="whether rounds open on this lineage now")
    first_version: int | None = Field(default=None, description="the lineage's oldest router "
                                      "version (None: none yet)")
    latest_version: int | None = Field(default=None, description="the lineage's newest router "
                                       "version (None: none yet)")
    started_by: str | None = Field(default=None, description="who started the lineage: an "
                                   "operator, ``settings`` or ``enrollment of NAME``")


class RouterRollback(_Wire):
    """Admin request: publish an earlier router version again as the newest."""

    version: int = Field(ge=1, le=2**62, description="the router version to restore")


class RouterVersionInfo(_Reply):
    """Metadata of one global router version; the blob is little-endian float32."""

    version: int
    round_id: int | None
    sha256: str
    size_bytes: int
    length: int
    created_at: float
    router_config: RouterConfigRef | None = Field(
        default=None, description="the configuration (lineage) the version belongs to")
    restored: int | None = Field(default=None, description="a rollback: the version it "
                                 "published again")
    carried_from: int | None = Field(default=None, description="a lineage's first version: "
                                     "the earlier lineage's version whose trunk and heads it "
                                     "carries over")

    def origin(self) -> str:
        """Where the version came from, in words (the console and ``fedmor router history``
        say it the same way): its round, the version a rollback restored, the version a new
        lineage carried over, or the operator's first publication."""
        if self.round_id is not None:
            return f"round {self.round_id}"
        if self.restored is not None:
            return f"restored version {self.restored}"
        if self.carried_from is not None:
            return f"carried over from version {self.carried_from}"
        return "published"
