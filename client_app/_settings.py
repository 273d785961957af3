"""Client configuration: a TOML/JSON file plus ``FEDMOR_CLIENT_*`` environment variables."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr
from pydantic_settings import SettingsConfigDict

from client_app._policy import SitePolicy
from sdk.data import DEFAULT_MAX_IMAGE_SIDE
from sdk.serving import AppHardening, RequestLimits
from sdk.storage import Retention

if TYPE_CHECKING:
    from sdk.models import Runtime

__all__ = ["ClientSettings", "RouterTrainingSettings"]


class RouterTrainingSettings(BaseModel):
    """``[router_training]``: the member's own router training pairs. With it, every router
    round trains the consortium's router (encoder, architecture, head order and schedule fetched
    from the server, ``GET /v1/router/config``, and checked against the round's hash) on these
    pairs, with the built-in local recipe or a plug-in of the ``fedmor.router_updates``
    entry-point group."""

    model_config = ConfigDict(extra="forbid")

    pairs_dir: Path = Field(description="this member's training pairs (an sdk.data pairs "
                            "folder: pairs.jsonl and its images); never leaves the site")
    eval_pairs_dir: Path | None = Field(default=None, description="this member's held-out "
                                        "pairs, for `fedmor router eval --pairs NAME=DIR`")
    update: str = Field(default="builtin", pattern=r"^[A-Za-z0-9_.\-]{1,100}$",
                        description="builtin (sdk.router.local_router_update), or the name of "
                        "a plug-in in the fedmor.router_updates entry-point group")


class ClientSettings(AppHardening):
    """Everything a hospital's client app needs; every field has a working default."""

    model_config = SettingsConfigDict(env_prefix="FEDMOR_CLIENT_", extra="forbid")
    # A key that left the settings: load_settings refuses it with what to write instead.
    retired_settings: ClassVar[dict[str, str]] = {
        "update_source": "use [router_training] (pairs_dir; custom code plugs in as a "
                         "fedmor.router_updates entry point named in its update)"}

    name: str = Field(default="client", description="this institution's roster name")
    server_url: str = Field(default="https://127.0.0.1:8443", description="consortium server")
    enrollment_token: SecretStr | None = Field(default=None, description="one-time token")
    identity_key: Path = Field(default=Path("fedmor-client/identity.pem"),
                               description="Ed25519 identity key (created if missing)")
    db_path: Path = Field(default=Path("fedmor-client/client.db"), description="SQLite state")
    roster_file: Path | None = Field(default=None, description="consortium roster to check "
                                     "round participants' keys against")
    host: str = "127.0.0.1"
    port: int = Field(default=9443, ge=0, le=65535)
    public_url: str | None = Field(default=None, description="URL the server reaches this app "
                                   "at (push mode); None = pull mode")
    tls_cert: Path | None = Field(default=None, description="PEM certificate chain (HTTPS)")
    tls_key: Path | None = None
    server_ca: Path | None = Field(default=None, description="CA bundle to verify the server")
    tls_client_cert: Path | None = Field(default=None, description="this member's client "
                                         "certificate for the server (mutual TLS)")
    tls_client_key: Path | None = Field(default=None, description="PEM private key of "
                                        "tls_client_cert")
    server_public_key: str | None = Field(default=None, description="pinned server identity "
                                          "(default: the key learned at enrollment)")
    reward_model_dir: Path | None = Field(default=None, description="sdk.reward checkpoint "
                                          "(with normalizer.json); overrides ``scorer``")
    reward_base_dir: Path | None = Field(default=None, description="base VLM checkpoint of a "
                                         "LoRA (adapter-only) reward checkpoint (default: the "
                                         "directory it was trained on)")
    device: str = Field(default="auto", pattern=r"^(auto|cpu|mps|cuda(:\d+)?)$",
                        description="where the reward model runs: auto (CUDA if available), "
                        "cpu, cuda, cuda:N or mps")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        default="auto", description="the reward model's dtype (auto: bfloat16 on a GPU that "
        "supports it, float32 otherwise); scores always leave as float32")
    scorer: str | None = Field(default=None, description="module:factory returning the reward "
                               "scorer (or give reward_model_dir)")
    router_training: RouterTrainingSettings | None = Field(
        default=None, description="this member's router training pairs: selects the built-in "
        "local router training (or a fedmor.router_updates plug-in) on the consortium's router "
        "configuration")
    demo: bool = Field(default=False, description="stand-ins for what is not configured: the "
                       "hash scorer and random updates (every reward answer says so in the "
                       "x-fedmor-demo header); never for a real site")
    policy: SitePolicy = Field(default_factory=SitePolicy, description="what this site lets "
                               "leave: rounds it takes part in, reward queries it answers")
    clip: float | None = Field(default=None, gt=0, description="the bound c this member "
                               "announces: the server fails (never clips) a score outside "
                               "[-clip, clip]; None: the scorer's own bound c (a reward model's "
                               "normalizer clips to it), else sdk.reward.DEFAULT_CLIP")
    rate_limit_per_minute: int = Field(default=600, ge=1)
    max_request_bytes: int = Field(default=32 * 2**20, ge=1024)
    max_answer_bytes: int = Field(
        default=256 * 2**20, ge=2**20, description="the most one answer of the server may hold "
        "here (the router a round starts from, the queued reward queries with their images); "
        "a larger one is refused before it is held")
    # The server is one caller that relays every aligner's and auditor's queries (16 each
    # in progress at the server), so a member lets it have twice one identity's share.
    limits: RequestLimits = Field(
        default_factory=lambda: RequestLimits(per_identity=32), description="requests in "
        "progress per calling identity (the server, an auditor), without credentials, and "
        "threads; beyond: 429")
    max_image_side: int = Field(default=DEFAULT_MAX_IMAGE_SIDE, ge=16, le=16384,
                                description="a reward-query image declaring a longer side is "
                                "refused before decoding; one within it but larger than the "
                                "model's input size is scaled down to it")
    decoded_cache_bytes: int = Field(default=256 * 2**20, ge=0, description="memory for "
                                     "decoded query images (RGB bytes, least recently used "
                                     "dropped first)")
    max_clock_skew_s: float = Field(default=300.0, gt=0)
    retention: Retention = Field(default_factory=Retention, description="days cached query "
                                 "images and the query log are kept")
    run_rounds: bool = Field(default=True, description="take part in router rounds")
    poll_interval_s: float = Field(default=0.5, gt=0)
    long_poll_s: float = Field(default=2.0, ge=0, le=30, description="how long the server may "
                               "hold a work-discovery (GET /v1/work) or stage-input request "
                               "until there is something (0: poll every poll_interval_s)")
    retry_max_s: float = Field(default=5.0, gt=0, description="cap of the exponential backoff "
                               "between retries (a refusal's Retry-After is waited as it asks)")
    request_timeout_s: float = Field(default=60.0, gt=0)

    def reward_runtime(self) -> Runtime:
        """The reward model's device and dtype, as the sdk's :class:`~sdk.models.Runtime`."""
        from sdk.models import Runtime  # torch only when a reward model is loaded

        return Runtime(device=self.device, dtype=self.dtype)
