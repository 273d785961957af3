"""A member's work: ``GET /v1/work`` (long polling) and the pull-mode reward queries,
``GET /v1/reward/pending`` and ``POST /v1/reward/answers/{query_id}``.

Unlike the other areas these sit on the app itself, not in an included ``APIRouter``: a member
falls back to polling when ``/v1/work`` is missing (an older server), and the test of that
fallback plays such a server by dropping the route from the app's own route list."""

# No ``from __future__ import annotations``: FastAPI reads the local ``Annotated`` aliases.

from typing import Annotated

from fastapi import Depends, FastAPI, Path, Query, Request

from sdk.serving import Limiter, NotFoundError, for_roles
from sdk.wire import PayloadError, PendingQuery, RewardAnswer, Work
from server_app._identity._access import Access
from server_app._rewards._broker import BrokerError, RewardBroker
from server_app._rounds._manager import RoundManager
from server_app._rounds._work import Signal, find_work, held
from server_app._store import ConflictError, Store

__all__ = ["install_work_routes"]


def install_work_routes(app: FastAPI, store: Store, rounds: RoundManager, work: Signal,
                        access: Access, limits: Limiter, broker: RewardBroker) -> None:
    """Add the member-only endpoints that find and answer its work; ``work`` wakes long
    polls, each counted by ``limits``; ``broker`` checks an answer's scores (as it checks a
    pushed one) and is woken once an answer (or refusal) is stored."""
    Client = Annotated[str, Depends(access.caller_id)]
    members = for_roles("member")

    @app.get("/v1/reward/pending", response_model=list[PendingQuery], tags=["reward"],
             openapi_extra=members)
    def pending(client: Client) -> list[PendingQuery]:
        """Pull mode: this client's queued reward queries, oldest first, one page
        (``PendingQuery.PAGE_BYTES``) at a time."""
        return store.pending_queries(client, PendingQuery.PAGE_BYTES)

    @app.get("/v1/work", response_model=Work, tags=["rounds", "reward"], openapi_extra=members)
    async def find(request: Request, client: Client,
                   wait_s: Annotated[float, Query(ge=0, le=30)] = 0.0,
                   include_rounds: Annotated[bool, Query(alias="rounds")] = True) -> Work:
        """What this client has to do: open rounds still waiting for its message (unless
        ``rounds`` is false) and its queued reward queries. ``wait_s`` > 0 holds the request
        until there is something or that time passed (long polling; then empty lists)."""
        if wait_s > 0:
            limits.hold_wait(request, client)
        found = await held(request, work.wait_for(
            lambda: find_work(rounds, store, client, include_rounds=include_rounds),
            lambda out: out is not None, wait_s, key=client), None)
        return found or Work()

    @app.post("/v1/reward/answers/{query_id}", response_model=None, tags=["reward"],
              status_code=204, openapi_extra=members)
    def answer(client: Client, query_id: Annotated[int, Path(ge=1, le=2**62)],
               body: RewardAnswer) -> None:
        """Pull mode: scores for one query (or the image hashes the client lacks)."""
        row = store.query(query_id)
        if row is None or row.client_id != client:
            raise NotFoundError(f"query {query_id} is not pending for this client")
        if row.answer is not None:
            raise ConflictError(f"query {query_id} was already answered")
        if not (body.missing or body.error):
            try:
                broker.check(client, body.scores, row.n_items)
            except BrokerError as exc:
                # The scores are never stored: the broker reads the refusal at once instead.
                store.answer_query(query_id, RewardAnswer(error=str(exc)))
                broker.answered(query_id)
                raise PayloadError(str(exc)) from None
        store.answer_query(query_id, body)
        broker.answered(query_id)

