"""report.html renders in headless Chromium (Debian's ``chromium``) and every image loads."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from attacks import (
    AttackScores,
    AuditReport,
    baseline_guesses,
    membership_report,
    plot_reconstruction_grid,
    reconstruction_report,
    write_report,
)

CHROMIUM = "/usr/bin/chromium"
# Fetches nothing from anywhere: the report is one file with data-URI images.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--virtual-time-budget=5000",
]
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


def _ensure_chromium() -> str:
    if os.path.exists(CHROMIUM):
        return CHROMIUM
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        pytest.skip("chromium is missing and cannot be installed here (no apt-get or not root)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]):
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            pytest.skip(f"could not install chromium ({' '.join(cmd)}): {done.stderr[-300:]}")
    if not os.path.exists(CHROMIUM):
        pytest.skip("apt-get installed chromium but /usr/bin/chromium is missing")
    return CHROMIUM


@pytest.fixture(scope="module")
def chromium() -> str:
    return _ensure_chromium()


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
# What a reader sees: red, amber and green backgrounds (the page's CSS), as Chromium computes.
COLOURS = {
    "leak": "rgb(198, 40, 40)",
    "inconclusive": "rgb(249, 168, 37)",
    "no measurable leak": "rgb(46, 125, 50)",
}


def _dump_dom(chromium: str, page: str, probe_script: str, tmp_path: Path) -> str:
    """The DOM after load of ``page`` with ``probe_script`` appended to its body."""
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", probe_script + "</body>"))
    dom = subprocess.run(
        [chromium, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", probe.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    return dom.stdout


def test_report_page_and_images_load_in_chromium(
    chromium: str, report_dir: Path, tmp_path: Path
) -> None:
    page = (report_dir / "report.html").read_text()
    n_images = page.count("<img ")
    assert n_images >= 2  # the ROC figure and the reconstruction grid
    dom = _dump_dom(chromium, page, PROBE, tmp_path)
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
    dom = _dump_dom(chromium, (report_dir / "report.html").read_text(), SUMMARY_PROBE, tmp_path)
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
