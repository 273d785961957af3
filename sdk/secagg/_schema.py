"""Every wire message of a round, defined once (pydantic; bytes travel as base64 in JSON), and
the round's parameters: how to run rounds (``SecAggConfig``), resolved per round into the public
``RoundParams`` every client checks.

The masked vector additionally has a compact binary form (``MaskedInput.to_bytes``): a small
header plus the uint32 little-endian words, 4 bytes per element.
"""

from __future__ import annotations

import os
import struct
import uuid
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from sdk.secagg._dp import DPConfig
from sdk.secagg._errors import ConfigError
from sdk.secagg._graph import check_majority_threshold, default_degree
from sdk.secagg._quantize import MAX_CLIENTS, MAX_CLIP_RANGE, QuantizationConfig
from sdk.secagg._stages import Stage

__all__ = [
    "AdvertiseKeysRequest",
    "AdvertisedKeys",
    "ClientMessage",
    "ConsistencyCheckRequest",
    "ConsistencySignature",
    "EncryptedShare",
    "MaskedInput",
    "MaskedInputRequest",
    "RoundParams",
    "SecAggConfig",
    "ServerMessage",
    "ShareKeysRequest",
    "ShareKeysResponse",
    "UnmaskingRequest",
    "UnmaskingResponse",
    "consistency_payload",
    "keys_payload",
    "parse_client_message",
    "parse_server_message",
]


class _Msg(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_bytes="base64", val_json_bytes="base64")
    STAGE: ClassVar[Stage]
    round_id: str


class RoundParams(BaseModel):
    """Public parameters of a round, announced by the server and checked by each client."""

    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_bytes="base64", val_json_bytes="base64")

    round_id: str
    participants: list[int]
    threshold: int = Field(ge=1)
    degree: int = Field(ge=1)
    vector_length: int = Field(ge=1)
    graph_seed: bytes
    quantization: QuantizationConfig
    dp: DPConfig | None = None


class SecAggConfig(BaseModel):
    """How to run rounds. ``None`` picks a default from the number of participants:
    degree 2*ceil(log2 N)+2 (SecAgg+), threshold floor((degree+1)/2)+1 (a majority of each
    client's share holders), and the finest quantization that cannot overflow.

    ``clip_range`` and ``max_weight`` fit that quantization. An explicit ``quantization`` carries
    its own: they are then copied from it, and different values given alongside it are an error
    (either would otherwise be silently ignored). Build changed copies with ``model_validate``,
    not ``model_copy(update=...)``, which skips this check."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    degree: int | None = Field(default=None, ge=1, le=MAX_CLIENTS)
    threshold: int | None = Field(default=None, ge=1, le=MAX_CLIENTS)
    quantization: QuantizationConfig | None = None
    clip_range: float = Field(default=1.0, gt=0, le=MAX_CLIP_RANGE)
    max_weight: int = Field(default=1000, ge=1)
    dp: DPConfig | None = None

    @model_validator(mode="before")
    @classmethod
    def _quantization_owns_its_fields(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("quantization") is None:
            return data
        quant = QuantizationConfig.model_validate(data["quantization"])
        for name in ("clip_range", "max_weight"):
            if name in data and data[name] != getattr(quant, name):
                raise ValueError(
                    f"{name}={data[name]!r} contradicts quantization.{name}={getattr(quant, name)!r}: "
                    f"give {name} inside quantization, or drop quantization to have it fitted"
                )
        return {**data, "quantization": quant, "clip_range": quant.clip_range, "max_weight": quant.max_weight}

    def round_params(self, participants: Sequence[int], vector_length: int, *, round_id: str | None = None, graph_seed: bytes | None = None) -> RoundParams:
        """Resolve the defaults for these participants and check that they are consistent."""
        n = len(participants)
        if n < 2:
            raise ConfigError(f"secure aggregation needs >= 2 participants, got {n}")
        degree = min(self.degree, n - 1) if self.degree is not None else default_degree(n)
        threshold = self.threshold if self.threshold is not None else (degree + 1) // 2 + 1
        if threshold > degree + 1:
            raise ConfigError(f"threshold {threshold} exceeds the {degree + 1} share holders (degree + 1); raise degree or lower threshold")
        check_majority_threshold(threshold, degree, n)
        quant = self.quantization or QuantizationConfig.fitted(num_clients=n, clip_range=self.clip_range, max_weight=self.max_weight)
        quant.check_capacity(n)
        return RoundParams(
            round_id=round_id or uuid.uuid4().hex,
            participants=sorted(participants),
            threshold=threshold,
            degree=degree,
            vector_length=vector_length,
            graph_seed=graph_seed or os.urandom(32),
            quantization=quant,
            dp=self.dp,
        )


# ---- server -> client ----------------------------------------------------------------------
class AdvertiseKeysRequest(_Msg):
    """Stage 0: the round starts; send your signed round keys."""

    STAGE = Stage.ADVERTISE_KEYS
    kind: Literal["advertise_keys_request"] = "advertise_keys_request"
    params: RoundParams


class AdvertisedKeys(_Msg):
    """A client's round keys, signed with its long-term Ed25519 identity."""

    STAGE = Stage.ADVERTISE_KEYS
    kind: Literal["advertised_keys"] = "advertised_keys"
    sender: int
    enc_pk: bytes  # X25519, for the share ciphertexts
    mask_pk: bytes  # X25519, for the pairwise masks
    signature: bytes


class ShareKeysRequest(_Msg):
    """Stage 1: the signed keys of your neighbours that survived stage 0."""

    STAGE = Stage.SHARE_KEYS
    kind: Literal["share_keys_request"] = "share_keys_request"
    keys: list[AdvertisedKeys]


class EncryptedShare(BaseModel):
    """AES-GCM ciphertext of (b share, mask-key share) from ``sender`` to ``recipient``."""

    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_bytes="base64", val_json_bytes="base64")
    sender: int
    recipient: int
    ciphertext: bytes


class ShareKeysResponse(_Msg):
    """Stage 1 reply: one encrypted share pair per neighbour."""

    STAGE = Stage.SHARE_KEYS
    kind: Literal["share_keys_response"] = "share_keys_response"
    sender: int
    shares: list[EncryptedShare]


class MaskedInputRequest(_Msg):
    """Stage 2: the ciphertexts addressed to you; send your masked input."""

    STAGE = Stage.MASKED_INPUT_COLLECTION
    kind: Literal["masked_input_request"] = "masked_input_request"
    shares: list[EncryptedShare]


class MaskedInput(_Msg):
    """Stage 2 reply: the masked, quantized, weighted update (P + 1 uint32 words, LE)."""

    STAGE = Stage.MASKED_INPUT_COLLECTION
    kind: Literal["masked_input"] = "masked_input"
    sender: int
    masked: bytes

    def vector(self) -> np.ndarray:
        """The masked words as a (P + 1,) uint32 array (a read-only view)."""
        return np.frombuffer(self.masked, dtype="<u4")

    def to_bytes(self) -> bytes:
        """Compact binary form: u16 round-id length, round id, u32 sender, then the words."""
        rid = self.round_id.encode()
        return struct.pack("<H", len(rid)) + rid + struct.pack("<I", self.sender) + self.masked

    @classmethod
    def from_bytes(cls, data: bytes) -> MaskedInput:
        """Inverse of ``to_bytes``."""
        (n,) = struct.unpack_from("<H", data, 0)
        rid = data[2 : 2 + n].decode()
        (sender,) = struct.unpack_from("<I", data, 2 + n)
        return cls(round_id=rid, sender=sender, masked=data[6 + n :])


class ConsistencyCheckRequest(_Msg):
    """Stage 3: the survivor set of stage 2; sign it."""

    STAGE = Stage.CONSISTENCY_CHECK
    kind: Literal["consistency_check_request"] = "consistency_check_request"
    survivors: list[int]


class ConsistencySignature(_Msg):
    """Stage 3 reply: the client's signature over (round id, survivor set)."""

    STAGE = Stage.CONSISTENCY_CHECK
    kind: Literal["consistency_signature"] = "consistency_signature"
    sender: int
    signature: bytes


class UnmaskingRequest(_Msg):
    """Stage 4: survivors (reveal their b shares), dropped (reveal their key shares), and the
    consistency signatures of the recipient's neighbourhood (itself and its neighbours, the
    holders of its shares), proving they signed the same survivor set."""

    STAGE = Stage.UNMASKING
    kind: Literal["unmasking_request"] = "unmasking_request"
    survivors: list[int]
    dropped: list[int]
    signatures: dict[int, bytes]


class UnmaskingResponse(_Msg):
    """Stage 4 reply: Shamir shares (16 uint32 LE words each), keyed by the secret's owner."""

    STAGE = Stage.UNMASKING
    kind: Literal["unmasking_response"] = "unmasking_response"
    sender: int
    self_mask_shares: dict[int, bytes]
    key_shares: dict[int, bytes]


ServerMessage = Annotated[
    AdvertiseKeysRequest | ShareKeysRequest | MaskedInputRequest | ConsistencyCheckRequest | UnmaskingRequest,
    Field(discriminator="kind"),
]
"""Any message the server sends to a client, discriminated by ``kind``."""
ClientMessage = Annotated[
    AdvertisedKeys | ShareKeysResponse | MaskedInput | ConsistencySignature | UnmaskingResponse,
    Field(discriminator="kind"),
]
"""Any message a client sends to the server, discriminated by ``kind``."""
_SERVER_ADAPTER: TypeAdapter[ServerMessage] = TypeAdapter(ServerMessage)
_CLIENT_ADAPTER: TypeAdapter[ClientMessage] = TypeAdapter(ClientMessage)


def parse_server_message(data: str | bytes | Mapping[str, Any]) -> ServerMessage:
    """Parse any server -> client message from its JSON text, or from the JSON object already
    parsed (its bytes fields as base64 text, which ``val_json_bytes`` decodes there too)."""
    if isinstance(data, Mapping):
        return _SERVER_ADAPTER.validate_python(data)
    return _SERVER_ADAPTER.validate_json(data)


def parse_client_message(data: str | bytes | Mapping[str, Any]) -> ClientMessage:
    """Parse any client -> server message from its JSON text, or from the JSON object already
    parsed (its bytes fields as base64 text, which ``val_json_bytes`` decodes there too)."""
    if isinstance(data, Mapping):
        return _CLIENT_ADAPTER.validate_python(data)
    return _CLIENT_ADAPTER.validate_json(data)


def keys_payload(round_id: str, sender: int, enc_pk: bytes, mask_pk: bytes) -> bytes:
    """The bytes a client signs when advertising its round keys."""
    return b"fedmor-secagg/keys/" + round_id.encode() + b"/" + struct.pack("<I", sender) + enc_pk + mask_pk


def consistency_payload(round_id: str, survivors: list[int]) -> bytes:
    """The bytes each survivor signs in the consistency check."""
    ids = np.array(sorted(survivors), dtype="<u4").tobytes()
    return b"fedmor-secagg/consistency/" + round_id.encode() + b"/" + ids
