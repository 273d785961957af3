"""The three guides' quickstarts run as written, on 127.0.0.1.

The ``bash`` blocks under each guide's "Quickstart" heading are run in order in one shell, in an
empty folder, with ``fedmor`` on the PATH; only the ports are swapped for free ones. The privacy
officer's runs the demo and two audits (about 8 minutes on 2 cores), so it is marked slow.
"""

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from attacks import AuditReport, verdict_level
from tests._checkout import checkout_env

ROOT = Path(__file__).resolve().parents[1]
GUIDES = ROOT / "docs" / "guides"


def quickstart(guide: str) -> str:
    """The guide's quickstart blocks, joined in order."""
    text = (GUIDES / f"{guide}.md").read_text()
    # "## Quickstart" or "## Quickstart: <what it does>"
    section = re.split(r"\n## Quickstart(?::[^\n]*)?\n", text, maxsplit=1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    assert blocks, f"{guide}.md: no bash block under its Quickstart heading"
    return "\n".join(blocks)


def _free_run(n: int) -> int:
    """A port p with p .. p + n - 1 all free on 127.0.0.1."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n > 65535:
            continue
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no run of free ports")


def run_quickstart(guide: str, tmp_path: Path, timeout: float = 600) -> str:
    script = quickstart(guide)
    server, clients = _free_run(1), _free_run(3)
    script = script.replace("8443", str(server))
    for k, doc_port in enumerate(("9441", "9442", "9443")):
        script = script.replace(doc_port, str(clients + k))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "fedmor"  # the console script, pointing at this checkout
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m sdk.cli "$@"\n')
    shim.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    env = checkout_env(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", OMP_NUM_THREADS="1")
    proc = subprocess.Popen(["bash", "-euo", "pipefail", "-c", script], cwd=work, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        with contextlib.suppress(ProcessLookupError):  # apps the script's exit trap missed
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()
    assert proc.returncode == 0, out[-4000:]
    return out


pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("curl") is None,
                                reason="the quickstarts need bash and curl")


def test_member_quickstart(tmp_path: Path) -> None:
    out = run_quickstart("member", tmp_path)
    accuracy = re.search(r'"pairwise_accuracy": \{"data/clients/detail/eval": ([0-9.]+)\}', out)
    assert accuracy and float(accuracy.group(1)) >= 0.75, out[-2000:]  # fedmor rm eval's line
    rounds = re.findall(r'\{"round_id":1,.*?"status":"(\w+)".*?"participants":\[([^\]]*)\]', out)
    assert rounds and rounds[-1][0] == "finished", out[-2000:]
    assert len(rounds[-1][1].split(",")) == 1  # the member's own client did the round
    assert (tmp_path / "work" / "reward" / "normalizer.json").is_file()


def test_operator_quickstart(tmp_path: Path) -> None:
    out = run_quickstart("operator", tmp_path)
    final = re.findall(r'\{"round_id":1,"kind":"router_secagg","status":"(\w+)".*?'
                       r'"participants":\[([^\]]*)\],.*?"dropouts":\[([^\]]*)\]', out)
    assert final and final[-1][0] == "finished", out[-2000:]
    assert len(final[-1][1].split(",")) == 3 and final[-1][2] == ""
    assert re.search(r'\{"version":1,"round_id":1,.*"length":10000', out), out[-2000:]


@pytest.mark.slow
def test_privacy_officer_quickstart(tmp_path: Path) -> None:
    out = run_quickstart("privacy-officer", tmp_path, timeout=3600)
    audit = tmp_path / "work" / "runs" / "demo" / "audit"
    # the last command's report: client `detail` only, threshold attacks and LiRA
    report = AuditReport.model_validate_json((audit / "report.json").read_text())
    attacks = {m.attack for m in report.memberships}
    assert any("lira" in a.lower() for a in attacks), sorted(attacks)
    levels = {verdict_level(m.verdict) for m in report.memberships}
    assert levels <= {"leak", "inconclusive", "no measurable leak"}, out[-2000:]
    assert "detail" in [m.member for m in report.summary.members]
    assert (audit / "report.html").is_file()
