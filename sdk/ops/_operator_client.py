"""The typed client of a fedmor server's routes that the ``fedmor`` commands call: one method per
route, each taking and returning the route's schemas of ``sdk.wire``, so a command only parses
its arguments, calls one method and prints a table. Every refusal and unreachable server is
turned into the commands' error in one place (``_call``)."""

from __future__ import annotations

import argparse
import hashlib
import time
from collections.abc import Callable
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

from sdk.ops._connection import Connection, connection_from_args
from sdk.wire import (
    AlignerRequest,
    AlignerResponse,
    AlignerStats,
    ConsoleLink,
    ConsortiumRouterConfig,
    EnrollRequest,
    EnrollResponse,
    Health,
    MemberInfo,
    MemberReport,
    Revocation,
    RosterAdd,
    RosterAdded,
    RoundCancel,
    RoundCreate,
    RoundInfo,
    RouterConfigInfo,
    RouterRollback,
    RouterVersionInfo,
    SignedClient,
)

__all__ = ["OperatorClient", "client_from_args"]

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


class OperatorClient:
    """A fedmor server's routes for the command line, typed: ``conn`` says which server and
    who signs (an identity, else the admin token; enrollment and health are unsigned).

    A refused request raises :class:`sdk.wire.RequestRefused` (status, reason, Retry-After), an
    unreachable server ``ValueError``; both are the commands' one-line errors."""

    def __init__(self, conn: Connection, *, timeout_s: float = 30.0) -> None:
        self.conn, self.timeout_s = conn, timeout_s

    # -- transport: the one place an unreachable server becomes the commands' error ----------
    def _call(self, call: Callable[[SignedClient], T], *, timeout_s: float | None = None,
              unsigned: bool = False) -> T:
        """``call``'s result on a client of this connection (the client raises a refusal,
        labelled with its ``what``), or the commands' error for an unreachable server."""
        try:
            with self.conn.client(timeout_s=timeout_s or self.timeout_s,
                                  unsigned=unsigned) as client:
                return call(client)
        except httpx.HTTPError as exc:
            raise ValueError(f"cannot reach the server at {self.conn.server}: {exc}") from None

    def _get(self, answer: type[T], path: str, *, what: str, **kw: Any) -> T:
        return self._call(lambda client: client.get(path, answer, what=what), **kw)

    def _post(self, answer: type[M], path: str, body: BaseModel | None = None, *, what: str,
              **kw: Any) -> M:
        return self._call(lambda client: client.post(path, body, answer, what=what), **kw)

    # -- enrollment and health (unsigned) --------------------------------------------------------
    def health(self, *, timeout_s: float = 5.0) -> Health:
        """``GET /v1/health``."""
        return self._get(Health, "/v1/health", what="health", unsigned=True,
                         timeout_s=timeout_s)

    def wait_healthy(self, timeout_s: float) -> Health:
        """``health`` until the server answers, for at most ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return self.health()
            except ValueError as exc:  # not up yet (or refusing): ask again until the deadline
                if time.monotonic() >= deadline:
                    waited = (f"within {timeout_s:g} s" if timeout_s > 0
                              else "(--wait SECONDS waits)")
                    raise ValueError(f"{self.conn.server} did not answer {waited}: "
                                     f"{exc}") from None
            time.sleep(0.3)

    def enroll(self, req: EnrollRequest) -> EnrollResponse:
        """``POST /v1/enroll``: an identity's one-time enrollment."""
        return self._post(EnrollResponse, "/v1/enroll", req, unsigned=True,
                          what=f"enrollment of {req.name!r}")

    # -- members and the roster -----------------------------------------------------------------
    def members(self) -> list[MemberInfo]:
        """``GET /v1/members``: every identity."""
        return self._get(list[MemberInfo], "/v1/members", what="members list")

    def member_reports(self) -> list[MemberReport]:
        """``GET /v1/reports/members``: every identity with its refusals and DP budget."""
        return self._get(list[MemberReport], "/v1/reports/members", what="members list")

    def member_report(self, name: str) -> MemberReport:
        """``GET /v1/reports/members/{name}``."""
        return self._get(MemberReport, f"/v1/reports/members/{name}",
                         what="members show")

    def revoke(self, name: str, req: Revocation) -> MemberInfo:
        """``POST /v1/members/{name}/revoke``."""
        return self._post(MemberInfo, f"/v1/members/{name}/revoke", req,
                          what="revocation")

    def add_to_roster(self, req: RosterAdd) -> RosterAdded:
        """``POST /v1/roster``: a new identity and its one-time enrollment token."""
        return self._post(RosterAdded, "/v1/roster", req, what="roster add")

    # -- rounds ---------------------------------------------------------------------------------
    def open_round(self, req: RoundCreate) -> RoundInfo:
        """``POST /v1/rounds``."""
        return self._post(RoundInfo, "/v1/rounds", req, what="opening the round")

    def rounds(self, status: str | None = None) -> list[RoundInfo]:
        """``GET /v1/rounds``: every round (``status``: only open, finished or failed ones)."""
        return self._get(list[RoundInfo], "/v1/rounds" + (f"?status={status}" if status else ""),
                         what="rounds list")

    def round(self, round_id: int) -> RoundInfo:
        """``GET /v1/rounds/{round_id}``."""
        return self._get(RoundInfo, f"/v1/rounds/{round_id}", what="round")

    def cancel_round(self, round_id: int, req: RoundCancel) -> RoundInfo:
        """``POST /v1/rounds/{round_id}/cancel``."""
        return self._post(RoundInfo, f"/v1/rounds/{round_id}/cancel", req,
                          what="cancelling the round")

    # -- router versions and lineages -------------------------------------------------------------
    def router_latest(self) -> RouterVersionInfo:
        """``GET /v1/router/latest``: the newest version of the current lineage."""
        return self._get(RouterVersionInfo, "/v1/router/latest", what="router show")

    def router_versions(self) -> list[RouterVersionInfo]:
        """``GET /v1/router/versions``: every version, oldest first."""
        return self._get(list[RouterVersionInfo], "/v1/router/versions", what="router history")

    def router_version(self, version: int | None) -> RouterVersionInfo:
        """One version's metadata (None: the newest); ``ValueError`` if it does not exist."""
        if version is None:
            return self.router_latest()
        for info in self.router_versions():
            if info.version == version:
                return info
        raise ValueError(f"router version {version} does not exist (`fedmor router history` "
                         f"lists them)")

    def router_parameters(self, info: RouterVersionInfo) -> bytes:
        """``GET /v1/router/{version}``: the version's little-endian float32 parameters,
        refused unless they hash to the sha256 the server lists for it."""
        resp = self._call(lambda client: client.download(f"/v1/router/{info.version}",
                                                         what="router pull"),
                          timeout_s=max(self.timeout_s, 120.0))
        digest = hashlib.sha256(resp.content).hexdigest()
        if digest != info.sha256 or digest != resp.headers.get("x-fedmor-sha256"):
            raise ValueError(f"router version {info.version} hashes to {digest[:16]}, the "
                             f"server lists {info.sha256[:16]}: the download is corrupt or "
                             f"was changed on the way; nothing written")
        return bytes(resp.content)

    def router_config(self, lineage: int | None = None) -> RouterConfigInfo:
        """``GET /v1/router/config``: the current lineage's configuration, or ``lineage``'s."""
        query = "" if lineage is None else f"?lineage={lineage}"
        return self._get(RouterConfigInfo, f"/v1/router/config{query}",
                         what="router configuration")

    def router_lineages(self) -> list[RouterConfigInfo]:
        """``GET /v1/router/lineages``: every lineage, oldest first."""
        return self._get(list[RouterConfigInfo], "/v1/router/lineages", what="router lineages")

    def start_lineage(self, config: ConsortiumRouterConfig) -> RouterConfigInfo:
        """``POST /v1/router/lineage``: rounds follow ``config`` from now on."""
        return self._post(RouterConfigInfo, "/v1/router/lineage", config,
                          what="the new lineage")

    def rollback(self, req: RouterRollback) -> RouterVersionInfo:
        """``POST /v1/router/rollback``: a version published before, made the newest again."""
        return self._post(RouterVersionInfo, "/v1/router/rollback", req,
                          what="rollback")

    # -- the reward service and the console -------------------------------------------------------
    def alignment_stats(self) -> AlignerStats:
        """``GET /v1/rewards/stats``."""
        return self._get(AlignerStats, "/v1/rewards/stats", what="alignment status")

    def score(self, req: AlignerRequest, *, timeout_s: float) -> AlignerResponse:
        """``POST /v1/rewards`` (the aligner's role): one reward per item."""
        return self._post(AlignerResponse, "/v1/rewards", req, what="reward query",
                          timeout_s=timeout_s)

    def console_link(self) -> ConsoleLink:
        """``POST /v1/console/links``: a one-time login link to the operator console."""
        return self._post(ConsoleLink, "/v1/console/links", what="console link")


def client_from_args(args: argparse.Namespace) -> OperatorClient:
    """The client of the server a command's connection options (or profile) name."""
    return OperatorClient(connection_from_args(args))
