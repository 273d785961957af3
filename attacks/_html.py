"""A self-contained report.html: tables, verdicts and every PNG embedded as a data URI."""

from __future__ import annotations

import base64
import html
from pathlib import Path

from attacks._errors import AttackInputError
from attacks._metrics import MetricSummary
from attacks._plots import plot_roc
from attacks._report import AuditReport, MembershipReport, ReconstructionReport
from attacks._summary import AuditSummary, VerdictLevel, verdict_level

__all__ = ["VERDICT_CLASSES", "render_html", "write_report"]

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:0.9em}
td,th{border:1px solid #bbb;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eee}
.verdict{font-weight:bold;padding:1px 6px;border-radius:3px;color:#fff}
.v-leak{background:#c62828}.v-inconclusive{background:#f9a825;color:#222}
.v-none{background:#2e7d32}
#summary{display:flex;flex-wrap:wrap;gap:1em}
.member{border:1px solid #bbb;border-radius:6px;padding:0.5em 1em;flex:1 1 480px}
.member h3{margin:0.3em 0}.member table{width:100%;margin:0.3em 0}
.member .verdict{white-space:nowrap}
img{max-width:100%;border:1px solid #ddd;margin:0.5em 0}
"""
# The colour class of each verdict level: red, amber, green.
VERDICT_CLASSES: dict[VerdictLevel, str] = {
    "leak": "v-leak",
    "inconclusive": "v-inconclusive",
    "no measurable leak": "v-none",
}
"""The HTML class (red, amber, green) of each verdict level in the report."""


def _esc(x: object) -> str:
    return html.escape(str(x))


def _fig(m: MetricSummary) -> str:
    return f"{m.mean:.3f} [{m.ci_low:.3f}, {m.ci_high:.3f}]"


def _verdict(v: str) -> str:
    return f'<span class="verdict {VERDICT_CLASSES[verdict_level(v)]}">{_esc(v)}</span>'


def _summary(summary: AuditSummary) -> str:
    """One card per member: a row per artefact kind with the verdict's word and colour, and
    what to do about it."""
    cards = []
    for m in summary.members:
        rows = "".join(
            f'<tr class="artefact" data-artefact="{_esc(v.artefact)}"><td>{_esc(v.artefact)}</td>'
            f'<td><span class="verdict {VERDICT_CLASSES[v.level]}">{_esc(v.level)}</span></td>'
            f"<td>{_esc(v.advice)}<br><small>{len(v.settings)} of {v.n_settings} setting(s): "
            f"{_esc('; '.join(v.settings))}</small></td></tr>"
            for v in m.verdicts
        )
        cards.append(
            f'<section class="member" data-member="{_esc(m.member)}"><h3>{_esc(m.member)}</h3>'
            "<table><tr><th>artefact</th><th>verdict</th><th>what to do</th></tr>"
            f"{rows}</table></section>"
        )
    return '<h2>Summary</h2><div id="summary">' + "".join(cards) + "</div>"


def _img(path: Path, alt: str) -> str:
    if not path.is_file():
        raise AttackInputError(f"figure {path} does not exist")
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<figure><img alt="{_esc(alt)}" src="data:image/png;base64,{data}"><figcaption>{_esc(alt)}</figcaption></figure>'


def _resolve(p: str, out_dir: Path) -> Path:
    path = Path(p)
    return path if path.is_absolute() else out_dir / path


def _membership_table(rows: list[MembershipReport]) -> str:
    fprs = list(rows[0].tpr_at_fpr)
    head = "".join(f"<th>TPR@FPR {_esc(f)}</th>" for f in fprs)
    body = []
    for r in rows:
        tprs = "".join(f"<td>{r.tpr_at_fpr.get(f, float('nan')):.3f}</td>" for f in fprs)
        body.append(
            f"<tr><td>{_esc(r.attack)}</td><td>{_esc(r.setting)}</td>"
            f"<td>{r.n_members} / {r.n_non_members}</td>"
            f"<td>{r.auc:.3f} [{r.auc_ci[0]:.3f}, {r.auc_ci[1]:.3f}]</td>"
            f"<td>[{r.null_band[0]:.3f}, {r.null_band[1]:.3f}]</td>{tprs}"
            f"<td>{_verdict(r.verdict)}</td></tr>"
        )
    return (
        "<table><tr><th>attack</th><th>setting</th><th>members / non-members</th>"
        f"<th>AUC [{rows[0].ci_level:.0%} CI]</th><th>null band</th>{head}<th>verdict</th></tr>"
        + "".join(body)
        + "</table>"
    )


def _reconstruction_table(rows: list[ReconstructionReport]) -> str:
    body = []
    for r in rows:
        metrics = "<br>".join(f"{_esc(k)}: {_fig(v)}" for k, v in r.metrics.items())
        bases = "<br>".join(
            f"{_esc(name)} {_esc(k)}: {_fig(v)}"
            for name, b in r.baselines.items()
            for k, v in b.items()
        )
        lp = f"{r.lpips:.4f}" if r.lpips is not None else _esc(r.lpips_status)
        body.append(
            f"<tr><td>{_esc(r.attack)}</td><td>{_esc(r.setting)}</td><td>{_esc(r.step or '')}</td>"
            f"<td>{metrics}</td><td>{bases}</td><td>{lp}</td><td>{_verdict(r.verdict)}</td></tr>"
        )
    params = next((r.ssim_params for r in rows if r.ssim_params is not None), None)
    note = f"<p>SSIM parameters: {_esc(params.model_dump())}</p>" if params else ""
    return (
        "<table><tr><th>attack</th><th>setting</th><th>step</th><th>figure [95% CI]</th>"
        "<th>trivial baselines (same metric)</th><th>LPIPS</th><th>verdict</th></tr>"
        + "".join(body)
        + "</table>"
        + note
    )


_EXACT_CI = "none: computed exactly from the captured bytes (no sampling)"


def _captured_rows(report: AuditReport) -> dict[str, list[str]]:
    """One row per finding on a captured artefact, grouped by artefact kind (first seen first):
    attack, setting, what the attacker recovered, the statistic, its 95% interval, the trivial
    baseline beside it and the verdict. Reconstructions and membership rows count only when
    every row of the report attacks a capture (``report.captured``)."""
    rows: dict[str, list[str]] = {}

    def add(kind: str, cells: tuple[str, str, str, str, str, str], verdict: str) -> None:
        names = ("attack", "setting", "recovered", "statistic", "ci", "baseline")
        tds = "".join(f'<td class="{n}">{_esc(c)}</td>' for n, c in zip(names, cells, strict=True))
        rows.setdefault(kind, []).append(
            f'<tr class="finding">{tds}<td class="verdict-cell">{_verdict(verdict)}</td></tr>')

    scored = report.captured
    for r in report.reconstructions if scored else []:
        key, m = r.primary_metric, r.metrics[r.primary_metric]
        bases = "; ".join(f"{name}: {b[key].mean:.3f} [{b[key].ci_low:.3f}, {b[key].ci_high:.3f}]"
                          for name, b in r.baselines.items())
        add(r.artefact, (r.attack, r.setting, f"a reconstruction, scored against the member's "
                         f"samples ({r.target})", f"{key}: {m.mean:.4g}",
                         f"[{m.ci_low:.3f}, {m.ci_high:.3f}]", f"{bases} ({key})"), r.verdict)
    for mr in report.memberships if scored else []:
        add(mr.artefact, (mr.attack, mr.setting, f"scores of {mr.n_members} member and "
                          f"{mr.n_non_members} non-member pairs", f"AUC: {mr.auc:.3f}",
                          f"[{mr.auc_ci[0]:.3f}, {mr.auc_ci[1]:.3f}]",
                          f"a random guess: AUC in the null band [{mr.null_band[0]:.3f}, "
                          f"{mr.null_band[1]:.3f}]"), mr.verdict)
    for c in report.checks:
        ci = _EXACT_CI if c.ci is None else f"[{c.ci[0]:.3f}, {c.ci[1]:.3f}]"
        add(c.artefact, (c.attack, c.setting, c.recovered, f"{c.statistic}: {c.value:.4g}", ci,
                         c.baseline), c.verdict)
    return rows


def _captured_sections(report: AuditReport) -> str:
    """One section per captured artefact kind, each a table of its findings."""
    head = ("<table><tr><th>attack</th><th>setting</th><th>what the attacker recovered</th>"
            "<th>statistic</th><th>95% CI</th><th>trivial baseline</th><th>verdict</th></tr>")
    return "".join(
        f'<section class="captured" data-artefact="{_esc(kind)}"><h3>{_esc(kind)}</h3>'
        + head + "".join(rows) + "</table></section>"
        for kind, rows in _captured_rows(report).items())


def render_html(report: AuditReport, out_dir: str | Path) -> Path:
    """Write ``out_dir/report.html`` (plus an ROC PNG when there are membership results);
    figures named in the report, relative to ``out_dir`` or absolute, are embedded inline."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    parts = [f"<h1>{_esc(report.title)}</h1>"]
    summary = report.compute_summary()
    if summary.members:
        parts.append(_summary(summary))
    parts += [f"<p>{_esc(n)}</p>" for n in report.notes]
    if report.memberships:
        parts.append("<h2>Membership inference</h2>")
        parts.append(_membership_table(report.memberships))
        curves = {f"{r.attack} / {r.setting}": r.roc for r in report.memberships}
        roc_png = plot_roc(curves, out / "roc.png", null_band=report.memberships[0].null_band)
        parts.append(_img(roc_png, "ROC curves, linear and log-log axes"))
        for r in report.memberships:
            parts += [_img(_resolve(f, out), f"{r.attack} / {r.setting}") for f in r.figures]
    if report.reconstructions:
        parts.append("<h2>Gradient inversion</h2>")
        parts.append(_reconstruction_table(report.reconstructions))
        for rr in report.reconstructions:
            parts += [_img(_resolve(f, out), f"{rr.attack} / {rr.setting}") for f in rr.figures]
    if report.checks or report.captured:
        parts.append("<h2>Captured artefacts</h2>")
        parts.append(_captured_sections(report))
    parts += [_img(_resolve(f, out), Path(f).name) for f in report.figures]
    page = (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{_esc(report.title)}</title><style>{_CSS}</style></head><body>"
        + "\n".join(parts)
        + "</body></html>"
    )
    path = out / "report.html"
    path.write_text(page, encoding="utf-8")
    return path


def write_report(report: AuditReport, out_dir: str | Path) -> tuple[Path, Path]:
    """Write ``report.json`` and ``report.html`` into ``out_dir``; returns both paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # Rows may have changed since the report was built: its summary is derived afresh.
    fresh = report.model_copy(update={"summary": report.compute_summary()})
    js = out / "report.json"
    js.write_text(fresh.model_dump_json(indent=2), encoding="utf-8")
    return js, render_html(fresh, out)
