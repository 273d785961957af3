"""The server's retention purge: cached images, answered reward-query rows and audit rows older
than the ``retention`` settings say; nothing an open round or a pending query still needs."""

from __future__ import annotations

from sdk.storage import Retention
from server_app._store import Store

__all__ = ["purge_server"]


def purge_server(store: Store, retention: Retention, now: float | None = None) -> dict[str, int]:
    """Delete what is past its window; returns the rows removed per kind."""
    images = store.delete("DELETE FROM images WHERE stored_at < ?",
                          (retention.cutoff(retention.images_days, now),))
    # Marks of images the server no longer holds: the next query sends the bytes again.
    store.delete("DELETE FROM client_images WHERE sha256 NOT IN (SELECT sha256 FROM images)")
    queries = store.delete("DELETE FROM reward_queries WHERE status != 'pending' AND "
                           "created_at < ?", (retention.cutoff(retention.queries_days, now),))
    # An open round's records stay, however old: its audit trail is still being written.
    audit = store.delete(
        "DELETE FROM audit WHERE ts < ? AND COALESCE(json_extract(detail, '$.round_id') IN "
        "(SELECT round_id FROM rounds WHERE status = 'open'), 0) = 0",
        (retention.cutoff(retention.audit_days, now),))
    return {"images": images, "reward queries": queries, "audit rows": audit}
