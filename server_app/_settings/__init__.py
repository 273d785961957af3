"""Server configuration: a TOML/JSON file plus ``FEDMOR_SERVER_*`` environment variables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator
from pydantic_settings import SettingsConfigDict

from sdk.serving import AppHardening, RequestLimits, load_settings
from sdk.storage import Retention
from sdk.wire import AlignerRequest, ConsortiumRouterConfig
from server_app._settings._audit import AuditSettings, CaptureSettings
from server_app._settings._console import ConsoleSettings

__all__ = ["AlignmentSettings", "ServerSettings", "load_settings"]


class AlignmentSettings(BaseModel):
    """The reward service for the aligner role (``POST /v1/rewards``): the online router and
    the reward rules. With a ``[router]`` section declared, its encoder, router and heads are
    the ones used here (leave ``encoder``, ``router`` and ``members`` out); without one, these
    three are validated against ``sdk.router``'s ``HashingEncoderConfig`` and ``RouterConfig``
    when the service first builds its pipeline (torch is imported only then)."""

    model_config = ConfigDict(extra="forbid")

    members: list[str] | None = Field(
        default=None, description="roster names in the router's output order (default: every "
        "enrolled member, oldest first)")
    encoder: dict[str, Any] = Field(default_factory=dict, description="HashingEncoderConfig")
    router: dict[str, Any] = Field(default_factory=dict, description="RouterConfig")
    online: dict[str, Any] = Field(
        default_factory=lambda: {"nu": 0.01, "lr": 0.01},
        description="NeuralTSConfig of the online phase (sdk.alignment.ONLINE_ROUTER_CONFIG)")
    selection_options: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="keyword arguments per selection method, e.g. "
        '{"random": {"seed": 1}} (the router-based ones get the router)')
    invalid_choice_reward: float | None = Field(
        default=None, description="reward of a multiple-choice answer naming no option (asked "
        "of no member); None: the rule is off")
    empty_reward: float = Field(default=-3.0, description="reward of an empty completion "
                                "(asked of no member)")
    failure_reward: float = Field(default=-3.0, description="reward of an item whose member "
                                  "timed out or refused (counted and reported)")
    clip: float = Field(default=3.0, gt=0, description="the bound of the rewards the aligner "
                        "receives: a member's score outside [-clip, clip] fails its item "
                        "(failure_reward, counted), never clipped")
    reveal_judges: bool = Field(default=False, description="return the judging member's id "
                                "per item (which member judged a response is consortium-"
                                "internal by default)")
    max_items: int = Field(default=256, ge=1, le=AlignerRequest.MAX_ITEMS,
                           description="items per request (the broker splits a member's "
                           "share of a batch at sdk.wire.RewardRequest.MAX_ITEMS)")
    max_requests_per_minute: int = Field(default=600, ge=1, description="per aligner")
    image_cache_items: int = Field(default=4096, ge=1)
    image_cache_bytes: int = Field(default=256 * 2**20, ge=1024)

    @model_validator(mode="after")
    def _fixed_rewards_within_the_clip(self) -> AlignmentSettings:
        # The server refuses (fails) a reward outside [-clip, clip] instead of clipping it, so
        # the rewards it gives without asking a member must lie inside.
        fixed = {"empty_reward": self.empty_reward, "failure_reward": self.failure_reward,
                 "invalid_choice_reward": self.invalid_choice_reward}
        for name, value in fixed.items():
            if value is not None and not -self.clip <= value <= self.clip:
                raise ValueError(f"alignment.{name} = {value:g} lies outside [-clip, clip] "
                                 f"(alignment.clip = {self.clip:g}): set it inside, or raise "
                                 "alignment.clip")
        return self


class ServerSettings(AppHardening):
    """Everything the consortium server needs; every field has a working default."""

    model_config = SettingsConfigDict(env_prefix="FEDMOR_SERVER_", extra="forbid")

    db_path: Path = Field(default=Path("fedmor-server/server.db"), description="SQLite store")
    identity_key: Path = Field(default=Path("fedmor-server/identity.pem"),
                               description="server Ed25519 key (created if missing)")
    host: str = "127.0.0.1"
    port: int = Field(default=8443, ge=0, le=65535)
    tls_cert: Path | None = Field(default=None, description="PEM certificate chain (HTTPS)")
    tls_key: Path | None = Field(default=None, description="PEM private key of tls_cert")
    tls_ca: Path | None = Field(default=None,
                                description="CA bundle that signs client apps' certificates")
    require_client_cert: bool = Field(
        default=False, description="mutual TLS: refuse every connection (members, operator, "
        "aligner) without a client certificate signed by tls_client_ca")
    tls_client_ca: Path | None = Field(default=None, description="CA bundle that signs the "
                                       "callers' client certificates (default: tls_ca)")
    roster_file: Path | None = Field(default=None, description="JSON roster loaded at start")
    admin_token: SecretStr | None = Field(default=None,
                                          description="bearer token for admin endpoints")
    max_request_bytes: int = Field(default=64 * 2**20, ge=1024)
    max_clock_skew_s: float = Field(default=300.0, gt=0)
    stage_deadline_s: float = Field(default=120.0, gt=0)
    tick_interval_s: float = Field(default=1.0, gt=0)
    reward_timeout_s: float = Field(
        default=60.0, gt=0, description="how long one reward query may take, its waits for a "
        "free slot (reward_concurrency_per_member) and its resends after a member's 429 "
        "included; then its items get alignment.failure_reward")
    reward_poll_s: float = Field(
        default=1.0, gt=0, description="how often a waiting pull-mode query re-reads the "
        "store when nothing woke it: the member's answer through this server wakes it at "
        "once, so this is only the fallback")
    # A member app counts the server as one identity (its limits.per_identity, 32 by default),
    # and every aligner's and auditor's query reaches it under that identity: staying below
    # the cap keeps the member's busy refusals (each answered by a resend after Retry-After) rare.
    reward_concurrency_per_member: int = Field(
        default=8, ge=1, le=1024, description="push-mode reward queries in flight to one "
        "member at once; the others wait their turn within reward_timeout_s. Keep it below "
        "the members' limits.per_identity: beyond, a member answers 429 and the query is sent "
        "again after its Retry-After")
    allow_http_reward_urls: bool = Field(default=False, description="accept plain-http push "
                                         "URLs at enrollment (local tests only)")
    allow_private_reward_urls: bool = Field(
        default=False, description="accept push URLs on localhost or loopback, link-local, "
        "private or reserved addresses at enrollment (members on the server's own network)")
    # Scores are z-scores of each member's own training scores, so c = 3 (sdk.reward's
    # default normalizer) keeps 99.7% of a Gaussian and 10 already keeps a 10-sigma tail
    # that no normalized score reaches; the cap means no member's answers can outweigh a
    # c = 1 member more than tenfold (the wire accepts up to 1e6).
    max_clip_bound: float = Field(
        default=10.0, gt=0, le=1e6, allow_inf_nan=False, description="the largest clip bound "
        "a member may announce at enrollment or later (POST /v1/identity/clip-bound); a larger "
        "one is refused (422)")
    router: ConsortiumRouterConfig | None = Field(
        default=None, description="the consortium's router configuration (encoder, router, "
        "heads, schedule), declared once: rounds take their length from it, members fetch it "
        "(GET /v1/router/config); changing it needs a new lineage (fedmor router lineage). "
        "None: rounds give their length (tests, benchmarks)")
    alignment: AlignmentSettings = Field(default_factory=AlignmentSettings)
    retention: Retention = Field(default_factory=Retention, description="days cached images, "
                                 "answered reward queries and audit rows are kept")
    capture: CaptureSettings = Field(default_factory=CaptureSettings)
    audit: AuditSettings = Field(default_factory=AuditSettings)
    console: ConsoleSettings = Field(default_factory=ConsoleSettings)
    preload_dp_accountant: bool = Field(
        default=True, description="import the DP accountant (opacus, with torch) in the "
        "background when the server starts, so the first DP round's creation does not wait "
        "for it; false saves the accountant's memory for a consortium without DP rounds")
    work_recheck_s: float = Field(default=0.25, gt=0, description="held requests (GET "
                                  "/v1/work) learn this often of writes to the store by another "
                                  "process (a broker queuing reward queries)")
    limits: RequestLimits = Field(default_factory=RequestLimits, description="requests and "
                                  "long polls in progress per identity, and threads")

    @model_validator(mode="after")
    def _mutual_tls_needs_a_ca(self) -> ServerSettings:
        if self.require_client_cert and (self.tls_cert is None or self.client_ca is None):
            raise ValueError("require_client_cert needs tls_cert/tls_key (HTTPS) and "
                             "tls_client_ca (or tls_ca): the CA that signs the callers' "
                             "certificates")
        return self

    @model_validator(mode="after")
    def _router_declared_once(self) -> ServerSettings:
        """With ``[router]`` declared, the alignment service and the capture follow it: their
        own encoder, router and member lists stay empty (or repeat it exactly)."""
        if self.router is None:
            return self
        declared: dict[str, Any] = {"encoder": self.router.encoder.model_dump(),
                                    "router": self.router.router.model_dump(),
                                    "members": self.router.heads}
        for key, value in declared.items():
            given = getattr(self.alignment, key)
            if given and (given if key == "members" else {**value, **given}) != value:
                raise ValueError(f"alignment.{key} differs from [router]: declare the router "
                                 f"once, in [router] (leave alignment.{key} out)")
        self.alignment = self.alignment.model_copy(update=declared)
        return self

    @property
    def client_ca(self) -> Path | None:
        """The CA that signs client certificates under mutual TLS."""
        return self.tls_client_ca or self.tls_ca
