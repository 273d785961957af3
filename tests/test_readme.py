"""The README's Python quickstart runs as written and does what it says."""

import re
from pathlib import Path

import numpy as np
import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_quickstart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) == 1
    monkeypatch.chdir(tmp_path)
    scope: dict[str, object] = {}
    exec(compile(blocks[0], "README.md", "exec"), scope)

    assert scope["result"].eval_accuracy >= 0.75  # type: ignore[attr-defined]
    clip = scope["scorer"].clip  # type: ignore[attr-defined]
    evals = scope["evals"]
    scores = scope["scorer"].score(  # type: ignore[attr-defined]
        [p.image for p in evals[:8]], [p.prompt for p in evals[:8]],  # type: ignore[index]
        [p.chosen for p in evals[:8]])  # type: ignore[index]
    assert all(-clip <= s <= clip for s in scores)
    expected = np.average(scope["updates"], axis=0, weights=[10, 20, 30, 40, 50])  # type: ignore[call-overload]
    assert np.abs(scope["aggregate"].mean - expected).max() < 1e-5  # type: ignore[attr-defined]
    assert (tmp_path / "runs" / "quickstart" / "rm" / "normalizer.json").is_file()
