"""The server store's reward path: the aligner's online router, the broker's images and which
member holds them, and the pull-mode query queue.

Rows come back as frozen dataclasses (``Row``), except an alignment step and a pending query,
which are the wire's ``AlignmentStep`` and ``PendingQuery`` as they stand: a row stays inside
the server, so only a row that is a reply as stored is worth a pydantic model.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from sdk.wire import AlignmentStep, PendingQuery, RewardAnswer, RewardItem
from server_app._store._base import Row, StoreBase

__all__ = ["OnlineRouterRow", "QueryRow", "QueuedQuery", "RewardTables"]


@dataclass(frozen=True)
class OnlineRouterRow(Row):
    """The aligner's online router of one selection method, as saved after its last update."""

    method: str
    router_version: int  # the router version it learned on
    run: str
    step: int | None
    last_loss: float | None
    state: bytes  # its torch state dict
    updated_at: float


@dataclass(frozen=True)
class QueuedQuery:
    """A pull-mode query as it was queued: its id and the bytes of its stored items, which are
    what the member fetches."""

    query_id: int
    size: int


@dataclass(frozen=True)
class QueryRow:
    """A pull-mode query as the broker and the answer route read it (its items stay stored:
    they may carry images)."""

    query_id: int
    client_id: str
    n_items: int
    answer: RewardAnswer | None  # None: still pending


class RewardTables(StoreBase):
    """What the reward broker and the online router keep."""

    images_bytes: int  # the image cache's bound, set by the store

    def save_online(self, method: str, router_version: int, run: str, step: int | None,
                    last_loss: float | None, state: bytes) -> None:
        """Keep the online router's state (durable before the feedback is acknowledged)."""
        self._write("INSERT OR REPLACE INTO online_router VALUES (?,?,?,?,?,?,?)",
                    (method, router_version, run, step, last_loss, state, time.time()))

    def online(self, method: str) -> OnlineRouterRow | None:
        """The saved online router of ``method``, or None."""
        return self._row(OnlineRouterRow, "SELECT * FROM online_router WHERE method=?",
                         (method,))

    def add_alignment_step(self, run: str, step: int, loss: float, reward: float | None,
                           kl: float | None, feedback: float | None) -> None:
        """Record one applied feedback step (a repeated step keeps its first record)."""
        self._write("INSERT OR IGNORE INTO alignment_steps VALUES (?,?,?,?,?,?,?)",
                    (run, step, loss, reward, kl, feedback, time.time()))

    def alignment_steps(self, limit: int = 2000) -> list[AlignmentStep]:
        """The latest ``limit`` applied feedback steps, oldest first."""
        rows = self._all("SELECT * FROM alignment_steps ORDER BY at DESC, step DESC LIMIT ?",
                         (limit,))
        return [AlignmentStep.model_validate(dict(r)) for r in reversed(rows)]

    # -- reward broker -------------------------------------------------------------------------
    def put_images(self, images: dict[str, bytes]) -> None:
        """Keep images the broker may need to resend (one transaction: one fsync)."""
        with self.transaction():
            fresh = [(h, d) for h, d in images.items()
                     if self._one("SELECT 1 FROM images WHERE sha256=?", (h,)) is None]
            self._db.executemany("INSERT OR IGNORE INTO images(sha256, data, stored_at) "
                                 "VALUES (?,?,?)", [(h, d, time.time()) for h, d in fresh])
            if fresh:
                self.keep_newest("images", self.images_bytes)

    def image(self, sha256: str) -> bytes | None:
        """An image by hash, or None."""
        row = self._one("SELECT data FROM images WHERE sha256=?", (sha256,))
        return None if row is None else bytes(row["data"])

    def mark_cached(self, client_id: str, hashes: list[str]) -> None:
        """Remember that a client holds these images (no fsync when it already did)."""
        with self.transaction():
            self._db.executemany("INSERT OR IGNORE INTO client_images VALUES (?,?)",
                                 [(client_id, h) for h in hashes])

    def forget_cached(self, client_id: str, hashes: list[str]) -> None:
        """The client says it lacks these images after all."""
        with self.transaction():
            self._db.executemany("DELETE FROM client_images WHERE client_id=? AND sha256=?",
                                 [(client_id, h) for h in hashes])

    def cached(self, client_id: str, among: list[str] | None = None) -> set[str]:
        """Hashes of the images a client is known to hold (only those in ``among`` if given:
        a query looks up its own images, not the client's whole cache)."""
        if among is None:
            rows = self._all("SELECT sha256 FROM client_images WHERE client_id=?", (client_id,))
        else:
            marks = ",".join("?" * len(among))
            rows = self._all(f"SELECT sha256 FROM client_images WHERE client_id=? AND sha256 IN "
                             f"({marks})", (client_id, *among))
        return {r["sha256"] for r in rows}

    def queue_query(self, client_id: str, items: list[RewardItem]) -> QueuedQuery:
        """Queue a pull-mode reward query (its items as the member will fetch them), encoded
        once."""
        stored = json.dumps([item.model_dump(mode="json") for item in items])
        query_id = self._write("INSERT INTO reward_queries(client_id, items, status, created_at) "
                               "VALUES (?,?,?,?)", (client_id, stored, "pending", time.time()))
        return QueuedQuery(query_id, len(stored))

    def requeue_query(self, query_id: int) -> None:
        """Put an answered query back in its member's queue as it stands (the member refused
        it for load): one stored copy of its items however often that happens."""
        self._write("UPDATE reward_queries SET status='pending', scores=NULL, answered_at=NULL "
                    "WHERE query_id=?", (query_id,))

    def pending_queries(self, client_id: str, page_bytes: int | None = None
                        ) -> list[PendingQuery]:
        """A client's unanswered queries, oldest first; with ``page_bytes``, those queued
        before that many bytes of items were listed (the oldest always): one page."""
        size = "length(CAST(items AS BLOB))"
        rows = self._all(
            f"SELECT query_id, items FROM (SELECT query_id, items, SUM({size}) OVER (ORDER BY "
            f"query_id) - {size} AS before FROM reward_queries WHERE client_id=? AND "
            f"status='pending') WHERE before < ? ORDER BY query_id",
            (client_id, 2**62 if page_bytes is None else page_bytes))
        return [PendingQuery(query_id=r["query_id"], items=json.loads(r["items"]))
                for r in rows]

    def query(self, query_id: int) -> QueryRow | None:
        """One queued query (its answer parsed as ``answer_query`` stored it), or None."""
        row = self._one("SELECT query_id, client_id, status, scores, json_array_length(items) "
                        "AS n_items FROM reward_queries WHERE query_id=?", (query_id,))
        if row is None:
            return None
        answer = (None if row["status"] == "pending"
                  else RewardAnswer.model_validate_json(row["scores"]))
        return QueryRow(query_id=row["query_id"], client_id=row["client_id"],
                        n_items=row["n_items"], answer=answer)

    def answer_query(self, query_id: int, answer: RewardAnswer) -> None:
        """Store a pull-mode answer (scores, missing images or a refusal) as it was parsed."""
        self._write("UPDATE reward_queries SET status='answered', scores=?, answered_at=? "
                    "WHERE query_id=?", (answer.model_dump_json(exclude_defaults=True),
                                         time.time(), query_id))
