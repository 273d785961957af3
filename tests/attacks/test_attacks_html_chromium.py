"""report.html renders in headless Chromium (Debian's ``chromium``) and every image loads."""

from __future__ import annotations

import os
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
    write_report(AuditReport(memberships=[mem], reconstructions=[rec], notes=["test"]), out)
    return out


def test_report_page_and_images_load_in_chromium(
    chromium: str, report_dir: Path, tmp_path: Path
) -> None:
    page = (report_dir / "report.html").read_text()
    n_images = page.count("<img ")
    assert n_images >= 2  # the ROC figure and the reconstruction grid
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", PROBE + "</body>"))
    dom = subprocess.run(
        [chromium, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", probe.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "fedmor privacy audit" in dom.stdout
    assert f"IMAGES {n_images}/{n_images}" in dom.stdout, dom.stdout[-500:]


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
