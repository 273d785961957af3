"""report.html renders in headless Chromium (Debian's ``chromium``): every image loads, the
summary's verdicts and colours match report.json, and a capture audit shows one section per
captured artefact kind with its attack, baseline, interval and verdict."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from attacks import (
    AuditReport,
    baseline_guesses,
    plot_reconstruction_grid,
    reconstruction_report,
    write_report,
)
from attacks._membership import AttackScores
from attacks._report import membership_report
from sdk.data import load_pairs
from tests._chromium import (
    COLOURS,
    FLAGS,
    INTERVAL,
    capture_sections,
    dump_dom,
    ensure_chromium,
)

# Appended to a copy of the page: after load, a marker says how many images decoded.
PROBE = """<script>
window.addEventListener('load', () => {
  const imgs = Array.from(document.images);
  const ok = imgs.filter(i => i.complete && i.naturalWidth > 0).length;
  const p = document.createElement('p');
  p.id = 'probe';
  p.textContent = 'IMAGES ' + ok + '/' + imgs.length;
  document.body.appendChild(p);
});
</script>"""


@pytest.fixture(scope="module")
def chromium() -> str:
    return ensure_chromium()


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report")
    rng = np.random.default_rng(0)
    labels = np.r_[np.ones(50, dtype=np.int64), np.zeros(50, dtype=np.int64)]
    mem = membership_report(
        AttackScores("threshold", rng.normal(size=100) + labels, labels), setting="raw", n_boot=200
    )
    originals = rng.uniform(size=(2, 3, 16, 16))
    pool = rng.uniform(size=(16, 3, 16, 16))
    noisy = np.clip(originals + 0.05 * rng.normal(size=originals.shape), 0, 1)
    rec = reconstruction_report(
        originals, noisy, pool, attack="inverting-gradients", setting="unprotected"
    )
    grid = plot_reconstruction_grid(
        originals, {"attack": noisy}, out / "grid.png", baselines=baseline_guesses(originals, pool)
    )
    rec.figures.append(grid.name)
    # Two members: one leaking reward model, one inconclusive (amber, not green), and a
    # plaintext router update of the first.
    unclear = mem.model_copy(
        update={"verdict": "inconclusive: AUC outside the band", "members": ["clinic"]}
    )
    report = AuditReport(
        memberships=[mem.model_copy(update={"members": ["bank"]}), unclear],
        reconstructions=[rec.model_copy(update={"members": ["bank"]})],
        notes=["test"],
    )
    write_report(report, out)
    return out


# After load: "SUMMARY member|artefact|text|background colour;..." of every summary verdict.
SUMMARY_PROBE = """<script>
window.addEventListener('load', () => {
  const rows = Array.from(document.querySelectorAll('#summary section.member tr.artefact'));
  const cells = rows.map(tr => {
    const span = tr.querySelector('span.verdict');
    const member = tr.closest('section').dataset.member;
    return [member, tr.dataset.artefact, span.textContent,
            getComputedStyle(span).backgroundColor].join('|');
  });
  const p = document.createElement('p');
  p.id = 'summary-probe';
  p.textContent = 'SUMMARY ' + cells.join(';') + ' END';
  document.body.appendChild(p);
});
</script>"""
def test_report_page_and_images_load_in_chromium(
    chromium: str, report_dir: Path, tmp_path: Path
) -> None:
    page = (report_dir / "report.html").read_text()
    n_images = page.count("<img ")
    assert n_images >= 2  # the ROC figure and the reconstruction grid
    dom = dump_dom(chromium, page, PROBE, tmp_path)
    assert "fedmor privacy audit" in dom
    assert f"IMAGES {n_images}/{n_images}" in dom, dom[-500:]


def test_summary_verdicts_and_colours_in_chromium_match_report_json(
    chromium: str, report_dir: Path, tmp_path: Path
) -> None:
    summary = json.loads((report_dir / "report.json").read_text())["summary"]
    want = {
        (m["member"], v["artefact"]): v["level"] for m in summary["members"] for v in m["verdicts"]
    }
    assert sorted(set(want.values())) == ["inconclusive", "leak"]
    dom = dump_dom(chromium, (report_dir / "report.html").read_text(), SUMMARY_PROBE, tmp_path)
    found = re.search(r'id="summary-probe">SUMMARY (.*?) END<', dom)
    assert found, dom[-500:]
    seen = [cell.split("|") for cell in found.group(1).split(";")]
    assert {(m, a): text for m, a, text, _ in seen} == want
    for member, artefact, text, colour in seen:
        assert colour == COLOURS[text], (member, artefact, colour)


def test_report_screenshot_is_not_blank(chromium: str, report_dir: Path, tmp_path: Path) -> None:
    shot = tmp_path / "shot.png"
    done = subprocess.run(
        [
            chromium,
            *FLAGS,
            f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=1200,1600",
            f"--screenshot={shot}",
            (report_dir / "report.html").as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    pixels = np.asarray(Image.open(shot).convert("L"), dtype=np.float64)
    assert pixels.shape == (1600, 1200)
    assert pixels.std() > 10  # text, tables and plots, not a blank page
    # Colour from the plots (ROC lines, image grid), not only black text on white.
    rgb = np.asarray(Image.open(shot).convert("RGB"), dtype=np.int64)
    assert (np.ptp(rgb, axis=2) > 60).mean() > 0.001


@pytest.fixture(scope="module")
def capture_report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``fedmor audit --capture`` on real in-process rounds (a plaintext single-sample round
    and a SecAgg round of three, their reward queries), scored with the members' ground
    truth: every artefact kind a server captures, with and without an interval to show."""
    from _attack_kit import build_capture, synth_client_data

    from attacks import audit_capture_dir

    root = tmp_path_factory.mktemp("captured")
    data = synth_client_data(root / "data", train_pairs=24, eval_pairs=16)
    cap, truth = build_capture(root / "cap", data)
    truth["a"] = dataclasses.replace(truth["a"], members=load_pairs(data / "train"),
                                     non_members=load_pairs(data / "eval"))
    audit_capture_dir(cap, root / "audit", truth=truth)
    return root / "audit"


def test_capture_sections_show_attack_baseline_ci_and_verdict_in_chromium(
    chromium: str, capture_report_dir: Path, tmp_path: Path
) -> None:
    """One section per captured artefact kind, each finding with its attack, its trivial
    baseline, its 95% interval (or why there is none) and its verdict in words and colour,
    exactly as report.json has them."""
    seen = capture_sections(chromium, capture_report_dir, tmp_path)
    assert set(seen) == {
        "router update, plaintext (no secure aggregation)",
        "router aggregate (published)",
        "masked input (secure aggregation)",
        "unmasking shares (secure aggregation)",
        "reward-query log (captured)",
    }
    # Scored rows carry a real interval: the plaintext update's reconstruction and the
    # membership attack on the captured reward answers.
    for kind in ("router update, plaintext (no secure aggregation)",
                 "reward-query log (captured)"):
        assert any(INTERVAL.match(ci) for _, ci, *_ in seen[kind]), kind
