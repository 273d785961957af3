"""The round kinds a consortium speaks, registered in one place (no import side effects).

Server and client look a round's ``kind`` up here, so both halves of every kind are known to
both apps as soon as ``sdk.rounds`` is imported.
"""

from __future__ import annotations

from sdk.rounds._fedavg_kind import FedAvgKind
from sdk.rounds._protocols import RoundKind
from sdk.rounds._secagg_kind import SecAggKind

__all__ = ["ROUND_KINDS"]

ROUND_KINDS: dict[str, RoundKind] = {kind.name: kind for kind in (FedAvgKind(), SecAggKind())}
"""Round kinds by name (``rm_fedavg``, ``router_secagg``): what a round's stages are and how
each closes."""
