"""The three guides' quickstarts run as written, on 127.0.0.1.

The ``bash`` blocks under each guide's "Quickstart" heading are run in order in one shell, in an
empty folder, with ``fedmor`` on the PATH (and ``openssl`` for the operator's TLS); only the
ports are swapped for free ones. No guide calls ``curl`` or Python: every step is a ``fedmor``
command. The privacy
officer's runs the demo and two audits (about 8 minutes on 2 cores), so it is marked slow.
"""

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from attacks import AuditReport
from attacks._summary import verdict_level
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
    server, clients = _free_run(1), _free_run(4)
    script = script.replace("8443", str(server))
    for k, doc_port in enumerate(("9441", "9442", "9443", "9444")):
        script = script.replace(doc_port, str(clients + k))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "fedmor"  # the console script, pointing at this checkout
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m sdk.cli "$@"\n')
    shim.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    env = checkout_env(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", OMP_NUM_THREADS="1",
                       FEDMOR_CONFIG_DIR=str(tmp_path / "config"))  # never the user's profiles
    env.pop("FEDMOR_ADMIN_TOKEN", None)
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


pytestmark = pytest.mark.skipif(shutil.which("bash") is None,
                                reason="the quickstarts need bash")


@pytest.mark.parametrize("guide", ["member", "operator", "aligner", "privacy-officer"])
def test_guides_use_only_fedmor_commands(guide: str) -> None:
    """No curl to the API and no Python anywhere in a guide: each task is a fedmor command."""
    text = (GUIDES / f"{guide}.md").read_text()
    assert "curl " not in text and "```python" not in text and "python -" not in text
    assert "fedmor " in quickstart(guide)


def test_member_quickstart(tmp_path: Path) -> None:
    out = run_quickstart("member", tmp_path)
    accuracy = re.search(r'"pairwise_accuracy": \{"data/clients/detail/eval": ([0-9.]+)\}', out)
    assert accuracy and float(accuracy.group(1)) >= 0.75, out[-2000:]  # fedmor rm eval's line
    documents = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    final = next(d for d in documents if "participants" in d)  # fedmor rounds open --wait --json
    assert final["round_id"] == 1 and final["status"] == "finished", out[-2000:]
    assert len(final["participants"]) == 1  # the member's own client did the round
    assert (tmp_path / "work" / "reward" / "normalizer.json").is_file()
    # What the member gave: its status table and its log give the round's pairs and losses.
    assert re.search(r"^\s*1\s+done\s+\d+\s+\d+\.\d{4}\s+\d+\.\d{4}", out, re.M), out[-2000:]
    assert "round 1: done (" in (tmp_path / "work" / "client.log").read_text()
    # The pulled router, evaluated with the member's own files: its one head is the member's,
    # and its model's accuracy is the one fedmor rm eval printed.
    evaluation = next(d for d in documents if "routed_to_self" in d)
    assert evaluation["member"] == "st-mary" and evaluation["routed_to_self"] == 1.0
    assert evaluation["accuracy"] == float(accuracy.group(1))


@pytest.mark.skipif(shutil.which("openssl") is None, reason="the TLS quickstart needs openssl")
def test_operator_quickstart(tmp_path: Path) -> None:
    """A TLS consortium of three members with operator, aligner and auditor identities, from
    the guide: one secure round, a refused plain round, a reward query, a live audit, a
    rollback and live roster changes, with fedmor commands only (profiles do the rest)."""
    out = run_quickstart("operator", tmp_path)
    work = tmp_path / "work"
    # `rounds open --wait` exits 1 unless the round finished: the script went on, so round 1
    # (secure, three members) finished; the plain round ended with exit 1 because each site
    # policy refused it by its kind (the round's own table names each refusal's rule)
    assert "refused, as the policies say (exit 1)" in out, out[-3000:]
    assert all(f"{site} (round_kind)" in out for site in ("st-mary", "st-john", "city-bank")), \
        out[-3000:]
    assert re.search(r"reward -?\d+\.\d{4} \(mor, router version 1\)", out), out[-3000:]
    assert (work / "audit-st-mary" / "report.json").is_file()
    assert "router version 1 restored as version 2" in out
    # st-john's new key is nobody's: only the name check can refuse it, and the CLI exits 1
    assert re.search(r"refused by the server \(409\): 'st-john' exists \(role member\)", out), \
        out[-3000:]
    assert "refused (exit 1)" in out and "removed city-bank" in out
    # Alignment goes on after the removal and the join: the removed head is masked, the
    # joined member's lineage carries the router over, a round of three trains its head.
    assert "2 of 3 heads (masked: city-bank: revoked)" in out, out[-3000:]
    assert "restored version 1" in out and "enrollment of st-luke" in out, out[-3000:]
    assert re.search(r"reward -?\d+\.\d{4} \(mor, router version 3\)", out), out[-3000:]
    assert "3 of 4 heads (masked: city-bank: revoked)" in out, out[-3000:]
    profiles = (work / "profiles" / "profiles.toml").read_text()
    assert all(f'[profiles."{p}"]' in profiles for p in ("ops", "aligner", "auditor"))


@pytest.mark.slow
def test_aligner_quickstart(tmp_path: Path) -> None:
    """The aligner's path with fedmor commands only: a prepared, warmed-up starting policy, an
    enrollment that writes the profile, one reward query and two GRPO steps that read it.
    Slow: the warm-up and GRPO (trl) take minutes on two cores."""
    out = run_quickstart("aligner", tmp_path, timeout=1800)
    work = tmp_path / "work"
    prepared = json.loads((work / "policy" / "prepared.json").read_text())
    assert prepared["warmup"]["steps_done"] == 10
    assert re.search(r"reward -?\d+\.\d{4} \(mor, router version 1\)", out), out[-3000:]
    metrics = json.loads((work / "runs" / "aligned" / "metrics.json").read_text())
    assert metrics["rest"]["requests"] >= 2 and metrics["rest"]["failed_items"] == 0
    assert (work / "runs" / "aligned" / "policy").is_dir()


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
