"""Code and the manual say why without citing the lab notebook; code prose carries no lab notes.

The experiment history lives in git and the figures in docs/results.md (with their provenance):
a comment, docstring or manual page that cites a run, a measured figure or an earlier value
goes stale the day the run is superseded. Code prose states the rule and its reason instead.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Anywhere (code, the manual, the README): a pointer into the lab notebook.
CITATION = re.compile(r"\bsession[ -]?\d+|results\.md,? \"|results\.md entry|lab-notes/[\w-]+\.md",
                      re.IGNORECASE)

_UNIT_TIME = r"(?:ns|µs|us|ms|s|sec|secs|seconds?|minutes?|mins?|hours?|h)"
_UNIT_SIZE = r"(?:[KMGT]i?B|kB|bytes)"
# In the comments and docstrings of the packages: a measured figure or a history of values.
LAB_NOTE = re.compile("|".join([
    r"\bmeasur(?:ed|ement|ements)\b",                        # "measured 40 ms"
    r"\d\s?" + _UNIT_TIME + r"\b(?![-/])",                  # a time: "0.25 s", "35 ms"
    r"~\s?\d[\d.,]*\s?(?:" + _UNIT_SIZE + r"|%|x\b)",          # an approximate size or share
    r"\d\s?[GT]i?B\b",                                      # gigabytes are always a reading
    r"\d(?:\.\d+)?x\b(?![\d(])",                             # a ratio: "3.7x"
    r"\bx (?:faster|slower)\b|\d\s?%\s(?:faster|slower|lower|higher|smaller|larger|less|more)\b",
    r"\d\s?(?:->|→)\s?-?\d",                                 # a before/after: "0.92 -> 0.74"
    r"\d\s*(?:" + _UNIT_TIME + r"|" + _UNIT_SIZE + r")?\s+vs\.?\s+\d",  # "40 vs 70 ms"
    r"\bload (?:average|avg)\b|\bload ~?\d",                 # a run's circumstances
    r"\bused to\b|\bpreviously\b|\bno longer than before\b",  # history
    r"\b(?:was|were) (?:~\s?)?\d",                            # an earlier value
    r"\bearlier (?:runs?|records?|values?|versions?|defaults?|results?)\b",
    r"\b(?:commit|at) [0-9a-f]{7,12}\b",                      # a commit hash
    r"\(\s*[0-9a-f]{7,12}\s*[,)]",
    # a reading of a run: "gave 0.72", "scores right 0.68", "stayed at 0.73", "count 0.125"
    r"\b(?:gave|gives|stayed|scores?|scored|left|read|got|reached|count)\b[^.;:\n]{0,40}?"
    r"-?\d\.\d{2,}",
    r"\bon (?:one|another) machine\b|\bafter ~?\d+ (?:steps|rounds|epochs)\b",
    r"\d\s?(?:" + _UNIT_TIME + r"|" + _UNIT_SIZE + r")\s+here\b",   # "3-14 s here"
]), re.IGNORECASE)

CODE = ("sdk", "server_app", "client_app", "attacks", "examples/fedmor_local")


def _sources() -> list[Path]:
    code = [p for top in ("sdk", "server_app", "client_app", "attacks", "examples")
            for p in (ROOT / top).rglob("*.py")]
    manual = list((ROOT / "docs").rglob("*.md"))
    return sorted(code + manual + [ROOT / "README.md"])


def prose(source: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of every comment and docstring line of a Python source; a string
    statement (a module, class, function or attribute docstring) counts as a docstring."""
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)):
            for offset, line in enumerate(ast.get_source_segment(source, node).splitlines()):
                yield node.lineno + offset, line


def _config_comments(path: Path) -> Iterator[tuple[int, str]]:
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if "#" in line:
            yield n, line[line.index("#"):]


def lab_notes() -> list[str]:
    """Every offending ``file:line: text`` of the tree."""
    hits = []
    for path in _sources():
        rel = path.relative_to(ROOT)
        hits += [f"{rel}:{n}: lab notebook citation: {line.strip()}"
                 for n, line in enumerate(path.read_text().splitlines(), 1)
                 if CITATION.search(line)]
    lines: list[tuple[Path, int, str]] = []
    for top in CODE:
        for path in sorted((ROOT / top).rglob("*.py")):
            lines += [(path, n, text) for n, text in prose(path.read_text())]
    for config in ("pyproject.toml", "Makefile"):
        lines += [(ROOT / config, n, text) for n, text in _config_comments(ROOT / config)]
    hits += [f"{path.relative_to(ROOT)}:{n}: lab note: {text.strip()}"
             for path, n, text in sorted(lines) if LAB_NOTE.search(text)]
    return hits


def test_no_lab_notes_in_code_or_citations_in_the_manual() -> None:
    hits = lab_notes()
    assert not hits, (f"{len(hits)} lines cite the lab notebook or carry a measured figure or "
                      "a history (state the rule and its reason; figures go to "
                      "docs/results.md or docs/hardware.md):\n" + "\n".join(hits))


def test_the_patterns_catch_lab_notes_and_pass_rules() -> None:
    for line in ("# measured in session 11", "(docs/results.md, \"Session 4\")",
                 "see the results.md entry 12", "docs/lab-notes/results-history.md"):
        assert CITATION.search(line), line
    for line in ("# measured about 40 vs 70 ms to commit one", "stalled a round for ~0.25 s",
                 "a LoRA step peaked at 3.7x the weight bytes", "grew ~150 MB per layer",
                 "(`sign` 0.92 -> 0.74)", "at load average 7", "it used to poll",
                 "the default was 120 before", "as at commit 3278d60", "0.08 GB of inputs",
                 "backward ~20% faster on a CPU", "35 ms of CPU here", "the earlier runs",
                 "the same recipe gave 0.72 on one machine", "scores right 0.68, wrong -0.84",
                 "a pair stayed at 0.73 pairwise accuracy", "(best-of-3 count 0.125)",
                 "takes 3-14 s here", "reaches 1.0 after ~200 steps"):
        assert LAB_NOTE.search(line), line
    for line in ("# owner -> (b share, key share)", "16x16 images -> (B, K) logits",
                 "4 bytes per element", "the first 16 hex digits", "clip to C + 4 x its std",
                 "hashing 4 MB takes ms", "waits ``timeout_s`` at most", "keeps 99.7% of a tail",
                 "the previous stage closed", "an earlier query's image", "1 MiB of a line",
                 "scores in [-c, c]", "the step left 0.5 of its budget", "read on this host"):
        assert not LAB_NOTE.search(line), line
