"""The operator guide's quickstart runs as written, on 127.0.0.1 (with ``openssl`` for its TLS).

A file of its own, so that it runs beside the member's quickstart (``tests/test_guides.py``) on
another worker, not after it.
"""

import re
import shutil
from pathlib import Path

import pytest

from tests._quickstart import NEEDS_BASH, run_quickstart

pytestmark = NEEDS_BASH


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
