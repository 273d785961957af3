"""Code and the manual say why without citing the lab notebook (sessions, results entries).

The experiment history lives in git; a comment or a manual page that points to one of its runs
goes stale the day the run is superseded.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CITATION = re.compile(r"\bsession[ -]?\d+|results\.md,? \"|results\.md entry|lab-notes/[\w-]+\.md",
                      re.IGNORECASE)


def _sources() -> list[Path]:
    code = [p for top in ("sdk", "server_app", "client_app", "attacks", "examples")
            for p in (ROOT / top).rglob("*.py")]
    manual = list((ROOT / "docs").rglob("*.md"))
    return sorted(code + manual + [ROOT / "README.md"])


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_lab_notebook_citation(path: Path) -> None:
    hits = [f"{path.name}:{n}: {line.strip()}"
            for n, line in enumerate(path.read_text().splitlines(), 1) if CITATION.search(line)]
    assert not hits, "cites the lab notebook:\n" + "\n".join(hits)


def test_the_pattern_catches_a_citation() -> None:
    for line in ("# measured in session 11", "(docs/results.md, \"Session 4\")",
                 "see the results.md entry 12", "docs/lab-notes/results-history.md"):
        assert CITATION.search(line), line
