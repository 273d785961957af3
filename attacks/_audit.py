"""The audit of a demo run directory: membership inference on every client's reward model.

A run directory holds ``reward_models/<client>/`` checkpoints (``RewardModel.from_pretrained``
plus the fitted ``normalizer.json``) and ``data/clients/<client>/{train,eval}`` in the sdk.data
layout. For each client the attacker's candidates are its train pairs (members) and its eval
pairs (non-members); the threshold attack runs on the raw margin and on the normalized, clipped
margin (what ``/v1/reward`` returns).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from attacks._errors import AttackInputError
from attacks._html import write_report
from attacks._membership import Scorer, threshold_attack
from attacks._report import AuditReport, MembershipReport, membership_report

__all__ = ["AuditConfig", "audit_run_dir"]


class AuditConfig(BaseModel):
    """Settings of :func:`audit_run_dir`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_pairs: int = Field(default=200, ge=1, description="members (and non-members) per client")
    clients: tuple[str, ...] | None = Field(default=None, description="None: every client")
    n_boot: int = Field(default=1000, ge=10)
    seed: int = 0


def _client_dirs(run_dir: Path, clients: tuple[str, ...] | None) -> list[Path]:
    models = run_dir / "reward_models"
    if not models.is_dir():
        raise AttackInputError(f"{run_dir} has no reward_models/ directory: not a demo run")
    found = sorted(p for p in models.iterdir() if (p / "normalizer.json").is_file())
    if clients is not None:
        missing = sorted(set(clients) - {p.name for p in found})
        if missing:
            raise AttackInputError(f"no reward checkpoint with a normalizer for {missing}")
        found = [p for p in found if p.name in clients]
    if not found:
        raise AttackInputError(f"no reward checkpoint with normalizer.json under {models}")
    return found


def _margins(model: Any, pairs: list[Any]) -> np.ndarray:
    """Raw rewards of chosen and rejected responses, (P, 2) float64."""
    images = [p.image for p in pairs]
    prompts = [p.prompt for p in pairs]
    chosen = model.score(images, prompts, [p.chosen for p in pairs])
    rejected = model.score(images, prompts, [p.rejected for p in pairs])
    return np.stack([chosen.double().numpy(), rejected.double().numpy()], axis=1)


def _client_reports(
    ckpt: Path, run_dir: Path, cfg: AuditConfig, live: Scorer[Any] | None
) -> list[MembershipReport]:
    # sdk.reward imports torch and transformers: only when an audit runs.
    import torch

    from sdk.data import load_pairs
    from sdk.reward import RewardModel, ScoreNormalizer

    client = ckpt.name
    data = run_dir / "data" / "clients" / client
    train, held = load_pairs(data / "train"), load_pairs(data / "eval")
    rng = np.random.default_rng(cfg.seed)
    n = min(cfg.max_pairs, len(train), len(held))
    if n == 0:
        raise AttackInputError(
            f"client {client}: needs train and eval pairs, got {len(train)} / {len(held)}"
        )
    members = [train[int(i)] for i in np.sort(rng.choice(len(train), n, replace=False))]
    non_members = [held[int(i)] for i in np.sort(rng.choice(len(held), n, replace=False))]
    model = RewardModel.from_pretrained(ckpt)
    normalizer = ScoreNormalizer.load(ckpt)
    raw = _margins(model, members + non_members)  # (2n, 2)
    norm = normalizer.normalize(torch.from_numpy(raw)).numpy()
    views = [
        ("raw scores", raw),
        (f"normalized, clipped at c={normalizer.clip:g} (/v1/reward)", norm),
    ]
    if live is not None:
        # The live app answers scores, not margins: store them as (margin, 0) rows.
        margins = np.asarray(live(members + non_members), dtype=np.float64)
        views.append(("live /v1/reward", np.stack([margins, np.zeros_like(margins)], axis=1)))
    out = []
    for name, scores in views:

        def scorer(idx: Sequence[int], s: np.ndarray = scores) -> np.ndarray:
            i = np.asarray(idx, dtype=np.int64)
            return np.asarray(s[i, 0] - s[i, 1])

        attack = threshold_attack(scorer, list(range(n)), list(range(n, 2 * n)), seed=cfg.seed)
        out.append(
            membership_report(attack, setting=f"{client}: {name}", n_boot=cfg.n_boot, seed=cfg.seed)
        )
    return out


def audit_run_dir(
    run_dir: str | Path,
    out_dir: str | Path,
    config: AuditConfig | None = None,
    *,
    live: Mapping[str, Scorer[Any]] | None = None,
) -> AuditReport:
    """Attack every client's reward model of a demo run; write report.json, roc.png and
    report.html into ``out_dir`` and return the report. ``live`` maps a client name to a
    scorer of its running app (e.g. :class:`RemoteRewardScorer`), attacked on the same pairs."""
    cfg = config or AuditConfig()
    root = Path(run_dir)
    unknown = sorted(set(live or {}) - {p.name for p in _client_dirs(root, cfg.clients)})
    if unknown:
        raise AttackInputError(f"live scorers given for clients not audited: {unknown}")
    memberships: list[MembershipReport] = []
    for ckpt in _client_dirs(root, cfg.clients):
        memberships += _client_reports(ckpt, root, cfg, (live or {}).get(ckpt.name))
    leaks = [m.setting for m in memberships if m.verdict.startswith("leaks")]
    summary = (
        f"Membership inference leaks in {len(leaks)} of {len(memberships)} settings: "
        + "; ".join(leaks)
        if leaks
        else f"No measurable membership leak in any of the {len(memberships)} settings."
    )
    report = AuditReport(
        title=f"fedmor privacy audit of {root.name}",
        memberships=memberships,
        notes=[
            summary,
            "Threat model: a query-only attacker holding candidate pairs; members are each "
            "client's train pairs, non-members its eval pairs, balanced; threshold attack on "
            "the reward margin R(x, y+) - R(x, y-). Normalization is monotone, so it cannot hide "
            "a ranking; only clipping ties the extremes.",
        ],
    )
    write_report(report, out_dir)
    return report
