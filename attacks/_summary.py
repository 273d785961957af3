"""The one-screen summary a privacy officer reads first: per member, one verdict per artefact
kind (leak / inconclusive / no measurable leak), in words, with what to do about it.

Each attack result names the members it concerns and the artefact it attacked (``members`` and
``artefact`` on the report rows); the summary takes, per member and artefact, the worst verdict
of every setting that attacked it: one leaking setting is a leak, whatever the others say.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ARTEFACT_KINDS",
    "ArtefactVerdict",
    "AuditSummary",
    "MemberSummary",
    "VerdictLevel",
    "summarize",
    "verdict_level",
]

VerdictLevel = Literal["leak", "inconclusive", "no measurable leak"]
"""A verdict in words: ``leak``, ``inconclusive`` or ``no measurable leak``."""
_RANK: dict[VerdictLevel, int] = {"no measurable leak": 0, "inconclusive": 1, "leak": 2}
ALL_MEMBERS = "all members"

# Artefact kinds, in the order the summary lists them, each with what to do when it leaks.
ARTEFACT_KINDS: dict[str, str] = {
    "reward model (raw scores)": "train the reward model with record-level DP-SGD at epsilon "
    "<= 1 (fedmor rm train --dp-epsilon 1) and keep the checkpoint inside the member",
    "reward answers (/v1/reward)": "train with DP-SGD at epsilon <= 1 (fedmor rm train "
    "--dp-epsilon 1) and lower the query budget: normalization and clipping do not hide a "
    "ranking",
    "router update, plaintext (no secure aggregation)": "turn secure aggregation on for router "
    "rounds and raise the minimum samples per update",
    "router aggregate (published)": "raise the minimum samples per update and the "
    "members per round, or add client-level DP noise to router updates",
    "reward-query log (captured)": "train with DP-SGD at epsilon <= 1, lower the query "
    "budget, and keep the server's capture retention short",
    "masked input (secure aggregation)": "the masks do not hide the input: check the SecAgg "
    "implementation and stop sending until it is fixed",
    "unmasking shares (secure aggregation)": "the server could rebuild both masks of a member: "
    "raise the SecAgg threshold and check dropout handling",
    "membership inference": "train with DP-SGD at epsilon <= 1",
    "gradient inversion": "turn secure aggregation on and raise the minimum samples per update",
}
"""Each artefact kind the summary judges, with what to do when it leaks."""
_INCONCLUSIVE = (
    "inconclusive: more samples needed for a verdict (audit more pairs with --max-pairs, or "
    "capture more rounds)"
)
_NO_LEAK = "no action on this evidence (this attack, this sample size; not a proof of privacy)"


def verdict_level(verdict: str) -> VerdictLevel:
    """The class of a verdict sentence (reports word them "leaks: ...", "inconclusive: ...",
    anything else is within the baselines or the null band)."""
    if verdict.startswith("leaks"):
        return "leak"
    if verdict.startswith("inconclusive"):
        return "inconclusive"
    return "no measurable leak"


class ArtefactVerdict(BaseModel):
    """One artefact kind of one member: its worst verdict, the settings that decided it and
    what to do."""

    model_config = ConfigDict(extra="forbid")

    artefact: str
    level: VerdictLevel
    settings: list[str] = Field(description="the settings with this (worst) level")
    n_settings: int = Field(ge=1, description="settings that attacked this artefact")
    advice: str


class MemberSummary(BaseModel):
    """Every attacked artefact kind of one member."""

    model_config = ConfigDict(extra="forbid")

    member: str
    verdicts: list[ArtefactVerdict]


class AuditSummary(BaseModel):
    """The summary block of report.json (and of the top of report.html)."""

    model_config = ConfigDict(extra="forbid")

    members: list[MemberSummary] = Field(default_factory=list)


def _advice(artefact: str, level: VerdictLevel) -> str:
    if level == "leak":
        return ARTEFACT_KINDS.get(artefact, "protect this artefact (DP or secure aggregation)")
    return _INCONCLUSIVE if level == "inconclusive" else _NO_LEAK


def summarize(rows: Iterable[tuple[Sequence[str], str, str, str]]) -> AuditSummary:
    """The summary of ``(members, artefact, setting label, verdict)`` rows; a row with no
    members concerns every member ("all members")."""
    grouped: dict[str, dict[str, list[tuple[VerdictLevel, str]]]] = {}
    for members, artefact, label, verdict in rows:
        for member in members or (ALL_MEMBERS,):
            grouped.setdefault(member, {}).setdefault(artefact, []).append(
                (verdict_level(verdict), label)
            )
    order = list(ARTEFACT_KINDS)
    out = []
    for member in sorted(grouped, key=lambda m: (m == ALL_MEMBERS, m)):
        verdicts = []
        kinds = grouped[member]
        for artefact in sorted(kinds, key=lambda a: order.index(a) if a in order else len(order)):
            found = kinds[artefact]
            worst = max((lv for lv, _ in found), key=_RANK.__getitem__)
            verdicts.append(
                ArtefactVerdict(
                    artefact=artefact,
                    level=worst,
                    settings=[label for lv, label in found if lv == worst],
                    n_settings=len(found),
                    advice=_advice(artefact, worst),
                )
            )
        out.append(MemberSummary(member=member, verdicts=verdicts))
    return AuditSummary(members=out)
