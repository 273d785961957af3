"""The architecture page's trace tables stay honest: the count each states is its number of
rows, each row names one file that exists, and no file is named twice."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "architecture.md"
_ROW = re.compile(r"^\| (\d+) \| `([^`]+)` \|", re.MULTILINE)
_COUNT = re.compile(r"\*\*(\d+) files\*\*")


def _section(title: str) -> str:
    text = PAGE.read_text()
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


@pytest.mark.parametrize("title", ["Trace a round", "Trace a reward"])
def test_a_trace_table_counts_its_rows_and_names_real_files(title: str) -> None:
    section = _section(title)
    rows = _ROW.findall(section)
    stated = [int(n) for n in _COUNT.findall(section)]
    assert stated == [len(rows)], f"{title}: states {stated} files, lists {len(rows)}"
    assert [int(n) for n, _ in rows] == list(range(1, len(rows) + 1)), f"{title}: numbering"
    paths = [p for _, p in rows]
    assert len(set(paths)) == len(paths), f"{title}: a file is named twice"
    missing = [p for p in paths if not (ROOT / p).is_file()]
    assert not missing, f"{title}: no such file {missing}"
