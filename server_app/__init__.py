"""fedmor server_app: the consortium server (REST, enrollment, rounds, reward broker).

Each name loads its module on first use, so ``fedmor keys new`` imports no web framework."""

from typing import TYPE_CHECKING

from sdk import lazy_exports

if TYPE_CHECKING:
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

if not TYPE_CHECKING:  # mypy reads the block above, so a mistyped name stays an error
    __getattr__, __dir__ = lazy_exports(__name__)
