"""The member's retention purge: cached query images and query-log rows older than the
``retention`` settings say; never a row inside the reward budget's window (the budget counts
it), and never a round's secrets or the DP ledger (those follow the rounds, not a calendar)."""

from __future__ import annotations

import time

from client_app._policy import SitePolicy
from client_app._store import ClientStore
from sdk.storage import DAY_S, Retention

__all__ = ["purge_client"]


def purge_client(store: ClientStore, retention: Retention, policy: SitePolicy,
                 now: float | None = None) -> dict[str, int]:
    """Delete what is past its window; returns the rows removed per kind."""
    current = time.time() if now is None else now
    images = store.delete("DELETE FROM images WHERE stored_at < ?",
                          (retention.cutoff(retention.images_days, current),))
    # The query log is both this site's reward-query rows and its audit of what it answered
    # (hashes only): it is kept for the longer of the two windows.
    keep_s = max(retention.queries_days * DAY_S, retention.audit_days * DAY_S, policy.window_s)
    queries = store.delete("DELETE FROM query_audit WHERE ts < ?", (current - keep_s,))
    return {"images": images, "query log rows": queries}
