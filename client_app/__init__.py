"""fedmor client_app: a member's app (reward queries, its side of each round)."""

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
