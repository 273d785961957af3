"""Headless Chromium (Debian's ``chromium``) for the report tests: the page's DOM after load
with a probe script appended, and the check of a capture audit's sections against its
report.json, shared by the built-capture test (tests/attacks) and the demo-capture test."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from attacks._summary import verdict_level

__all__ = ["COLOURS", "FLAGS", "INTERVAL", "capture_sections", "dump_dom", "ensure_chromium"]

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
# What a reader sees: red, amber and green backgrounds (the page's CSS), as Chromium computes.
COLOURS = {
    "leak": "rgb(198, 40, 40)",
    "inconclusive": "rgb(249, 168, 37)",
    "no measurable leak": "rgb(46, 125, 50)",
}


def ensure_chromium() -> str:
    """The Chromium binary, installed with apt-get when it is missing (else the test skips)."""
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


def dump_dom(chromium: str, page: str, probe_script: str, tmp_path: Path) -> str:
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


# After load: "CAPTURED <JSON> END", every captured section's kind and its rows (attack, CI,
# baseline, verdict text, verdict colour) as Chromium rendered them.
CAPTURE_PROBE = """<script>
window.addEventListener('load', () => {
  const sections = Array.from(document.querySelectorAll('section.captured'));
  const out = sections.map(s => [s.dataset.artefact, Array.from(
      s.querySelectorAll('tr.finding')).map(tr => {
    const cell = c => tr.querySelector('td.' + c).textContent;
    const span = tr.querySelector('span.verdict');
    return [cell('attack'), cell('ci'), cell('baseline'), span.textContent,
            getComputedStyle(span).backgroundColor];
  })]);
  const p = document.createElement('p');
  p.id = 'capture-probe';
  p.textContent = 'CAPTURED ' + JSON.stringify(out) + ' END';
  document.body.appendChild(p);
});
</script>"""
INTERVAL = re.compile(r"^\[-?\d+\.\d{3}, -?\d+\.\d{3}\]$")


def capture_sections(chromium: str, report_dir: Path, tmp_path: Path) -> dict[str, list[list[str]]]:
    """The captured sections of ``report_dir``'s report.html as Chromium renders them, checked
    against its report.json: one section per artefact kind, each finding with its attack, its
    trivial baseline, its 95% interval (or why there is none) and its verdict in words and
    colour, exactly as report.json has them. Returns kind -> [attack, ci, baseline, verdict,
    colour] rows for the caller's own checks."""
    report = json.loads((report_dir / "report.json").read_text())
    assert report["captured"] is True
    rows = [*report["reconstructions"], *report["memberships"], *report["checks"]]
    want: dict[str, list[tuple[str, str]]] = {}
    for r in rows:
        want.setdefault(r["artefact"], []).append((r["attack"], r["verdict"]))
    dom = dump_dom(chromium, (report_dir / "report.html").read_text(), CAPTURE_PROBE, tmp_path)
    found = re.search(r'id="capture-probe">CAPTURED (.*?) END<', dom)
    assert found, dom[-500:]
    sections = json.loads(html.unescape(found.group(1)))
    seen: dict[str, list[list[str]]] = dict(sections)
    assert len(seen) == len(sections), "an artefact kind has two sections"
    assert set(seen) == set(want), (sorted(seen), sorted(want))
    for kind, findings in seen.items():
        assert sorted((a, v) for a, _, _, v, _ in findings) == sorted(want[kind]), kind
        for attack, ci, baseline, verdict, colour in findings:
            assert attack and baseline, (kind, attack)
            assert INTERVAL.match(ci) or ci.startswith("none: computed exactly"), (kind, ci)
            assert colour == COLOURS[verdict_level(verdict)], (kind, verdict, colour)
    return seen
