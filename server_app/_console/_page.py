"""The operator console's page: what it shows, gathered through the same functions the REST
API answers with (``GET /v1/members``, ``/v1/rounds``, ``/v1/router/versions``,
``/v1/rewards/stats``, ``/v1/rewards/progress``, ``/v1/captures``), rendered by a Jinja2
template with autoescape on: member names, refusal details and round errors come from other
parties and are never markup."""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from sdk.capture import CaptureManifest
from sdk.wire import (
    AlignerStats,
    AlignmentStep,
    MemberInfo,
    Refusal,
    RoundInfo,
    RouterConfigInfo,
    RouterVersionInfo,
)
from server_app._capture import ServerCapture
from server_app._console._chart import alignment_svg, latest_run, step_curve
from server_app._identity._access import Identity
from server_app._identity._identities import Identities
from server_app._rewards._service import AlignmentService
from server_app._rounds._manager import RoundManager
from server_app._routes._rounds import visible_rounds
from server_app._routes._router import router_versions
from server_app._store import Store

__all__ = ["ASSETS", "ConsoleSources", "ConsoleView", "message_page", "render"]

ASSETS = Path(__file__).with_name("_assets")
_SHOWN_ROUNDS = 100  # newest first; the REST API lists them all
_SHOWN_STEPS = 15


@dataclass(frozen=True)
class ConsoleSources:
    """Where the console reads: the objects behind the REST endpoints."""

    store: Store
    identities: Identities
    rounds: RoundManager
    service: AlignmentService
    capture: ServerCapture | None


@dataclass
class ConsoleView:
    """Everything one page shows, read once per page load."""

    operator: str
    now: float
    members: list[MemberInfo]
    rounds: list[RoundInfo]  # newest first
    versions: list[RouterVersionInfo]  # newest first
    lineages: list[RouterConfigInfo]  # newest first
    progress: list[AlignmentStep]
    stats: AlignerStats
    capture: CaptureManifest | None
    names: dict[str, str] = field(default_factory=dict)  # client id -> name
    refusals: dict[str, list[tuple[int, Refusal]]] = field(default_factory=dict)

    @classmethod
    def gather(cls, src: ConsoleSources, operator: str) -> ConsoleView:
        """Read every section as ``operator`` sees it through the REST API."""
        rounds = visible_rounds(src.rounds, Identity(operator, "operator"))
        view = cls(operator=operator, now=time.time(), members=src.identities.members(),
                   rounds=rounds[::-1], versions=router_versions(src.rounds.lineages)[::-1],
                   lineages=src.rounds.lineages.history()[::-1],
                   progress=src.service.progress(), stats=src.service.stats(),
                   capture=None if src.capture is None else src.capture.manifest())
        view.names = {m.client_id: m.name for m in view.members if m.client_id}
        for info in rounds:
            for refusal in info.refusals:
                view.refusals.setdefault(refusal.client_id, []).append((info.round_id, refusal))
        return view

    def version_groups(self) -> list[tuple[RouterConfigInfo | None, list[RouterVersionInfo]]]:
        """The versions by lineage, newest lineage first (versions from before lineages
        existed: one group without a lineage, last)."""
        groups: list[tuple[RouterConfigInfo | None, list[RouterVersionInfo]]] = [
            (x, [v for v in self.versions
                 if v.router_config is not None and v.router_config.lineage == x.lineage])
            for x in self.lineages]
        loose = [v for v in self.versions if v.router_config is None]
        return groups + ([(None, loose)] if loose or not groups else [])

    def name(self, client_id: str) -> str:
        """A member's roster name (its id when the roster no longer has it)."""
        return self.names.get(client_id, client_id)


def _when(at: float | None) -> str:
    if at is None:
        return "—"
    return datetime.datetime.fromtimestamp(at, datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M:%SZ")


def _ago(at: float | None, now: float) -> str:
    if at is None:
        return "never"
    s = max(0.0, now - at)
    for unit, size in (("d", 86_400), ("h", 3600), ("min", 60)):
        if s >= size:
            return f"{s / size:.0f} {unit} ago"
    return f"{s:.0f} s ago"


def _num(value: float | None, fmt: str = ".4g") -> str:
    return "—" if value is None else format(value, fmt)


_ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(ASSETS), autoescape=True,
                          undefined=jinja2.StrictUndefined, trim_blocks=True,
                          lstrip_blocks=True)
_ENV.filters.update(when=_when, num=_num, origin=RouterVersionInfo.origin)


def _progress_rows(steps: list[AlignmentStep]) -> list[dict[str, Any]]:
    """The latest steps of the latest run, newest first, with their moving averages."""
    reward, kl = step_curve(steps, "reward"), step_curve(steps, "kl")
    rows = [{"step": s, "reward_avg": _finite(reward.average[i]),
             "kl_avg": _finite(kl.average[i])} for i, s in enumerate(steps)]
    return rows[::-1][:_SHOWN_STEPS]


def _finite(x: float) -> float | None:
    return None if x != x else float(x)  # NaN: no value yet


def render(view: ConsoleView, *, refresh_s: int, session_expires: float) -> str:
    """The console page (HTML; every interpolated value escaped by the template)."""
    run = latest_run(view.progress)
    return _ENV.get_template("console.html").render(
        v=view, ago=lambda at: _ago(at, view.now), refresh_s=refresh_s,
        names=lambda ids: ", ".join(view.name(i) for i in ids),
        session_expires=session_expires, shown_rounds=view.rounds[:_SHOWN_ROUNDS],
        run=run, steps=_progress_rows(run),
        chart=Markup(alignment_svg(run)),  # built from numbers and escaped text only
        members=[m for m in view.members if m.role == "member"],
        others=[m for m in view.members if m.role != "member"])


def message_page(title: str, message: str, link_ttl_s: float) -> str:
    """A page that says one thing (a refused link, a signed-out session), and how long a new
    login link works (the server's ``console.link_ttl_s``)."""
    return _ENV.get_template("message.html").render(title=title, message=message,
                                                    link_ttl_s=f"{link_ttl_s:g}")
