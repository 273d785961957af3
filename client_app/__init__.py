"""fedmor client_app: a member's app (reward queries, its side of each round).

Each name loads its module on first use, so ``fedmor client status`` imports no web framework."""

from typing import TYPE_CHECKING

from sdk import lazy_exports

if TYPE_CHECKING:
    from client_app._app import site_reward_service
    from client_app._policy import PolicyDenied, SitePolicy
    from client_app._runner import ClientRunner
    from client_app._scorer import HashScorer
    from client_app._service import RewardService, Scorer
    from client_app._settings import ClientSettings
    from client_app._store import ClientStore

__all__ = [
    "ClientRunner",
    "ClientSettings",
    "ClientStore",
    "HashScorer",
    "PolicyDenied",
    "RewardService",
    "Scorer",
    "SitePolicy",
    "site_reward_service",
]

if not TYPE_CHECKING:  # mypy reads the block above, so a mistyped name stays an error
    __getattr__, __dir__ = lazy_exports(__name__)
