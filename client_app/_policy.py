"""The site policy: what this member lets leave its building, checked before it sends anything.

The consortium's operator opens rounds and the aligner sends reward queries; the member's own
client app decides which of them it takes part in. A round the policy refuses is reported to
the server with the rule that refused it (``POST /v1/rounds/{id}/refusal``) and never retried;
a reward query it refuses gets a 403 (push) or an error answer (pull).
"""

from __future__ import annotations

from collections import Counter

from pydantic import BaseModel, ConfigDict, Field, field_validator

from sdk.rounds import ROUND_KINDS, RoundFailed, RoundTerms
from sdk.secagg import composed_epsilon
from sdk.wire import DPTerms, RewardRequest, RoundInfo

__all__ = ["PolicyDenied", "PolicyRefused", "SitePolicy", "check_epsilon", "check_request",
           "check_round", "check_update", "describe_policy"]

_WINDOWS = {"hour": 3600.0, "day": 86_400.0}


class SitePolicy(BaseModel):
    """The ``policy`` section of a client's settings; the defaults are the safe choice."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    round_kinds: list[str] = Field(
        default_factory=lambda: ["router_secagg"],
        description="round kinds this site takes part in; rm_fedavg sends the update in the "
                    "clear")
    min_participants: int = Field(
        default=3, ge=1, description="fewest members a round may list: in a secure round of 2 "
                                     "each member learns the other's update from the sum")
    min_threshold: int = Field(
        default=3, ge=1, description="fewest survivors a masked aggregate may combine "
                                     "(SecAgg threshold, or min_clients if larger)")
    require_dp: bool = Field(default=False, description="refuse router rounds without "
                             "client-level DP (clipping and noise)")
    max_epsilon: float | None = Field(default=None, gt=0, description="this site's own "
                                      "epsilon budget over every DP round it takes part in "
                                      "(RDP accountant, at epsilon_delta); set, it also "
                                      "refuses rounds without DP")
    epsilon_delta: float = Field(default=1e-5, gt=0, lt=1, description="the delta at which "
                                 "the site accounts its epsilon")
    min_local_samples: int = Field(
        default=2, ge=1, description="fewest local pairs an update may be computed from: an "
                                     "update on one sample can be inverted to that sample")
    max_vector_length: int = Field(
        default=2**24, ge=1, description="the most parameters a round's update may have: the "
        "router it starts from is downloaded and trained here, so a larger round (a hostile "
        "server's, say) is refused before either")
    allow_captured_rounds: bool = Field(
        default=False, description="take part in rounds the server captures (RoundInfo."
        "captured: it keeps every message as received for the consortium's auditor); off "
        "until the site agreed to the audit, so no site is captured by a server setting alone")
    serve_rewards: bool = Field(default=True, description="answer reward queries at all")
    reward_budget: int = Field(default=100_000, ge=0, description="items each caller may have "
                               "scored per reward_window")
    reward_window: str = Field(default="day", pattern="^(hour|day)$",
                               description="the budget's window: hour or day (sliding)")
    max_items_per_request: int = Field(
        default=RewardRequest.MAX_ITEMS, ge=1, le=RewardRequest.MAX_ITEMS, description="items "
        "in one reward request (the wire's cap, at which the server's broker splits; lower: "
        "the server's larger requests to this site are refused)")
    max_items_per_prompt: int = Field(default=16, ge=1, description="responses to one "
                                      "(image, prompt) in one request")

    @field_validator("round_kinds")
    @classmethod
    def _known_kinds(cls, kinds: list[str]) -> list[str]:
        unknown = sorted(set(kinds) - set(ROUND_KINDS))
        if unknown:  # a typo would silently refuse every round of that kind
            raise ValueError(f"unknown round kind(s) {unknown}; known: {sorted(ROUND_KINDS)}")
        return kinds

    @property
    def window_s(self) -> float:
        """The reward budget's window in seconds."""
        return _WINDOWS[self.reward_window]


class PolicyRefused(RoundFailed):
    """The site policy refuses a round: ``reason`` names the rule, the message says it."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason, self.detail = reason, detail
        super().__init__(f"site policy refuses the round ({reason}): {detail}")


class PolicyDenied(PermissionError):
    """The site policy refuses a reward query (HTTP 403)."""


def check_round(policy: SitePolicy, info: RoundInfo) -> RoundTerms:
    """The round's terms (its params parsed once, by its kind, and its privacy); raises
    ``PolicyRefused`` unless ``policy`` allows taking part in the round (its kind and params,
    before any local update exists); params its kind refuses (a threshold that is not a
    majority of each member's share holders, say) are a refusal too, reason ``params``."""
    if info.kind not in policy.round_kinds:
        raise PolicyRefused("round_kind", f"kind {info.kind!r} is not among this site's "
                                          f"round_kinds {policy.round_kinds}")
    if info.vector_length > policy.max_vector_length:
        raise PolicyRefused("vector_length", f"the round's update has {info.vector_length} "
                                             f"parameters > max_vector_length "
                                             f"{policy.max_vector_length}")
    if len(info.participants) < policy.min_participants:
        raise PolicyRefused("participants", f"{len(info.participants)} participant(s) < "
                                            f"min_participants {policy.min_participants}")
    if info.captured and not policy.allow_captured_rounds:
        raise PolicyRefused("captured", "the server captures this round (keeps every message "
                                        "for its auditor) and this site has not agreed "
                                        "(allow_captured_rounds)")
    try:
        terms = ROUND_KINDS[info.kind].terms(info)
    except ValueError as exc:  # a hostile server's parameters too: refused before any reply
        raise PolicyRefused("params", str(exc)) from exc
    privacy = terms.privacy
    if privacy.masked and privacy.min_survivors < policy.min_threshold:
        raise PolicyRefused("threshold", f"an aggregate of {privacy.min_survivors} survivor(s) "
                                         f"could be accepted, min_threshold is "
                                         f"{policy.min_threshold}")
    if (policy.require_dp or policy.max_epsilon is not None) and privacy.dp is None:
        raise PolicyRefused("dp", "the round adds no differential-privacy noise and this site "
                                  "requires it (require_dp or max_epsilon)")
    return terms


def check_epsilon(policy: SitePolicy, spent: list[float], terms: DPTerms) -> float:
    """This site's epsilon (at ``policy.epsilon_delta``) after its earlier DP rounds (their
    noise multipliers, ``spent``) and this one; raises ``PolicyRefused`` past ``max_epsilon``.
    Every round counts as sampled (rate 1): the site knows it took part."""
    epsilon = composed_epsilon([(z, 1.0) for z in [*spent, terms.noise_multiplier]],
                               policy.epsilon_delta)
    if policy.max_epsilon is not None and epsilon > policy.max_epsilon:
        raise PolicyRefused("epsilon", f"taking part would bring this site's epsilon to "
                                       f"{epsilon:.3g} > max_epsilon {policy.max_epsilon:g} "
                                       f"(delta {policy.epsilon_delta:g})")
    return epsilon


def check_update(policy: SitePolicy, samples: float) -> None:
    """Raise ``PolicyRefused`` if a local update computed from ``samples`` pairs may not leave."""
    if samples < policy.min_local_samples:
        raise PolicyRefused("local_samples", f"the local update uses {samples:g} sample(s) < "
                                             f"min_local_samples {policy.min_local_samples}")


def check_request(policy: SitePolicy, keys: list[tuple[str, str]]) -> None:
    """Raise ``PolicyDenied`` unless a reward request of items with these (image sha256,
    prompt) keys may be scored."""
    if not policy.serve_rewards:
        raise PolicyDenied("this site does not serve reward queries (policy.serve_rewards)")
    if len(keys) > policy.max_items_per_request:
        raise PolicyDenied(f"{len(keys)} items > max_items_per_request "
                           f"{policy.max_items_per_request}")
    most = max(Counter(keys).values(), default=0)
    if most > policy.max_items_per_prompt:
        raise PolicyDenied(f"{most} responses to one (image, prompt) > max_items_per_prompt "
                           f"{policy.max_items_per_prompt}")


def describe_policy(policy: SitePolicy) -> str:
    """The effective policy in words, for a security review."""
    masked = "router_secagg" in policy.round_kinds
    plain = "rm_fedavg" in policy.round_kinds
    sends = []
    if masked:
        # The majority rule is the SecAgg+ client's own (sdk.secagg check_majority_threshold).
        sends.append(f"masked router updates (router_secagg) in rounds of >= "
                     f"{policy.min_participants} members with threshold >= "
                     f"{policy.min_threshold} and a majority of each member's share holders "
                     f"(2 x threshold > share holders)")
    if plain:
        sends.append(f"plain router updates (rm_fedavg, readable by the server) in rounds of "
                     f">= {policy.min_participants} members")
    others = [k for k in policy.round_kinds if k not in ("router_secagg", "rm_fedavg")]
    sends += [f"updates in {k} rounds" for k in others]
    dp_only = policy.require_dp or policy.max_epsilon is not None
    if sends:
        sends.append(f"each computed from >= {policy.min_local_samples} local samples"
                     + (", only with differential-privacy noise" if dp_only else ""))
    if policy.max_epsilon is not None:
        sends.append(f"until its DP rounds add up to epsilon {policy.max_epsilon:g} at delta "
                     f"{policy.epsilon_delta:g}")
    if sends:
        sends.append("also in rounds the server captures for the consortium's auditor"
                     if policy.allow_captured_rounds else
                     "only in rounds the server does not capture")
    never = [] if plain else ["plain (unmasked) updates"]
    if dp_only:
        never.append("updates without DP noise")
    if not policy.allow_captured_rounds:
        never.append("updates in captured rounds (kept by the server for its auditor)")
    lines = ["this site sends: " + ("; ".join(sends) if sends else "no router updates")]
    if never:
        lines.append("never: " + "; ".join(never))
    if policy.serve_rewards:
        lines.append(f"reward queries: answered with clipped scores, at most "
                     f"{policy.reward_budget} items per caller per {policy.reward_window}, "
                     f"<= {policy.max_items_per_request} items a request, <= "
                     f"{policy.max_items_per_prompt} responses per prompt")
    else:
        lines.append("reward queries: not served")
    return "\n".join(lines)
