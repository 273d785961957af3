"""What each member has given so far, as the operator sees it beside its roster entry: the
reward items the server asked of it (what its site policy's ``reward_budget`` counts) and the
client-level DP epsilon of the finished rounds its update went into."""

from __future__ import annotations

import time

from sdk.secagg import composed_epsilon
from sdk.wire import RoundInfo
from server_app._store import Store

__all__ = ["MemberUsage", "dp_terms_by_member", "epsilon_by_member"]

DAY_S = 86_400.0


def dp_terms_by_member(rounds: list[RoundInfo]) -> dict[str, list[tuple[float, float, float]]]:
    """Per client id, (noise multiplier, sample rate, delta) of each finished DP round its
    update went into: a participant that neither refused nor dropped out."""
    terms: dict[str, list[tuple[float, float, float]]] = {}
    for info in rounds:
        if info.status != "finished" or info.dp is None:
            continue
        left = set(info.dropouts) | {r.client_id for r in info.refusals}
        for client_id in info.participants:
            if client_id not in left:
                terms.setdefault(client_id, []).append(
                    (info.dp.noise_multiplier, info.dp.sample_rate, info.dp.delta))
    return terms


def epsilon_by_member(rounds: list[RoundInfo]) -> dict[str, float]:
    """Per client id, the composed epsilon of its DP rounds (``dp_terms_by_member``) at the
    smallest delta among them: the same accountant as a round's own ``dp.epsilon_total``,
    restricted to that member."""
    return {c: composed_epsilon([(z, q) for z, q, _ in t], min(d for _, _, d in t))
            for c, t in dp_terms_by_member(rounds).items()}


class MemberUsage:
    """The per-member usage figures of one listing (read once, looked up per member)."""

    def __init__(self, store: Store, dp_rounds: list[RoundInfo]) -> None:
        """``dp_rounds``: the finished DP rounds (others count for nothing here)."""
        self.items = store.reward_items_since(time.time() - DAY_S)
        self.epsilon = epsilon_by_member(dp_rounds)
        self.clip = {c.client_id: c.clip_bound for c in store.clients(None)}

    def of(self, client_id: str | None) -> dict[str, object]:
        """The MemberInfo fields of ``client_id`` (none known for an unenrolled name)."""
        if client_id is None:
            return {}
        return {"clip_bound": self.clip.get(client_id),
                "reward_items_24h": self.items.get(client_id, 0),
                "epsilon_spent": self.epsilon.get(client_id)}
