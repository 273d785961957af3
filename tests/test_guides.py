"""The member's guide's quickstart runs as written, on 127.0.0.1 (``tests/_quickstart.py``), and
no guide calls ``curl`` or Python: every step is a ``fedmor`` command. The aligner's and the
privacy officer's quickstarts train a policy and audit a demo run, so they are marked slow;
the operator's has a file of its own (``tests/test_guides_operator.py``).
"""

import json
import re
from pathlib import Path

import pytest

from attacks import AuditReport
from attacks._summary import verdict_level
from tests._quickstart import GUIDES, NEEDS_BASH, quickstart, run_quickstart, swap_ports

pytestmark = NEEDS_BASH


@pytest.mark.parametrize("guide", ["member", "operator", "aligner", "privacy-officer"])
def test_guides_use_only_fedmor_commands(guide: str) -> None:
    """No curl to the API and no Python anywhere in a guide: each task is a fedmor command."""
    text = (GUIDES / f"{guide}.md").read_text()
    assert "curl " not in text and "```python" not in text and "python -" not in text
    assert "fedmor " in quickstart(guide)


def test_the_ports_are_swapped_in_one_pass_over_whole_numbers() -> None:
    """A port put in for one may hold another's digits (44944 holds 9444): it stays as put in,
    and a number that only contains a guide's port (18443, 94410) is not a port."""
    script = "--port 8443 http://127.0.0.1:9441 :9442 9443 9444 18443 94410 8443"
    assert swap_ports(script, 44944, 39441) == (
        "--port 44944 http://127.0.0.1:39441 :39442 39443 39444 18443 94410 44944")


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
