"""What the server records about a round beside its protocol state: the DP terms and their
accounted cost, and the members whose site policy refused it."""

from __future__ import annotations

from sdk.rounds import RoundKind
from sdk.secagg import composed_epsilon
from sdk.wire import DPAccount, DPTerms, Refusal, RoundSpec
from server_app._store import Store

__all__ = ["RoundRecords"]


class RoundRecords:
    """DP accounting and refusals of the rounds in ``store``; the refusers of live rounds are
    cached (every stage close asks who is still expected). Not thread-safe by itself: the
    round manager calls the cache under its lock."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._refusers: dict[int, set[str]] = {}

    @staticmethod
    def dp_terms(kind: RoundKind, spec: RoundSpec) -> tuple[DPTerms, float] | None:
        """A new round's DP terms and its own epsilon (None without DP, or with params its
        kind refuses: creating its server half then fails the round with the reason). Slow
        the first time (opacus): call it outside the round lock."""
        try:
            dp = kind.privacy(spec).dp
        except (ValueError, KeyError, RuntimeError):
            return None
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
            total = composed_epsilon([(t["noise_multiplier"], t["sample_rate"])
                                      for t in self.store.finished_dp(round_id)], terms["delta"])
        return DPAccount(**terms, epsilon=epsilon, epsilon_total=total)

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
                r["client_id"] for r in self.store.refusals(round_id)}
        return found

    def refusals(self, round_id: int) -> list[Refusal]:
        """The round's refusals, oldest first."""
        return [Refusal.model_validate(r) for r in self.store.refusals(round_id)]

    def forget(self, round_id: int) -> None:
        """An ended round: drop its cached refusers (they stay in the store)."""
        self._refusers.pop(round_id, None)
