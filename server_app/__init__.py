"""fedmor server_app: the consortium server (REST, enrollment, rounds, reward broker)."""

from server_app._rewards._broker import BrokerError, RewardBroker
from server_app._rewards._broker_source import BrokerRewardSource
from server_app._settings import ServerSettings
from server_app._store import Store

__all__ = [
    "BrokerError",
    "BrokerRewardSource",
    "RewardBroker",
    "ServerSettings",
    "Store",
]
