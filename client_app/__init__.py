"""fedmor client_app: a member's app (reward queries, its side of each round)."""

from client_app._app import create_client_app, create_client_app_from_env, site_reward_service
from client_app._demo import demo_update
from client_app._policy import PolicyDenied, PolicyRefused, SitePolicy, describe_policy
from client_app._runner import ClientRunner, RunnerError, UpdateFn
from client_app._scorer import HashScorer, Scorer, load_object
from client_app._service import RateLimited, RewardService
from client_app._settings import ClientSettings
from client_app._store import ClientStore

__all__ = [
    "ClientRunner",
    "ClientSettings",
    "ClientStore",
    "HashScorer",
    "PolicyDenied",
    "PolicyRefused",
    "RateLimited",
    "RewardService",
    "RunnerError",
    "Scorer",
    "SitePolicy",
    "UpdateFn",
    "create_client_app",
    "create_client_app_from_env",
    "demo_update",
    "describe_policy",
    "load_object",
    "site_reward_service",
]
