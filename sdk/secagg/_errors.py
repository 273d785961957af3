"""Typed errors of the secure-aggregation protocol.

Like h11's ``LocalProtocolError`` / ``RemoteProtocolError``, every protocol error names the stage
and the party at fault, so a driver knows whom to blame (and whom to drop).
"""

from __future__ import annotations

import enum

from sdk.secagg._stages import Stage

__all__ = [
    "Attack",
    "ConfigError",
    "InvalidUpdateError",
    "MaliciousServerError",
    "ProtocolViolation",
    "QuantizationOverflowError",
    "RoundAborted",
    "SecAggError",
]


class SecAggError(Exception):
    """Base class of every secure-aggregation error."""


class ConfigError(SecAggError, ValueError):
    """A configuration is inconsistent (names the field to change)."""


class QuantizationOverflowError(ConfigError):
    """The sum of all clients could wrap around the 2^32 ring."""


class InvalidUpdateError(SecAggError, ValueError):
    """A client's update or weight is unusable; raised before anything is sent."""


class ProtocolViolation(SecAggError):
    """A party sent a message that is illegal at this point of the protocol.

    ``party`` is who broke the protocol ("server" or "client 7"), ``stage`` where it happened.
    """

    def __init__(self, *, party: str, stage: Stage, reason: str) -> None:
        self.party = party
        self.stage = stage
        self.reason = reason
        super().__init__(f"{party} violated the protocol at stage {stage.value}: {reason}")


class Attack(enum.Enum):
    """Kinds of active-server misbehaviour an honest client detects."""

    WRONG_ROUND = "wrong_round"
    OUT_OF_ORDER = "out_of_order"
    FORGED_SIGNATURE = "forged_signature"
    UNKNOWN_CLIENT = "unknown_client"
    TAMPERED_CIPHERTEXT = "tampered_ciphertext"
    INCONSISTENT_SURVIVORS = "inconsistent_survivors"
    DOUBLE_REVEAL = "double_reveal"
    BAD_PARAMETERS = "bad_parameters"


class MaliciousServerError(ProtocolViolation):
    """The server deviated from the protocol in a way only an active attacker would."""

    def __init__(self, *, stage: Stage, attack: Attack, reason: str) -> None:
        self.attack = attack
        super().__init__(party="server", stage=stage, reason=f"[{attack.value}] {reason}")


class RoundAborted(SecAggError):
    """Too few parties survived a stage: the round ends and the server learns nothing."""

    def __init__(self, *, stage: Stage, survivors: int, threshold: int, reason: str = "") -> None:
        self.stage = stage
        self.survivors = survivors
        self.threshold = threshold
        detail = f": {reason}" if reason else ""
        super().__init__(
            f"round aborted at stage {stage.value}: {survivors} survivor(s) < threshold "
            f"{threshold}{detail}"
        )
