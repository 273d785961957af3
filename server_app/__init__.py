"""fedmor server_app: the consortium server (REST, enrollment, rounds, reward broker)."""

from sdk.membership import RosterEntry, RosterFile, add_to_roster
from sdk.rounds import ROUND_KINDS, ClientRound, RoundKind, ServerRound, UpdateSource, ready_update
from sdk.wire import (
    AuthError,
    RoundSpec,
    generate_key,
    load_or_create_key,
    load_private_key,
    parse_public_key,
    public_key_b64,
    sign_headers,
)
from server_app._app import create_app, create_app_from_env
from server_app._audit_settings import AuditSettings, CaptureSettings
from server_app._broker import BrokerError, BrokerRewardSource, RewardBroker
from server_app._rewards import AlignmentService
from server_app._rounds import RoundManager
from server_app._settings import AlignmentSettings, ServerSettings, load_settings
from server_app._store import Store

__all__ = [
    "ROUND_KINDS",
    "AlignmentService",
    "AlignmentSettings",
    "AuditSettings",
    "AuthError",
    "BrokerError",
    "BrokerRewardSource",
    "CaptureSettings",
    "ClientRound",
    "RewardBroker",
    "RosterEntry",
    "RosterFile",
    "RoundKind",
    "RoundManager",
    "RoundSpec",
    "ServerRound",
    "ServerSettings",
    "Store",
    "UpdateSource",
    "add_to_roster",
    "create_app",
    "create_app_from_env",
    "generate_key",
    "load_or_create_key",
    "load_private_key",
    "load_settings",
    "parse_public_key",
    "public_key_b64",
    "ready_update",
    "sign_headers",
]
