"""Progress of long commands, on stderr: a rich bar while stderr is a terminal, step lines
always, and nothing of either in quiet mode (``fedmor --quiet`` or ``FEDMOR_QUIET=1``), where a
command prints only its results and errors, as logs want.

Results go to stdout with ``print``; everything here goes to stderr, so ``fedmor ... > out.json``
keeps the results clean whatever the mode. Every package's long commands (the sdk's, the
audit's, the demo's) report through here, so one ``--quiet`` silences them all.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import TextIO, TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

__all__ = ["Steps", "say", "set_quiet"]

QUIET_ENV = "FEDMOR_QUIET"
"""The environment variable of quiet mode (1, true or yes: on)."""
_T = TypeVar("_T")


def is_quiet() -> bool:
    """Whether quiet mode is on (``FEDMOR_QUIET`` set to 1, true or yes)."""
    return os.environ.get(QUIET_ENV, "").strip().lower() in ("1", "true", "yes")


def set_quiet(quiet: bool = True) -> None:
    """Switch quiet mode; through the environment, so processes a command starts (the demo's
    apps, a benchmark's workers) follow it."""
    if quiet:
        os.environ[QUIET_ENV] = "1"
    else:
        os.environ.pop(QUIET_ENV, None)


def _console(stream: TextIO | None) -> Console:
    # highlight off: numbers in a step line keep the terminal's colour, and a log stays plain.
    return Console(file=stream, stderr=stream is None, highlight=False, soft_wrap=True)


def say(message: str, *, stream: TextIO | None = None) -> None:
    """One progress line on stderr (or ``stream``), unless quiet."""
    if not is_quiet():
        _console(stream).print(message, markup=False)


class Steps:
    """A loop of ``total`` steps: ``advance()`` moves the bar (drawn only while the stream is a
    terminal), ``line()`` prints a step line above it; quiet mode or ``enabled=False`` silences
    both. Use as a context manager::

        with Steps("train", total) as steps:
            for i in range(total):
                ...
                steps.advance()
                if i % 10 == 0:
                    steps.line(f"step {i + 1}/{total} loss {loss:.4f}")
    """

    def __init__(self, description: str, total: int | None, *, enabled: bool = True,
                 stream: TextIO | None = None) -> None:
        self.enabled = enabled and not is_quiet()
        self._console = _console(stream)
        self._bar: Progress | None = None
        if self.enabled and self._console.is_terminal:
            self._bar = Progress(TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(),
                                 console=self._console, transient=True)
            self._task = self._bar.add_task(description, total=total)

    def __enter__(self) -> Steps:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.stop()

    def advance(self, steps: int = 1) -> None:
        if self._bar is not None:
            self._bar.advance(self._task, steps)

    def line(self, message: str) -> None:
        if self.enabled:
            self._console.print(message, markup=False)


def track(items: Iterable[_T], description: str, *, total: int | None = None,
          enabled: bool = True) -> Iterator[_T]:
    """Yield ``items`` while a bar (terminal only, not quiet) counts them."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with Steps(description, total, enabled=enabled) as steps:
        for item in items:
            yield item
            steps.advance()
