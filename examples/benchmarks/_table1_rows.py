"""Table 1's result rows, one JSON line per (seed, method), so a long run can be resumed.

A full run takes over an hour on a small machine. Each finished row is appended to ``rows.jsonl``
at once; ``--resume`` reuses those rows instead of re-running them, but only when the run's
settings (``settings.json``, written beside them) are the ones the rows were made with.
Without ``--resume`` an earlier ``rows.jsonl`` is kept under a new name, never appended to.
A last row cut short by a stop mid-write is dropped (and run again); a bad row elsewhere is an
error.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


class SettingsMismatch(ValueError):
    """``--resume`` on rows made with other settings."""


class RowLog:
    """Rows by (seed, method), persisted line by line in ``out/rows.jsonl``."""

    def __init__(self, out: Path, settings: dict[str, Any], resume: bool, *,
                 defaults: dict[str, Any] | None = None) -> None:
        """``defaults``: what a setting saved rows do not record was when they were made (a
        flag added since, at its default)."""
        out.mkdir(parents=True, exist_ok=True)
        self.path = out / "rows.jsonl"
        settings_path = out / "settings.json"
        self._rows: dict[tuple[int, str], dict[str, Any]] = {}
        if resume and self.path.exists():
            if not settings_path.exists():
                raise SettingsMismatch(f"{settings_path} is missing: cannot tell which settings "
                                       f"the rows in {self.path} were made with")
            before = json.loads(settings_path.read_text())
            known = {**(defaults or {}), **before}
            changed = {k: (known.get(k), v) for k, v in settings.items() if known.get(k) != v}
            if changed:
                raise SettingsMismatch(
                    "--resume with other settings than the saved rows' (setting: (saved, now)): "
                    f"{changed}; drop --resume or use another --out")
            self._load()
        elif self.path.exists():
            self.path.rename(out / f"rows-{time.strftime('%Y%m%d-%H%M%S')}.jsonl")
        settings_path.write_text(json.dumps(settings, indent=2, sort_keys=True))

    def _load(self) -> None:
        lines = [line for line in self.path.read_text().splitlines() if line.strip()]
        for n, line in enumerate(lines, 1):
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                if n < len(lines):  # only a stop mid-write can cut a row short, the last one
                    raise ValueError(f"{self.path}:{n} is not a JSON row") from None
                # The cut row is run again; new rows must not be appended to its fragment.
                self.path.write_text("".join(f"{kept}\n" for kept in lines[:-1]))
                return
            self._rows[(row.pop("seed"), row.pop("method"))] = row

    def __len__(self) -> int:
        return len(self._rows)

    def get(self, seed: int, method: str) -> dict[str, Any] | None:
        """The saved row, or None when it still has to be run."""
        row = self._rows.get((seed, method))
        return dict(row) if row is not None else None

    def get_or_run(self, seed: int, method: str, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """The saved row, or ``run()``'s, saved at once."""
        row = self.get(seed, method)
        if row is None:
            row = run()
            self.add(seed, method, row)
        return row

    def add(self, seed: int, method: str, row: dict[str, Any]) -> None:
        self._rows[(seed, method)] = dict(row)
        with self.path.open("a") as f:
            f.write(json.dumps({"seed": seed, "method": method, **row}) + "\n")
