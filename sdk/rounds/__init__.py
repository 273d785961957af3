"""Round kinds: how a consortium aggregates its members' updates, defined once, sans-IO.

Each kind (``rm_fedavg``, ``router_secagg``, registered in ``ROUND_KINDS``) has a server half
(``ServerRound``) and a member half (``ClientRound``) that speak typed messages; it owns the
delta arithmetic (``as_delta`` / ``from_delta``), the weight and DP rules and the id mapping
(``protocol_ids``). Three drivers run the same halves: the server's round
manager and the member's runner over REST (``server_app``, ``client_app``), and
``run_in_memory`` in one process. A round's description, what crosses the wire, stays in
``sdk.wire`` (``RoundSpec``, ``RoundInfo``, ``StagePayload``).
"""

from sdk.rounds._fedavg_kind import FedAvgParams, FedAvgUpdate
from sdk.rounds._kinds import ROUND_KINDS
from sdk.rounds._memory import memory_spec, run_in_memory
from sdk.rounds._protocols import (
    ClientRound,
    RoundFailed,
    RoundKind,
    RoundPrivacy,
    RoundTerms,
    ServerRound,
    UpdateRejected,
    as_delta,
    from_delta,
)
from sdk.rounds._secagg_kind import SecAggRoundParams, protocol_ids

__all__ = [
    "ROUND_KINDS",
    "ClientRound",
    "FedAvgParams",
    "FedAvgUpdate",
    "RoundFailed",
    "RoundKind",
    "RoundPrivacy",
    "RoundTerms",
    "SecAggRoundParams",
    "ServerRound",
    "UpdateRejected",
    "as_delta",
    "from_delta",
    "memory_spec",
    "protocol_ids",
    "run_in_memory",
]
