"""``fedmor audit --server URL --identity KEY --member NAME``: membership inference on a live
member through the consortium server, as the ``auditor`` role, with no server secret.

Every query goes to ``POST /v1/audit/members/{name}/reward`` signed with the auditor's own key:
the server relays it through its reward broker (the member's site policy and budget apply),
charges the auditor's budget, and logs it when capture mode is on. The candidate pairs are the
audited member's own: its train pairs (members) and eval pairs (non-members).

The audit asks ``GET /v1/audit/budget`` first and shrinks the candidates to what is left (two
scored items per pair), so it never runs into a 429 halfway. Each candidate is scored once:
the threshold attack and LiRA read the same answers. LiRA (with the member's
``reward_config.json``: architecture, base, LoRA settings and training recipe, no weights)
trains its shadows here, on the auditor's machine, from the member's base with its recipe
(attacks._audit_lira), and calibrates the live answers against them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from attacks._audit import AuditConfig, shadow_recipe
from attacks._audit_lira import Candidates, lira_reports, pick_candidates
from attacks._errors import AttackInputError
from attacks._html import write_report
from attacks._membership import threshold_attack
from attacks._remote import RemoteRewardScorer
from attacks._report import AuditReport, MembershipReport, membership_report
from attacks._shadow_base import recorded_shadow_base

__all__ = ["answer_reports", "audit_live_member", "read_target_config"]

ARTEFACT = "reward answers (/v1/reward)"
_ITEMS_PER_PAIR = 2  # chosen and rejected: one scored item each


def read_target_config(path: Path) -> dict[str, Any]:
    """A member's ``reward_config.json`` (or its checkpoint directory): what LiRA needs to
    build the member's twins."""
    file = path / "reward_config.json" if path.is_dir() else path
    try:
        config: dict[str, Any] = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise AttackInputError(f"cannot read the target's reward config {file}: {exc}") from exc
    missing = [k for k in ("architecture", "hidden_size", "backbone", "lora") if k not in config]
    if missing:
        raise AttackInputError(f"{file} is not a fedmor reward_config.json: no {missing}")
    return config


def _live_lira(member: str, target: np.ndarray, picked: Candidates, config: dict[str, Any],
               cfg: AuditConfig, say: Callable[[str], None]) -> list[MembershipReport]:
    """LiRA on the live answers ``target`` (2n, 2), shadows from the member's recorded base
    (or ``cfg.shadow_base``) and recipe."""
    from sdk.reward import LoraSettings

    lora = None if config["lora"] is None else LoraSettings(**config["lora"])
    recipe = shadow_recipe(config.get("training") or {}, lora, cfg)
    base = recorded_shadow_base(config, cfg.shadow_base)
    adapters = "" if lora is None else f", LoRA rank {lora.r}"
    say(f"{member}: LiRA with {cfg.shadow_models} shadow models trained here ({base.label}"
        f"{adapters}, {recipe.steps} steps of {recipe.batch_size} pairs each)")
    return lira_reports(
        member, [("live reward answers", target)],
        picked.members + picked.non_members, picked.population, base=base, recipe=recipe,
        n_shadow=cfg.shadow_models, clip=recipe.clip_bound, n_boot=cfg.n_boot, seed=cfg.seed,
        say=lambda m: say(f"{member}: {m}"), runtime=cfg.runtime, normalized_from=0)


def answer_reports(member: str, margins: np.ndarray, picked: Candidates, cfg: AuditConfig,
                   target_config: dict[str, Any] | None, *, setting: str,
                   say: Callable[[str], None]) -> tuple[list[MembershipReport], list[str]]:
    """The threshold attack, and with ``target_config`` (the member's reward_config.json)
    LiRA, on the member's answers: ``margins`` (2n,) of ``picked``'s members then
    non-members, each scored once for both attacks. Returns the reports and notes."""
    n = len(picked.members)
    attack = threshold_attack(lambda idx: margins[np.asarray(idx, dtype=np.int64)],
                              list(range(n)), list(range(n, 2 * n)), seed=cfg.seed)
    reports = [membership_report(attack, setting=f"{member}: {setting}", n_boot=cfg.n_boot,
                                 seed=cfg.seed)]
    say(f"{member}: threshold attack: {reports[0].verdict}")
    notes = []
    if target_config is not None and cfg.shadow_models:
        target = np.stack([margins, np.zeros_like(margins)], axis=1)  # (2n, 2): margin rows
        reports += _live_lira(member, target, picked, target_config, cfg, say)
        say(f"{reports[-1].setting}: {reports[-1].verdict}")
    else:
        notes.append("No LiRA: it needs the member's reward_config.json (--target-config, or "
                     "the reward_model_dir of its settings) to train shadow models like it, "
                     "and --shadow-models > 0.")
    return [r.model_copy(update={"members": [member], "artefact": ARTEFACT})
            for r in reports], notes


def audit_live_member(server_url: str, key: Any, *, caller_id: str, member: str,
                      pairs_dir: Path, out_dir: Path, config: AuditConfig | None = None,
                      target_config: Path | None = None, verify: Any = True,
                      progress: Callable[[str], None] | None = None) -> AuditReport:
    """The threshold attack, and with ``target_config`` (the member's reward_config.json)
    LiRA, on ``member``'s live reward answers relayed by the server at ``server_url``;
    writes report.json and report.html into ``out_dir``. ``key``: the auditor's Ed25519
    private key, ``caller_id``: its enrolled client id; ``config``: candidates, seed and the
    shadows (``shadow_models`` 0: no LiRA)."""
    from sdk.data import load_pairs
    from sdk.wire import SERVER_SENDER, AuditBudget, SignedClient

    cfg = config or AuditConfig(max_pairs=50)
    say = progress or (lambda _m: None)
    if not (pairs_dir / "train").is_dir() or not (pairs_dir / "eval").is_dir():
        raise AttackInputError(f"{pairs_dir} needs train/ (members) and eval/ (non-members)")
    target_cfg = None if target_config is None else read_target_config(target_config)
    if target_cfg is not None and cfg.shadow_models:
        # The shadows' base must be here before any query spends the member's audit budget.
        recorded_shadow_base(target_cfg, cfg.shadow_base)
    with SignedClient(server_url, key=key, sender=caller_id, verify=verify,
                      timeout_s=120) as http:
        before = http.get("/v1/audit/budget", AuditBudget)
        fits = before.left // (2 * _ITEMS_PER_PAIR)  # a member and a non-member
        if fits < 2:
            raise AttackInputError(
                f"auditor budget: {before.left} of {before.budget} scored items left in "
                f"the window of {before.window_s:g} s; an audit needs at least "
                f"{4 * _ITEMS_PER_PAIR} (two members and two non-members)")
        picked = pick_candidates(member, load_pairs(pairs_dir / "train"),
                                 load_pairs(pairs_dir / "eval"), min(cfg.max_pairs, fits),
                                 cfg.seed)
        n = len(picked.members)
        if n < cfg.max_pairs and n == fits:
            say(f"{member}: the budget left ({before.left} items) fits {n} candidate pairs "
                f"a side, not {cfg.max_pairs}")
        scorer = RemoteRewardScorer(http, key, recipient=SERVER_SENDER, sender=caller_id,
                                    path=f"/v1/audit/members/{member}/reward")
        margins = scorer(picked.members + picked.non_members)  # (2n,) chosen - rejected
        after = http.get("/v1/audit/budget", AuditBudget)
    reports, notes = answer_reports(
        member, margins, picked, cfg, target_cfg, say=say,
        setting=f"live reward answers relayed by the server ({scorer.items_sent} scored items)")
    notes.insert(0, f"Auditor budget: this audit used {scorer.items_sent} scored items; "
                 f"{after.used} of {after.budget} are used in the current window of "
                 f"{after.window_s:g} s ({after.left} left).")
    report = AuditReport(
        title=f"fedmor live audit of {member} through {server_url}", memberships=reports,
        notes=[*notes, "Queried as the auditor role through the consortium server: the "
               "member's site policy and budget applied to every query, and the server "
               "charged them to the auditor's own budget."])
    write_report(report, out_dir)
    return report
