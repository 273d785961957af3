"""``router_secagg``: the sdk.secagg SecAgg+ state machines behind the ``RoundKind`` interface.

Clients are numbered 1..N in participant order (``protocol_ids``); the round roster is built from the enrolled
Ed25519 identity keys, the same keys that sign every REST request. The masked input (4 bytes per
parameter) travels as its compact binary form (``MaskedInput.to_bytes``), every other message as
JSON. A client's ``state`` is ``SecAggClient.export_state``: it resumes the round after a restart.
"""

from __future__ import annotations

import base64
import os
import struct
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import BaseModel, Field, ValidationError, model_validator

from sdk.rounds._protocols import (
    ClientRound,
    RoundFailed,
    RoundKind,
    RoundPrivacy,
    RoundTerms,
    ServerRound,
    UpdateRejected,
)
from sdk.secagg import (
    ClientMessage,
    ClientState,
    DPConfig,
    MaskedInput,
    Roster,
    RoundAborted,
    RoundParams,
    SecAggClient,
    SecAggConfig,
    SecAggError,
    SecAggServer,
    Stage,
    client_noise_std,
    dp_clip_range,
    parse_client_message,
    parse_server_message,
)
from sdk.secagg._schema import ServerMessage
from sdk.wire import UPDATE_PARAMS, DPTerms, PayloadError, RoundSpec, StagePayload

__all__ = ["SecAggKind", "SecAggRoundParams", "member_weight", "protocol_ids"]

_STAGES = tuple(s.value for s in Stage if s not in (Stage.DONE, Stage.ABORTED, Stage.ERROR))


class SecAggRoundParams(SecAggConfig):
    """``params`` of a ``router_secagg`` round: ``SecAggConfig``'s ``degree``, ``threshold``,
    ``quantization``, ``clip_range`` and ``max_weight``, and the ``graph_seed`` that
    ``SecAggKind.prepare`` fixes. An unknown key is an error, not a silently ignored typo."""

    graph_seed: str = Field(pattern=r"^[0-9a-fA-F]{64}$")  # 32 bytes, hex

    @model_validator(mode="after")
    def _uniform_weights_under_dp(self) -> SecAggRoundParams:
        # Each member's noise std is z * C * max_weight / sqrt(t): with weights n_k the noise
        # would have to cover max_weight x the sensitivity. Under DP every member weighs 1.
        if self.dp is not None and self.max_weight != 1:
            raise ValueError(f"dp: weights are uniform under DP, max_weight must be 1, not "
                             f"{self.max_weight} (leave it out)")
        return self

    @staticmethod
    def uniform_under_dp(config: SecAggConfig) -> SecAggConfig:
        """``config`` with the weight rule under DP applied (max_weight 1, in an explicit
        quantization too), for callers that build a config rather than send params."""
        if config.dp is None:
            return config
        quant = config.quantization
        return SecAggConfig.model_validate({
            **dict(config), "max_weight": 1,
            "quantization": None if quant is None else quant.model_copy(update={"max_weight": 1}),
        })

    @classmethod
    def parse(cls, params: dict[str, Any]) -> SecAggRoundParams:
        """Validate a round's ``params`` (the members' update keys aside), with one readable
        ``ValueError`` naming every bad key."""
        data = {k: v for k, v in params.items() if k not in UPDATE_PARAMS}
        if data.get("dp") is not None and "max_weight" not in data and not data.get(
                "quantization"):
            data["max_weight"] = 1  # the DP default: uniform weights
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = [
                f"unknown parameter {'.'.join(map(str, e['loc']))!r}" if e["type"] == "extra_forbidden"
                else f"{'.'.join(map(str, e['loc'])) or 'params'}: {e['msg']}"
                for e in exc.errors()
            ]
            # What an operator may set: the server fixes graph_seed, the members' update
            # sources read UPDATE_PARAMS, and quantization follows max_weight and clip_range.
            known = sorted(set(cls.model_fields) - {"graph_seed", "quantization"})
            raise ValueError(f"{'; '.join(problems)} (router_secagg params: "
                             f"{', '.join(known)})") from None


def protocol_ids(spec: RoundSpec) -> dict[str, int]:
    """Client id -> SecAgg+ protocol index: 1..N in the round's participant order (the one
    mapping both halves and every driver use)."""
    return {cid: i + 1 for i, cid in enumerate(spec.participants)}


def _protocol_round(round_id: int) -> str:
    """The SecAgg+ round id of REST round ``round_id``: every signed and encrypted message
    names it, so no message of one round is accepted in another."""
    return f"round-{round_id}"


def _round_params(spec: RoundSpec) -> tuple[RoundParams, Roster]:
    """The SecAgg+ parameters and roster of the round ``spec`` describes (the one conversion
    from the round's description to the protocol's); ``ValueError`` on params it refuses."""
    cfg = SecAggRoundParams.parse(spec.params)
    ids = list(protocol_ids(spec).values())
    params = cfg.round_params(ids, spec.vector_length, round_id=_protocol_round(spec.round_id),
                              graph_seed=bytes.fromhex(cfg.graph_seed))
    # Every stage needs ``threshold`` answers, so a threshold >= min_clients also keeps any
    # aggregate from having fewer survivors; it cannot exceed the degree + 1 share holders
    # (``_Server.close`` checks min_clients itself for that case).
    floor = min(spec.min_clients, params.degree + 1)
    if cfg.threshold is None:  # the SDK's default (a majority of the share holders), or floor
        params = params.model_copy(update={"threshold": max(params.threshold, floor)})
    elif params.threshold < floor:
        raise ValueError(f"threshold {params.threshold} < min_clients {spec.min_clients}: an "
                         f"aggregate of fewer than min_clients survivors could be accepted; "
                         f"raise threshold (at most degree + 1 = {params.degree + 1}) or omit it")
    if params.dp is not None:
        _check_dp_range(params)
    roster = Roster.from_raw({i: base64.b64decode(k)
                              for i, k in zip(ids, spec.public_keys, strict=True)})
    return params, roster


def _check_dp_range(params: RoundParams) -> None:
    """A member's clipped, noised coordinates must fit the quantization's clip range: clipping
    the noise there would bias the aggregate and void the noise's calibration."""
    assert params.dp is not None
    std = client_noise_std(params.dp, min_survivors=params.threshold, max_weight=1)
    need = dp_clip_range(params.dp, min_survivors=params.threshold)
    if params.quantization.clip_range < need:
        raise ValueError(f"dp: clip_range {params.quantization.clip_range:g} < clip_norm + 4 x "
                         f"each member's noise std ({params.dp.clip_norm:g} + 4 x {std:.3g} = "
                         f"{need:.3g}); raise clip_range to at least that")


@dataclass(frozen=True)
class _SecAggTerms(RoundTerms):
    params: RoundParams
    roster: Roster

    def numbered(self, round_id: int) -> _SecAggTerms:
        return replace(super().numbered(round_id), params=self.params.model_copy(
            update={"round_id": _protocol_round(round_id)}))


class _Server(ServerRound[ClientMessage, ServerMessage]):
    stages = _STAGES

    def __init__(self, terms: _SecAggTerms) -> None:
        self.spec = terms.spec
        try:
            self._sm = SecAggServer(terms.params, terms.roster)
        except (ValueError, SecAggError) as exc:
            raise RoundFailed(f"bad secure-aggregation parameters: {exc}") from exc
        # The survivors' weighted mean of clipped values, plus quantization error.
        self.aggregate_bound = 2 * terms.params.quantization.clip_range
        self._ids = protocol_ids(terms.spec)
        self._names = {i: cid for cid, i in self._ids.items()}
        self._first = self._sm.start()

    def opening(self, client_id: str) -> ServerMessage:
        return self._first[self._ids[client_id]]

    def encode(self, msg: ServerMessage) -> dict[str, Any]:
        return msg.model_dump(mode="json")

    def parse(self, stage: str, client_id: str, payload: StagePayload) -> ClientMessage:
        try:
            if isinstance(payload, bytes):
                if stage != Stage.MASKED_INPUT_COLLECTION.value:
                    raise PayloadError(f"stage {stage}: expects a JSON message, not a binary body")
                msg: ClientMessage = MaskedInput.from_bytes(payload)
            else:  # the parsed JSON object validates as it is: no second JSON round trip
                msg = parse_client_message(payload)
        except (ValidationError, ValueError, struct.error) as exc:
            if isinstance(exc, PayloadError):
                raise
            raise PayloadError(f"stage {stage}: not a secure-aggregation message: "
                               f"{str(exc).splitlines()[0]}") from exc
        if msg.sender != self._ids[client_id]:
            raise PayloadError(f"stage {stage}: sender {msg.sender} is not the authenticated "
                               f"client's protocol id {self._ids[client_id]}")
        if msg.STAGE.value != stage:
            raise PayloadError(f"stage {stage}: got a {msg.kind} message")
        return msg

    def accept(self, stage: str, client_id: str, parsed: ClientMessage) -> None:
        try:
            self._sm.receive(parsed)
        except SecAggError as exc:
            raise PayloadError(str(exc)) from exc

    def close_stage(self, stage: str) -> dict[str, ServerMessage]:
        try:
            out = self._sm.close_stage()
        except RoundAborted as exc:
            raise RoundFailed(str(exc)) from exc
        # The masked inputs that arrived are the aggregate's survivors (one consistency-check
        # request each). The threshold already guarantees min_clients of them unless
        # min_clients exceeds degree + 1.
        if stage == Stage.MASKED_INPUT_COLLECTION.value and len(out) < self.spec.min_clients:
            raise RoundFailed(f"only {len(out)} masked input(s) arrived, min_clients is "
                              f"{self.spec.min_clients}")
        return {self._names[i]: m for i, m in out.items()}

    def result(self) -> np.ndarray:
        if self._sm.result is None:
            raise RoundFailed("the secure aggregate is not available")
        return self._sm.result.mean.astype(np.float32)

    def survivors(self) -> tuple[list[str], float]:
        if self._sm.result is None:
            raise RoundFailed("the secure aggregate is not available")
        return [self._names[i] for i in self._sm.result.survivors], self._sm.result.weight_sum


class _Client(ClientRound[ServerMessage, ClientMessage]):
    update_stage = Stage.MASKED_INPUT_COLLECTION.value
    # Masking is the client's one heavy step: a driver runs it while it persists and sends the
    # key stages' replies (mostly asleep on its socket), off the round's critical path.
    precomputes = True

    def __init__(self, terms: _SecAggTerms, client_id: str, key: Ed25519PrivateKey,
                 state: dict[str, Any] | None, rng: np.random.Generator | None) -> None:
        index = protocol_ids(terms.spec)[client_id]
        self._dp = terms.params.dp is not None
        # The update is provided later (``provide``): the key stages run while it is computed.
        if state:
            try:
                saved = ClientState.model_validate(state)
                self._sm = SecAggClient.restore(saved, key, terms.roster, None, None, rng=rng)
            except ValueError as exc:  # includes pydantic's ValidationError
                raise RoundFailed(f"cannot resume from the saved round state: {exc}") from exc
        else:
            self._sm = SecAggClient(index, key, terms.roster, None, None, rng=rng)

    @property
    def has_update(self) -> bool:
        return self._sm.has_input

    def provide(self, vector: np.ndarray, weight: float) -> None:
        if self._sm.has_input:
            return
        vector = np.asarray(vector)
        # A float32 update stays as it is: the encoder widens it block by block, exactly, so a
        # float64 copy (8 bytes a parameter) would only cost time and memory.
        if vector.dtype not in (np.float32, np.float64):
            vector = vector.astype(np.float64)
        try:
            self._sm.provide_input(vector, member_weight(weight, dp=self._dp))
        except SecAggError as exc:
            raise UpdateRejected(f"the local update is not valid for this round: {exc}") from exc

    def precompute(self) -> None:
        if self._sm.has_input:
            self._sm.prepare_masked_input()

    def decode(self, stage: str, server_input: dict[str, Any]) -> ServerMessage:
        try:  # the parsed JSON object validates as it is: no second JSON round trip
            return parse_server_message(server_input)
        except ValidationError as exc:
            raise RoundFailed(f"stage {stage}: {exc}") from exc

    def reply(self, stage: str, server_msg: ServerMessage) -> ClientMessage:
        if stage == self.update_stage and not self._sm.has_input:
            raise UpdateRejected(f"stage {stage}: no local update was provided")
        try:
            return self._sm.receive(server_msg)
        except SecAggError as exc:
            raise RoundFailed(f"stage {stage}: {exc}") from exc

    def encode(self, msg: ClientMessage) -> StagePayload:
        # The one bulky message goes as raw bytes: no base64, no JSON, parsed once by the server.
        if isinstance(msg, MaskedInput):
            return msg.to_bytes()
        return msg.model_dump(mode="json")

    def state(self) -> dict[str, Any]:
        return self._sm.export_state().model_dump(mode="json")


def member_weight(n_k: float, *, dp: bool) -> int:
    """The weight a member masks with its update: n_k, or 1 under DP (each member's noise
    covers one member's clipped update, so a larger weight would outweigh the noise)."""
    return 1 if dp else int(n_k)


def dp_terms(dp: DPConfig) -> DPTerms:
    """The wire form of a DP configuration (``target_epsilon`` resolved to its noise)."""
    return DPTerms(clip_norm=dp.clip_norm, noise_multiplier=dp.resolved_noise_multiplier(),
                   sample_rate=dp.sample_rate, delta=dp.delta)


class SecAggKind(RoundKind[_SecAggTerms]):
    """SecAgg+ (sdk.secagg): the server only learns the weighted sum of the survivors."""

    name = "router_secagg"
    stages = _STAGES

    def prepare(self, params: dict[str, Any]) -> dict[str, Any]:
        """Fix the public graph seed at creation so a restart rebuilds the same round."""
        return {"graph_seed": os.urandom(32).hex(), **params}

    def terms(self, spec: RoundSpec) -> _SecAggTerms:
        """The round's SecAgg+ parameters and roster, parsed once, and its privacy: masked;
        every stage needs ``threshold`` answers, and the masked-input close also
        ``min_clients``: no aggregate combines fewer survivors than the larger of the two."""
        try:
            params, roster = _round_params(spec)
        except (ValueError, KeyError, SecAggError) as exc:
            raise ValueError(f"bad secure-aggregation parameters: {exc}") from exc
        privacy = RoundPrivacy(masked=True, dp=None if params.dp is None else dp_terms(params.dp),
                               min_survivors=max(params.threshold, spec.min_clients))
        return _SecAggTerms(spec, privacy, params, roster)

    def server(self, terms: _SecAggTerms) -> _Server:
        return _Server(terms)

    def client(self, terms: _SecAggTerms, *, client_id: str, key: Ed25519PrivateKey,
               state: dict[str, Any] | None,
               rng: np.random.Generator | None = None) -> _Client:
        return _Client(terms, client_id, key, state, rng)

    def wire_size(self, msg: object) -> int:
        """The masked input travels in its binary form (4 bytes per element), the rest as
        compact JSON."""
        if isinstance(msg, MaskedInput):
            return len(msg.to_bytes())
        if isinstance(msg, BaseModel):
            return len(msg.model_dump_json())
        return super().wire_size(msg)

