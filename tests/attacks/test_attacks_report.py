"""Report models, verdict wording, plots and the self-contained HTML."""

import base64
import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
from PIL import Image

from attacks import (
    AuditReport,
    baseline_guesses,
    plot_reconstruction_grid,
    reconstruction_report,
    write_report,
)
from attacks._html import VERDICT_CLASSES
from attacks._membership import AttackScores
from attacks._metrics import MetricSummary
from attacks._plots import plot_roc, roc_figure
from attacks._report import NO_LEAK, membership_report, reconstruction_verdict
from attacks._roc import roc_curve

RNG = np.random.default_rng(0)


def _summary(mean: float, lo: float, hi: float) -> MetricSummary:
    return MetricSummary(metric="psnr", mean=mean, ci_low=lo, ci_high=hi, n=8)


def test_reconstruction_verdict_wording() -> None:
    baselines = {
        "grey": {"psnr": _summary(10.8, 10.5, 11.1)},
        "dataset_mean": {"psnr": _summary(12.0, 11.5, 12.6)},
    }
    assert reconstruction_verdict("psnr", _summary(12.2, 11.0, 13.0), baselines).startswith(NO_LEAK)
    assert reconstruction_verdict("psnr", _summary(5.0, 4.0, 6.0), baselines).startswith(NO_LEAK)
    leak = reconstruction_verdict("psnr", _summary(25.8, 25.0, 26.5), baselines)
    assert leak.startswith("leaks: 15.0 dB above the grey baseline")


def _png_ok(data: bytes) -> tuple[int, int]:
    img = Image.open(io.BytesIO(data))
    img.load()
    return img.size


def _audit(tmp_path: Path) -> AuditReport:
    originals, pool = RNG.random((3, 3, 16, 16)), RNG.random((10, 3, 16, 16))
    recon = np.clip(originals + RNG.normal(0, 0.05, originals.shape), 0, 1)
    rec = reconstruction_report(
        originals, recon, pool, attack="inverting-gradients", setting="unprotected"
    )
    grid = plot_reconstruction_grid(
        originals,
        {"reconstruction": recon},
        tmp_path / "out" / "grid.png",
        baselines=baseline_guesses(originals, pool),
    )
    rec.figures.append(grid.name)  # relative to the output folder
    y = np.r_[np.ones(50), np.zeros(50)].astype(int)
    leak = membership_report(
        AttackScores("threshold", y + RNG.normal(0, 0.7, 100), y), setting="unprotected"
    )
    null = membership_report(
        AttackScores("threshold", RNG.normal(0, 1, 100), y), setting="norm+clip"
    )
    return AuditReport(
        reconstructions=[rec], memberships=[leak, null], notes=["synthetic test data"]
    )


def test_plots_write_pngs(tmp_path: Path) -> None:
    y = np.r_[np.ones(20), np.zeros(20)].astype(int)
    curve = roc_curve(y + RNG.normal(0, 1, 40), y)
    w, h = _png_ok(plot_roc({"a": curve}, tmp_path / "roc.png").read_bytes())
    assert w > h > 100  # two panels side by side


def test_html_is_self_contained_and_embeds_images(tmp_path: Path) -> None:
    report = _audit(tmp_path)
    js, page = write_report(report, tmp_path / "out")
    html = page.read_text(encoding="utf-8")
    uris = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert len(uris) == 2  # the ROC figure and the reconstruction grid
    sizes = [_png_ok(base64.b64decode(u)) for u in uris]
    assert all(w > 100 and h > 100 for w, h in sizes)
    assert not re.search(r'(src|href)="(?!data:)', html)  # nothing loaded from elsewhere
    assert "leaks" in html and "within the null band" in html
    assert "window_size" in html  # SSIM parameters are reported
    back = AuditReport.model_validate(json.loads(js.read_text()))
    assert back == report




def test_audit_summary_names_inconclusive_settings() -> None:
    """Seen on a real demo run: a client whose AUC interval straddled the null band was
    summarized as "no measurable leak in any of the 6 settings"."""
    from attacks._audit import _summaries

    rng = np.random.default_rng(3)
    y = np.repeat([1, 0], 50)
    leak = membership_report(AttackScores("threshold", y + rng.normal(0, 0.7, 100), y), setting="a")
    null = membership_report(AttackScores("threshold", rng.normal(0, 1, 100), y), setting="b")
    assert leak.verdict.startswith("leaks") and not null.verdict.startswith(("leaks", "incon"))
    unclear = null.model_copy(update={"setting": "c", "verdict": "inconclusive: AUC outside"})
    assert _summaries([null, unclear], []) == [
        "Membership inference is inconclusive in 1 of 2 settings: c (threshold)."
    ]
    assert _summaries([leak, null, unclear], []) == [
        "Membership inference leaks in 1 of 3 settings: a (threshold). "
        "It is inconclusive in 1 of 3 settings: c (threshold)."
    ]
    assert _summaries([null], []) == [
        "Membership inference: no measurable leak in any of the 1 settings."
    ]


class _SummaryParser(HTMLParser):
    """(member, artefact, verdict text, verdict classes) of every summary row of a report."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[str, str, str, set[str]]] = []
        self.member = self.artefact = ""
        self.classes: set[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "section" and "member" in (a.get("class") or "").split():
            self.member = a.get("data-member") or ""
        if tag == "tr" and "artefact" in (a.get("class") or "").split():
            self.artefact = a.get("data-artefact") or ""
        if tag == "span" and self.artefact and "verdict" in (a.get("class") or "").split():
            self.classes = set((a.get("class") or "").split())

    def handle_data(self, data: str) -> None:
        if self.classes is not None:
            self.rows.append((self.member, self.artefact, data, self.classes))
            self.classes, self.artefact = None, ""


def _summary_report(tmp_path: Path) -> AuditReport:
    base = _audit(tmp_path)
    leak, null = base.memberships
    unclear = null.model_copy(
        update={"setting": "c", "verdict": "inconclusive: AUC outside the band"}
    )
    return base.model_copy(
        update={
            "memberships": [
                leak.model_copy(update={"members": ["bank"], "artefact": ARTEFACT_RAW}),
                null.model_copy(update={"members": ["bank"], "artefact": ARTEFACT_ANSWERS}),
                null.model_copy(update={"members": ["clinic"], "artefact": ARTEFACT_ANSWERS}),
                unclear.model_copy(update={"members": ["clinic"], "artefact": ARTEFACT_ANSWERS}),
            ],
            "reconstructions": [
                r.model_copy(update={"members": ["bank", "clinic"]}) for r in base.reconstructions
            ],
        }
    )


ARTEFACT_RAW, ARTEFACT_ANSWERS = "reward model (raw scores)", "reward answers (/v1/reward)"


def test_summary_verdicts_in_html_match_report_json(tmp_path: Path) -> None:
    js, page = write_report(_summary_report(tmp_path), tmp_path / "out")
    summary = json.loads(js.read_text())["summary"]
    want = {
        (m["member"], v["artefact"]): v["level"] for m in summary["members"] for v in m["verdicts"]
    }
    # The worst setting decides: an inconclusive setting beside a null one is inconclusive.
    assert want == {
        ("bank", ARTEFACT_RAW): "leak",
        ("bank", ARTEFACT_ANSWERS): "no measurable leak",
        ("bank", "gradient inversion"): "leak",
        ("clinic", ARTEFACT_ANSWERS): "inconclusive",
        ("clinic", "gradient inversion"): "leak",
    }
    html = page.read_text(encoding="utf-8")
    parser = _SummaryParser()
    parser.feed(html)
    assert {(m, a): text for m, a, text, _ in parser.rows} == want
    assert len(parser.rows) == len(want)
    for member, artefact, _text, classes in parser.rows:
        assert VERDICT_CLASSES[want[member, artefact]] in classes, (member, artefact, classes)
    # Three distinct colours: inconclusive is amber, not the green of "no measurable leak".
    colours = {
        c: re.search(rf"\.{c}\{{background:(#[0-9a-f]{{6}})", html)
        for c in VERDICT_CLASSES.values()
    }
    assert all(colours.values()) and len({m.group(1) for m in colours.values() if m}) == 3
    assert html.index('id="summary"') < html.index("<h2>Membership inference")
    advice = {
        v["artefact"]: v["advice"]
        for m in summary["members"]
        for v in m["verdicts"]
        if m["member"] == "bank"
    }
    assert "DP-SGD at epsilon <= 1" in advice[ARTEFACT_RAW]
    assert "more samples needed" in summary["members"][1]["verdicts"][0]["advice"]


def test_roc_legend_sits_outside_both_axes() -> None:
    y = np.r_[np.ones(20), np.zeros(20)].astype(int)
    curves = {f"setting {i}": roc_curve(y + RNG.normal(0, 1, 40), y) for i in range(4)}
    fig = roc_figure(curves, null_band=(0.4, 0.6))
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    legend = fig.legends[0].get_window_extent(renderer)
    for ax in fig.axes:
        assert ax.get_legend() is None
        assert not legend.overlaps(ax.get_window_extent(renderer))
    assert len(fig.legends[0].get_texts()) == 5  # four settings and the random line
