"""``fedmor audit --capture DIR``: attack what a server captured (attacks._capture_dir).

Without ground truth the audit says what an attacker holding the files recovers, beside a
trivial baseline: the analytic inversion of each update and how well its rows agree (one
input in the clear makes every row name the same vector), whether each masked input looks
uniform (what masks should make it), whether the server ever held enough shares to rebuild
both masks of one member, and what the reward-query log holds. A failed round published
nothing: its received messages are checked alike, and the report's notes say why it failed.
With ground truth from the audited member (:class:`MemberTruth`: its embeddings of the samples
behind its updates, its train and eval pairs) the same attacks are scored: reconstructions against its samples beside
the dataset-mean and unrelated-sample baselines, membership inference on the logged scores of
its own pairs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from attacks._analytic import analytic_linear_candidates, analytic_linear_inversion
from attacks._audit import update_owner
from attacks._capture_dir import CapturedArtefact, CaptureDir, CapturedRound
from attacks._captured import CapturedRouterUpdate
from attacks._captured_attacks import CapturedAttackConfig, attack_captured_update
from attacks._errors import AttackInputError
from attacks._html import write_report
from attacks._member_truth import MemberTruth, logged_as
from attacks._membership import threshold_attack
from attacks._report import (
    NO_LEAK,
    AuditReport,
    CaptureCheck,
    MembershipReport,
    ReconstructionReport,
    membership_report,
    reconstruction_report,
)

__all__ = ["CaptureAuditConfig", "MemberTruth", "audit_capture_dir"]

_FAMILY_LEVEL = 0.001
"""The chance that honest masks are called a leak anywhere in one audit: each of its m masked
inputs is tested at ``_FAMILY_LEVEL / m`` (Bonferroni), so more inputs raise no false alarm."""
_EXACT = 0.99  # every strong row agrees at least this well: one input in the clear


class CaptureAuditConfig(BaseModel):
    """Settings of :func:`audit_capture_dir`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    inversion: CapturedAttackConfig = CapturedAttackConfig()
    n_boot: int = Field(default=1000, ge=10)
    seed: int = 0


def _row_agreement(upd: CapturedRouterUpdate) -> tuple[torch.Tensor, float, float]:
    """The analytic reconstruction and the min / mean pairwise cosine of its row candidates."""
    delta = upd.delta()
    dw, db = delta["input_proj.weight"], delta["input_proj.bias"]
    cand = analytic_linear_candidates(dw, db).double()  # (k, D)
    unit = cand / cand.norm(dim=1, keepdim=True).clamp_min(1e-12)
    cos = unit @ unit.T
    off = cos[~torch.eye(len(cos), dtype=torch.bool)]
    if off.numel() == 0:
        off = torch.ones(1, dtype=torch.float64)
    return analytic_linear_inversion(dw, db), float(off.min()), float(off.mean())


def _recovery_check(upd: CapturedRouterUpdate, setting: str, out: Path) -> CaptureCheck:
    """No ground truth: save the analytic reconstruction and judge it by row agreement."""
    x, low, mean = _row_agreement(upd)
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{setting.replace(' ', '_').replace(',', '')}.safetensors"
    save_file({"recovered": x.float().contiguous()}, str(path))
    d = x.numel()
    bound = 3.0 / d**0.5  # pairwise cosines of unrelated directions: ~N(0, 1/D)
    detail = f"row agreement min {low:.3f}, mean {mean:.3f}; unrelated directions up to {bound:.3f}"
    if low >= _EXACT:
        verdict = f"leaks: every strong row names the same input, recovered exactly ({detail})"
    elif mean <= bound:
        verdict = f"{NO_LEAK} ({detail})"
    else:
        verdict = (
            "inconclusive: the rows name a blend of inputs; the member's ground truth is needed "
            f"to score it ({detail})"
        )
    return CaptureCheck(
        attack="analytic",
        setting=setting,
        statistic="min row agreement (cosine)",
        value=low,
        baseline=f"unrelated directions in {d} dimensions: |cosine| up to {bound:.3f}",
        recovered=f"one {d}-dimensional input embedding (saved as {path.name})",
        verdict=verdict,
        **update_owner(upd.meta),
    )


def _ks_critical(n: int, tests: int) -> float:
    """The Kolmogorov-Smirnov distance that n uniform values exceed with probability
    ``_FAMILY_LEVEL / tests`` (the asymptotic tail ``2 exp(-2 n d^2)``)."""
    return math.sqrt(math.log(2 * tests / _FAMILY_LEVEL) / (2 * n))


def _masked_check(masked: np.ndarray, setting: str, member: str, tests: int) -> CaptureCheck:
    """A masked input must look like uniform noise on the 32-bit ring: Kolmogorov-Smirnov,
    one of the audit's ``tests`` masked inputs (family-wise level ``_FAMILY_LEVEL``)."""
    u = np.sort(masked.astype(np.float64) / 2.0**32)
    n = u.size
    i = np.arange(1, n + 1)
    stat = float(max(np.max(i / n - u), np.max(u - (i - 1) / n)))
    crit = _ks_critical(n, tests)
    level = f"99.9% over the audit's {tests} masked input(s)"
    detail = f"KS distance {stat:.4f}; uniform noise stays below {crit:.4f} ({level})"
    verdict = (
        f"leaks: the masked input is not uniform, the masks do not hide it ({detail})"
        if stat > crit
        else f"within uniform noise: no measurable leak ({detail})"
    )
    return CaptureCheck(
        attack="uniformity (KS test)",
        setting=setting,
        statistic="KS distance to uniform",
        value=stat,
        baseline=f"uniform noise: below {crit:.4f} ({level})",
        recovered=f"{n} uint32 ring elements",
        verdict=verdict,
        members=[member],
        artefact="masked input (secure aggregation)",
    )


def _shares_check(rnd: CapturedRound, responses: list[dict[str, Any]]) -> CaptureCheck:
    """The server may rebuild a member's self mask (it survived) or its mask key (it dropped),
    never both: count, per member, the shares of each kind the server received."""
    counts: dict[str, list[int]] = {}
    for resp in responses:
        for key, slot in (("self_mask_shares", 0), ("key_shares", 1)):
            for sid in resp.get(key, {}):
                counts.setdefault(str(sid), [0, 0])[slot] += 1
    t = rnd.threshold or 1
    names = {str(v): k for k, v in rnd.secagg_ids.items()}
    both = {names.get(s, s): min(c) for s, c in counts.items()}
    worst = max(both.values(), default=0)
    exposed = sorted(m for m, c in both.items() if c >= t)
    detail = f"at most {worst} shares of both kinds for one member; threshold {t}"
    verdict = (
        f"leaks: the server could rebuild both masks of {exposed} ({detail})"
        if exposed
        else f"within the protocol: no measurable leak ({detail})"
    )
    return CaptureCheck(
        attack="share count",
        setting=f"{_round_name(rnd)}: unmasking shares of {len(responses)} member(s)",
        statistic="most shares of both kinds for one member",
        value=float(worst),
        baseline=f"below the threshold {t}: neither mask can be rebuilt twice",
        recovered=f"{sum(sum(c) for c in counts.values())} shares",
        verdict=verdict,
        members=sorted(rnd.secagg_ids) if rnd.secagg_ids else [],
        artefact="unmasking shares (secure aggregation)",
    )


def _scored(
    upd: CapturedRouterUpdate, round_id: int, truth: Mapping[str, MemberTruth]
) -> CapturedRouterUpdate | None:
    """The update with the participants' ground truth attached, when every one supplied the
    embeddings of exactly the samples it used and a pool."""
    meta = upd.meta
    embs, pools = [], []
    for k, n in zip(meta.client_indices, meta.samples_per_client, strict=True):
        t = truth.get(meta.client_ids[k])
        emb = None if t is None else t.for_round(round_id)
        if t is None or emb is None or t.pool is None or emb.shape[0] != n:
            return None
        embs.append(emb)
        pools.append(t.pool)
    return CapturedRouterUpdate(meta, upd.before, upd.after, torch.cat(embs), torch.cat(pools))


def _attack_update(
    upd: CapturedRouterUpdate,
    round_id: int,
    name: str,
    truth: Mapping[str, MemberTruth],
    cfg: CaptureAuditConfig,
    out: Path,
    say: Callable[[str], None],
) -> tuple[list[ReconstructionReport], list[CaptureCheck]]:
    owner = update_owner(upd.meta)
    scored = _scored(upd, round_id, truth)
    if scored is not None:
        found = attack_captured_update(scored, name=name, config=cfg.inversion, progress=say)
        return [r.model_copy(update=owner) for r in found], []
    own = [m for m in owner["members"] if m in truth and truth[m].for_round(round_id) is not None]
    if own:
        # Only some participants brought ground truth: score the analytic reconstruction
        # against their samples (best match), beside baselines from their pools.
        t = truth[own[0]]
        emb = t.for_round(round_id)
        assert emb is not None
        x, _, _ = _row_agreement(upd)
        rep = reconstruction_report(
            emb.double(),
            x[None].double(),
            (t.pool if t.pool is not None else emb).double(),
            attack="analytic",
            setting=f"{name}: scored against {own[0]}'s samples only",
            best_match=True,
        )
        return [rep.model_copy(update={**owner, "members": [own[0]]})], []
    return [], [_recovery_check(upd, name, out / "recovered")]


def _queries_reports(
    cap: CaptureDir, truth: Mapping[str, MemberTruth], cfg: CaptureAuditConfig
) -> tuple[list[MembershipReport], list[CaptureCheck]]:
    queries = cap.reward_queries()
    if not queries:
        return [], []
    scores = np.array([q.score for q in queries])
    by_member = sorted({q.member for q in queries if q.member})
    at_clip = float(np.mean(np.isclose(np.abs(scores), np.abs(scores).max())))
    check = CaptureCheck(
        attack="none (log contents)",
        setting=f"reward-query log: {len(queries)} tuples from {len(by_member)} member(s)",
        statistic="share of scores at the largest magnitude",
        value=at_clip,
        baseline="membership needs candidate pairs: no score can be judged alone",
        recovered=f"{len(queries)} (image hash, prompt, response, score) tuples; scores mean "
        f"{scores.mean():.3f}, std {scores.std():.3f}",
        verdict="inconclusive: the member's own pairs are needed to score membership inference",
        members=by_member,
        artefact="reward-query log (captured)",
    )
    index = {(q.image_sha256, q.prompt, q.response): q.score for q in queries}
    reports = []
    for member, t in sorted(truth.items()):
        if not t.members or not t.non_members:
            continue
        margins: list[list[float]] = [[], []]
        for side, pairs in ((0, t.members), (1, t.non_members)):
            for p in pairs:
                for h in logged_as(p.image, t.image_files):
                    a, b = index.get((h, p.prompt, p.chosen)), index.get((h, p.prompt, p.rejected))
                    if a is not None and b is not None:
                        margins[side].append(a - b)
                        break
        if min(len(m) for m in margins) < 2:
            continue
        values = np.array(margins[0] + margins[1])
        n_in = len(margins[0])

        def scorer(idx: Sequence[int], v: np.ndarray = values) -> np.ndarray:
            return np.asarray(v[np.asarray(idx, dtype=np.int64)])

        attack = threshold_attack(
            scorer,
            list(range(n_in)),
            list(range(n_in, len(values))),
            seed=cfg.seed,
        )
        rep = membership_report(
            attack,
            setting=f"{member}: captured reward queries of its own pairs",
            n_boot=cfg.n_boot,
            seed=cfg.seed,
        )
        reports.append(
            rep.model_copy(update={"members": [member], "artefact": "reward-query log (captured)"})
        )
    return reports, [] if reports else [check]


def audit_capture_dir(
    capture_dir: str | Path,
    out_dir: str | Path,
    config: CaptureAuditConfig | None = None,
    *,
    truth: Mapping[str, MemberTruth] | None = None,
    progress: Callable[[str], None] | None = None,
) -> AuditReport:
    """Attack every artefact of a capture directory; write report.json and report.html into
    ``out_dir`` (and each reconstruction recovered without ground truth under
    ``out_dir/recovered``)."""
    cfg = config or CaptureAuditConfig()
    say = progress or (lambda _m: None)
    known = truth or {}
    cap = CaptureDir.open(capture_dir)
    out = Path(out_dir)
    recs: list[ReconstructionReport] = []
    checks: list[CaptureCheck] = []
    notes = list(_CAPTURE_NOTES)
    masked = sum(a.kind == "masked_input" for rnd in cap.manifest.rounds for a in rnd.artefacts)
    for rnd in cap.manifest.rounds:
        if rnd.status == "failed":
            notes.append(_failed_note(rnd))
            say(notes[-1])
        unknown = sorted(set(known) - set(rnd.meta.client_ids))
        if unknown:
            raise AttackInputError(
                f"ground truth for members not in round {rnd.round_id}: {unknown}"
            )
        shares: list[dict[str, Any]] = []
        for art in rnd.artefacts:
            name = _setting(rnd, art)
            say(f"{name}: attacking")
            if art.kind in ("plain_update", "aggregate"):
                r, c = _attack_update(cap.update(art), rnd.round_id, name, known, cfg, out, say)
                recs += r
                checks += c
            elif art.kind == "masked_input":
                checks.append(_masked_check(cap.masked(art), name, art.member or "", masked))
            else:
                shares.append(cap.unmasking(art))
        if shares:
            checks.append(_shares_check(rnd, shares))
    members, query_checks = _queries_reports(cap, known, cfg)
    report = AuditReport(
        title=f"fedmor privacy audit of the capture {Path(capture_dir).name}",
        reconstructions=recs,
        memberships=members,
        checks=[*checks, *query_checks],
        notes=notes,
        captured=True,
    )
    rows: list[ReconstructionReport | MembershipReport | CaptureCheck] = [
        *report.reconstructions,
        *report.memberships,
        *report.checks,
    ]
    for row in rows:
        say(f"{row.setting} ({row.attack}): {row.verdict}")
    write_report(report, out)
    return report


def _failed_note(rnd: CapturedRound) -> str:
    return (f"Round {rnd.round_id} ({rnd.round_kind}) failed: {rnd.failure or 'no reason kept'}. "
            "It published no router, so no aggregate is attacked; the checks of round "
            f"{rnd.round_id} cover the {len(rnd.artefacts)} message(s) the server received "
            "before it failed.")


def _setting(rnd: CapturedRound, art: CapturedArtefact) -> str:
    who = f" of {art.member}" if art.member else ""
    return f"{_round_name(rnd)} {art.kind.replace('_', ' ')}{who}"


def _round_name(rnd: CapturedRound) -> str:
    return f"round {rnd.round_id}" + (" (failed)" if rnd.status == "failed" else "")


_CAPTURE_NOTES = (
    "Attacked from a capture directory: exactly what the server received and published. "
    "Without a member's ground truth a finding says what the attacker recovered and how it "
    "compares with a trivial baseline; with it, reconstructions and membership are scored.",
)
