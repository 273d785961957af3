"""fedmor server_app: the consortium server (REST, enrollment, rounds, reward broker)."""

from server_app._audit_settings import AuditSettings, CaptureSettings
from server_app._broker import BrokerError, QueryItem, RewardBroker
from server_app._settings import AlignmentSettings, ServerSettings
from server_app._store import Store

__all__ = [
    "AlignmentSettings",
    "AuditSettings",
    "BrokerError",
    "CaptureSettings",
    "QueryItem",
    "RewardBroker",
    "ServerSettings",
    "Store",
]
