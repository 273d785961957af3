"""What the server knows of a round beside its store rows, and what it says about it.

A live round's decoded spec, server half and closed-stage broadcasts (``RoundLookup``): a
round's spec never changes once written, nor does a closed stage's broadcast, so both are
decoded once and kept while the round is live, and only the mutable columns (status, stage
index, deadline clock) are read from the store each time, since a secure round makes hundreds
of such reads. What is recorded beside its protocol state (``RoundRecords``): the DP terms and
their accounted cost, the members whose site policy refused it (or who reported that they
abandoned it), and who left the round where and why. Its status (``RoundStatus``, the
``RoundInfo`` view), read only from the store, the lookup and the records, so that status polls
never take the round lock.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from sdk.rounds import ROUND_KINDS, RoundTerms, ServerRound
from sdk.secagg import composed_epsilon
from sdk.serving import NotFoundError
from sdk.wire import DPAccount, DPTerms, Refusal, RoundInfo, RoundSpec
from server_app._store import RoundRow, Store

__all__ = ["WHO_LEFT", "RoundLookup", "RoundRecords", "RoundStatus", "StageWalk", "started"]


def started(row: RoundRow) -> bool:
    """Whether a ``Store.round_row`` belongs to a round that started (its spec was written;
    a round that failed at creation keeps the empty ``{}``)."""
    return row.spec not in ("", "{}")


class RoundLookup:
    """The live rounds' server halves and cached specs and closures; not thread-safe by
    itself (the round manager calls it under its lock, or for reads that tolerate a race)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.live: dict[int, ServerRound] = {}
        self._specs: dict[int, RoundSpec] = {}  # immutable once started: parsed once
        # Live rounds' closed-stage broadcasts, decoded once: a closure never changes.
        self.closures: dict[tuple[int, str], dict[str, dict[str, Any]]] = {}

    def server(self, round_id: int) -> tuple[RoundRow, ServerRound | None]:
        """The round's row (spec undecoded) and live server half; 404 unless it started."""
        row = self.store.round_row(round_id)
        if row is None:
            raise NotFoundError(f"round {round_id} does not exist")
        if not started(row):
            raise NotFoundError(f"round {round_id} was never started")
        return row, self.live.get(round_id)

    def spec(self, round_id: int, row: RoundRow | None = None) -> RoundSpec:
        """The round's spec (``row``: its ``Store.round_row`` if the caller has it)."""
        spec = self._specs.get(round_id)
        if spec is None:
            if row is None:
                row = self.server(round_id)[0]
            spec = self._specs[round_id] = RoundSpec.model_validate_json(row.spec)
        return spec

    def stages(self, round_id: int, row: RoundRow) -> list[str]:
        """The round's stage names: its kind's."""
        return list(ROUND_KINDS[self.spec(round_id, row).kind].stages)

    def closure(self, round_id: int, stage: str) -> dict[str, dict[str, Any]] | None:
        """``Store.closure`` (read-only; visible once the close committed), cached while the
        round is live: every submission and stage input reads one, all clients' JSON at once."""
        closed = self.closures.get((round_id, stage))
        if closed is None:
            closed = self.store.closure(round_id, stage)
            if closed is not None and round_id in self.live:
                self.closures[(round_id, stage)] = closed
        return closed

    def forget(self, round_id: int) -> None:
        """An ended round: drop its server half and closures (they stay in the store)."""
        self.live.pop(round_id, None)
        for key in [k for k in list(self.closures) if k[0] == round_id]:  # ``info`` may add
            self.closures.pop(key, None)


WHO_LEFT = "; who left: "
"""Joins a failed round's cause and the members who left it in the stored failure text (a
member's view of the round cuts the text there: other members' causes are not its business)."""
NO_ANSWER = "no answer by the stage deadline"
_REASON_CHARS = 300  # of one member's reason in the failure text: the round view stays readable

StageWalk = list[tuple[str, set[str], bool]]
"""A round's stages up to its current one: (stage, members that sent it, closed)."""


def _why(refusal: Refusal | None, missed: str) -> str:
    """One member's cause in the operator's words: what it reported, else ``missed``."""
    if refusal is None:
        return missed
    if refusal.reason == "abandoned":
        return refusal.detail or "abandoned (no reason given)"
    if refusal.reason == "revoked":
        return f"revoked: {refusal.detail}" if refusal.detail else "revoked"
    return f"site policy refused ({refusal.reason}): {refusal.detail}"


class RoundRecords:
    """DP accounting and refusals of the rounds in ``store``; the refusers of live rounds are
    cached (every stage close asks who is still expected). Not thread-safe by itself: the
    round manager calls the cache under its lock."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._refusers: dict[int, set[str]] = {}

    @staticmethod
    def dp_terms(terms: RoundTerms) -> tuple[DPTerms, float] | None:
        """A new round's DP terms and its own epsilon (None without DP), from its parsed
        terms. Slow the first time (opacus): call it outside the round lock."""
        dp = terms.privacy.dp
        if dp is None:
            return None
        return dp, composed_epsilon([(dp.noise_multiplier, dp.sample_rate)], dp.delta)

    def dp_account(self, round_id: int, status: str) -> DPAccount | None:
        """A DP round's terms and cost; the composed total once it finished (every finished
        DP round up to it, at its delta)."""
        found = self.store.round_dp(round_id)
        if found is None:
            return None
        terms, epsilon = found
        total = None
        if status == "finished":
            total = composed_epsilon([(t.noise_multiplier, t.sample_rate)
                                      for t in self.store.finished_dp(round_id)], terms.delta)
        return DPAccount(**terms.model_dump(), epsilon=epsilon, epsilon_total=total)

    def refuse(self, round_id: int, client_id: str, reason: str, detail: str) -> None:
        """Record a refusal (the first one per member stands) and audit it."""
        if self.store.put_refusal(round_id, client_id, reason, detail):
            self.store.audit(client_id, "round_refused", round_id=round_id, reason=reason)
            self.refusers(round_id).add(client_id)

    def refusers(self, round_id: int) -> set[str]:
        """The members that refused the round."""
        found = self._refusers.get(round_id)
        if found is None:
            found = self._refusers[round_id] = {
                r.client_id for r in self.store.refusals(round_id)}
        return found

    def refusals(self, round_id: int) -> list[Refusal]:
        """The round's refusals, oldest first."""
        return self.store.refusals(round_id)

    def name_of(self, client_id: str) -> str:
        """A member's roster name (a revoked one's too); its id when none is known."""
        row = self.store.client(client_id)
        if row is not None:
            return row.name
        for revoked in self.store.revocations():
            if revoked.client_id == client_id:
                return revoked.name
        return client_id

    def failures(self, refusals: list[Refusal], participants: list[str], walk: StageWalk, *,
                 ended: bool, cut: str = NO_ANSWER) -> list[dict[str, str]]:
        """Who left the round at which stage and why (``sdk.wire.RoundFailure`` fields), from
        ``walk``: at a closed stage (or the last one of an ``ended`` round) every expected
        member that sent nothing, at the open stage only those that reported leaving. A member
        that reported nothing missed the deadline (``cut`` at an ended round's last stage);
        ``refusals``: the round's, what members reported."""
        reported = {r.client_id: r for r in refusals}
        expected, out = set(participants), []
        last = walk[-1][0] if walk else ""
        for stage, sent, closed in walk:
            gone = expected - sent
            if not (closed or ended):
                gone &= set(reported)
            out += [(cid, stage, NO_ANSWER if closed else cut) for cid in sorted(gone)]
            expected -= gone
            if not closed:
                break
        # Left after sending the last stage it was asked for (revoked, say).
        out += [(cid, last, NO_ANSWER) for cid in sorted(set(reported) & expected)]
        return [{"member": self.name_of(cid), "client_id": cid, "stage": stage,
                 "reason": self._known(cid, _why(reported.get(cid), missed), missed)}
                for cid, stage, missed in out]

    def _known(self, client_id: str, reason: str, missed: str) -> str:
        """``reason``, with what kept the member from starting where it gave no answer and
        reported that problem (``POST /v1/identity/status``): the cause, not just the silence."""
        if reason != missed:
            return reason
        row = self.store.client(client_id)
        problem = None if row is None else row.problem
        return f"{reason} ({problem})" if problem else reason

    @staticmethod
    def failure_text(cause: str, failures: list[dict[str, str]]) -> str:
        """A failed round's text: ``cause``, then each member that left and why."""
        if not failures:
            return cause
        return cause + WHO_LEFT + "; ".join(
            f"{f['member']} at {f['stage']}: {f['reason'][:_REASON_CHARS]}" for f in failures)

    def forget(self, round_id: int) -> None:
        """An ended round: drop its cached refusers (they stay in the store)."""
        self._refusers.pop(round_id, None)


class RoundStatus:
    """Rounds' status views over ``store``, ``lookup`` (the live rounds) and ``records``."""

    def __init__(self, store: Store, lookup: RoundLookup, records: RoundRecords) -> None:
        self.store = store
        self._rounds = lookup
        self.records = records

    def info(self, round_id: int) -> RoundInfo:
        """Status of one round, read without the round lock (one stage close is one
        transaction: a poll sees the state before or after it)."""
        row, _ = self._rounds.server(round_id)
        spec = self._rounds.spec(round_id, row)
        stages = self._rounds.stages(round_id, row)
        walk = self._walk(round_id, row, stages)
        refusals = self.records.refusals(round_id)
        dropouts: set[str] = set()
        expected = set(spec.participants)
        for _, sent, closed in walk:
            if not closed:
                break
            dropouts |= expected - sent
            expected &= sent
        return RoundInfo.of(
            spec, status=row.status,
            stage=stages[row.stage_index] if row.status == "open" else None,
            stages=stages, dropouts=sorted(dropouts), router_version=row.router_version,
            error=row.error, created_at=row.created_at, finished_at=row.finished_at,
            refusals=refusals, failures=self._failures(refusals, row, spec, walk),
            dp=self.records.dp_account(round_id, row.status),
            captured=row.captured, resumed=row.resumed)

    def failure_text(self, round_id: int, cause: str) -> str:
        """A failing round's text: ``cause`` and who left it, where and why."""
        try:
            row, _ = self._rounds.server(round_id)
            spec = self._rounds.spec(round_id, row)
            walk = self._walk(round_id, replace(row, status="failed"),
                              self._rounds.stages(round_id, row))
            failures = self._failures(self.records.refusals(round_id), row, spec, walk,
                                      ended_at=time.time())
        except (ValueError, KeyError, LookupError):  # a round that cannot be read: its cause
            return cause
        return self.records.failure_text(cause, failures)

    def _walk(self, round_id: int, row: RoundRow, stages: list[str]) -> StageWalk:
        """Who sent each stage up to the current one; the current open stage only where
        someone may be named there (the round ended, or a member reported leaving it)."""
        walk: StageWalk = []
        named = row.status != "open" or bool(self.records.refusers(round_id))
        for stage in stages[: row.stage_index + 1]:
            closed = self._rounds.closure(round_id, stage) is not None
            if not (closed or named):
                break
            walk.append((stage, self.store.submitted(round_id, stage), closed))
            if not closed:
                break
        return walk

    def _failures(self, refusals: list[Refusal], row: RoundRow, spec: RoundSpec,
                  walk: StageWalk, ended_at: float | None = None) -> list[dict[str, str]]:
        """Who left the round, where and why; ``ended_at``: the round is failing now."""
        ended_at = ended_at if ended_at is not None else row.finished_at
        ended = ended_at is not None and row.status != "finished"
        # A stage cut short (a cancel, a failed replay) did not wait for its deadline.
        waited = ended_at is not None and ended and \
            ended_at - row.stage_opened_at >= spec.stage_deadline_s
        return self.records.failures(
            refusals, spec.participants, walk, ended=ended,
            cut="no answer by the stage deadline" if waited or not ended
            else "no answer before the round ended")

    def list(self, status: str | None = None) -> list[RoundInfo]:
        """All rounds (that started), oldest first."""
        return [self.info(r.round_id) for r in self.store.round_rows(status) if started(r)]
