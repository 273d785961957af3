"""Secure aggregation: SecAgg+ as sans-IO state machines, client-level DP and a CKKS mode.

``SecAggClient`` and ``SecAggServer`` only turn messages into messages; a driver (the REST apps,
or ``simulate_round`` in memory) moves them and calls ``SecAggServer.close_stage`` at deadlines.
"""

from sdk.secagg._ckks import CKKSAggregator, CKKSContext, CKKSUpdate
from sdk.secagg._client import SecAggClient
from sdk.secagg._client_state import ClientState
from sdk.secagg._crypto import Roster, generate_identities
from sdk.secagg._dp import (
    DPConfig,
    client_noise_std,
    clip_and_noise,
    composed_epsilon,
    dp_clip_range,
    preload_accountant,
)
from sdk.secagg._errors import Attack, ProtocolViolation, RoundAborted, SecAggError
from sdk.secagg._quantize import QuantizationConfig
from sdk.secagg._schema import (
    ClientMessage,
    MaskedInput,
    RoundParams,
    SecAggConfig,
    parse_client_message,
    parse_server_message,
)
from sdk.secagg._server import SecAggServer
from sdk.secagg._simulate import simulate_round
from sdk.secagg._stages import Stage

__all__ = [
    "Attack",
    "CKKSAggregator",
    "CKKSContext",
    "CKKSUpdate",
    "ClientMessage",
    "ClientState",
    "DPConfig",
    "MaskedInput",
    "ProtocolViolation",
    "QuantizationConfig",
    "Roster",
    "RoundAborted",
    "RoundParams",
    "SecAggClient",
    "SecAggConfig",
    "SecAggError",
    "SecAggServer",
    "Stage",
    "client_noise_std",
    "clip_and_noise",
    "composed_epsilon",
    "dp_clip_range",
    "generate_identities",
    "parse_client_message",
    "parse_server_message",
    "preload_accountant",
    "simulate_round",
]
