"""Pull mode: the member fetches the reward queries the server queued for it and posts an
answer to each, scored by the same service as its push endpoint (``POST /v1/reward``)."""

from __future__ import annotations

import logging
from typing import Any

from client_app._policy import PolicyDenied
from client_app._service import RateLimited
from client_app._transport import MemberConnection
from sdk.wire import MissingImages, PayloadError, PendingQuery, RewardRequest

__all__ = ["answer_pending"]

_log = logging.getLogger("fedmor.client")


def answer_pending(member: MemberConnection, queries: list[PendingQuery] | None = None) -> int:
    """Answer ``queries`` (default: every queued one, fetched) with ``member``'s scorer;
    returns how many (none without a reward service)."""
    if member.service is None:
        return 0
    if queries is None:
        queries = member.get("/v1/reward/pending", list[PendingQuery])
    for q in queries:
        answer: dict[str, Any]
        try:
            out = member.service.score("server", RewardRequest(items=q.items))
            answer = ({"missing": out.missing} if isinstance(out, MissingImages)
                      else {"scores": out.scores})
        except (RateLimited, PayloadError, PolicyDenied) as exc:
            answer = {"error": str(exc)}
        except Exception:  # a bad item costs its own answer, never the worker
            _log.exception("scoring reward query %s failed", q.query_id)
            answer = {"error": "internal error while scoring this query"}
        member.post(f"/v1/reward/answers/{q.query_id}", answer)
    return len(queries)
