"""What the server records about a round beside its protocol state: the DP terms and their
accounted cost, the members whose site policy refused it (or who reported that they abandoned
it), and who left the round where and why."""

from __future__ import annotations

from sdk.rounds import RoundTerms
from sdk.secagg import composed_epsilon
from sdk.wire import DPAccount, DPTerms, Refusal
from server_app._store import Store

__all__ = ["WHO_LEFT", "RoundRecords", "StageWalk"]

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
