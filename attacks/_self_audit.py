"""``fedmor audit --client-config FILE``: a member audits itself, inside its own network.

It reads its own client app's settings, builds the reward service its app answers
``/v1/reward`` with (the same scorer, device and dtype, image scaling, clip bound and policy
limits: :func:`client_app.site_reward_service`) over a scratch store, so the audit neither
spends nor logs against any caller's budget, and attacks those answers with its own data:
train pairs are the members, eval pairs the non-members. No server is involved and nothing
leaves the site. With ``reward_model_dir`` set, LiRA trains shadows from the checkpoint's
recorded base (or ``reward_base_dir``) with its recipe, as an auditor would
(attacks._live_audit).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attacks._audit import AuditConfig
from attacks._audit_lira import pick_candidates
from attacks._errors import AttackError, AttackInputError
from attacks._html import write_report
from attacks._live_audit import answer_reports
from attacks._remote import RewardItemScorer
from attacks._report import AuditReport

__all__ = ["audit_own_scorer"]

_CALLER = "self-audit"


class _ServiceScorer(RewardItemScorer):
    """Pairs scored by the site's own reward service, exactly as ``/v1/reward`` answers."""

    def __init__(self, service: Any) -> None:
        super().__init__()
        self._service = service

    def _post(self, items: list[dict[str, Any]]) -> list[float]:
        from client_app import PolicyDenied
        from sdk.wire import MissingImages, RewardRequest

        try:
            out = self._service.score(_CALLER, RewardRequest.model_validate({"items": items}))
        except PolicyDenied as exc:
            raise AttackInputError(f"the site's policy refuses reward queries: {exc}") from exc
        if isinstance(out, MissingImages):
            raise AttackError(f"the reward service lost images {out.missing}")
        self.items_sent += len(items)
        return [float(s) for s in out.scores]


def audit_own_scorer(client_config: Path, pairs_dir: Path, out_dir: Path,
                     config: AuditConfig | None = None,
                     progress: Callable[[str], None] | None = None) -> AuditReport:
    """Membership inference on the reward answers of the client app configured by
    ``client_config`` (its TOML/JSON settings file), with the site's own pairs in ``pairs_dir``
    (train/ = members, eval/ = non-members); writes report.json and report.html into
    ``out_dir``. ``config``: candidates, seed and shadows (the shadows run on the site's own
    device and dtype unless ``config.runtime`` names others)."""
    from client_app import ClientSettings, ClientStore, site_reward_service
    from sdk.data import load_pairs
    from sdk.models import Runtime
    from sdk.reward import RewardModel
    from sdk.serving import load_settings

    cfg = config or AuditConfig(max_pairs=50)
    say = progress or (lambda _m: None)
    site = load_settings(ClientSettings, client_config)
    if cfg.runtime == Runtime():  # not chosen: the shadows run where the site's model runs
        cfg = cfg.model_copy(update={"runtime": site.reward_runtime()})
    if not (pairs_dir / "train").is_dir() or not (pairs_dir / "eval").is_dir():
        raise AttackInputError(f"{pairs_dir} needs train/ (members) and eval/ (non-members)")
    picked = pick_candidates(site.name, load_pairs(pairs_dir / "train"),
                             load_pairs(pairs_dir / "eval"), cfg.max_pairs, cfg.seed)
    with tempfile.TemporaryDirectory(prefix="fedmor-self-audit-") as scratch:
        store = ClientStore(Path(scratch) / "self-audit.db")
        try:
            service = site_reward_service(site, store)
            say(f"{site.name}: scoring {2 * len(picked.members)} candidate pairs with this "
                f"site's reward service (clip {service.clip:g})")
            scorer = _ServiceScorer(service)
            margins = scorer(picked.members + picked.non_members)  # (2n,) chosen - rejected
        finally:
            store.close()
    target_cfg = None
    if site.reward_model_dir is not None:
        target_cfg = RewardModel.read_checkpoint_config(site.reward_model_dir)
        cfg = cfg.model_copy(update={"shadow_base": cfg.shadow_base or site.reward_base_dir})
    reports, notes = answer_reports(
        site.name, margins, picked, cfg, target_cfg, say=say,
        setting=f"this site's own reward answers ({scorer.items_sent} scored items, no server)")
    report = AuditReport(
        title=f"fedmor self-audit of {site.name}", memberships=reports,
        notes=[*notes, f"Self-audit from the site's own settings ({client_config}): the reward "
               "service its app answers /v1/reward with, scored locally on the site's own "
               "pairs; no query left the site and no caller's budget was spent."])
    write_report(report, out_dir)
    return report
