"""What a member tells the server when it abandons a round: the cause in a bounded line of plain
text, never the member's data.

The member's own log keeps the whole error (paths, record lines). The server, and through it
the operator, gets the error's class and its message only where the message is the member's own
wording about a setting (a missing folder, a missing file); a record's content, a file path or a
traceback never leaves: a pairs file's line can quote a private answer.
"""

from __future__ import annotations

from sdk.data import PreferenceDataError
from sdk.rounds import RoundFailed

__all__ = ["REPORT_CHARS", "UpdateFailed", "reported_cause"]

REPORT_CHARS = 300
"""The longest cause a member reports (the wire allows more; a round view stays readable)."""


def _brief(exc: BaseException) -> str:
    """``exc`` in words that carry no member data (see the module docstring)."""
    if isinstance(exc, PreferenceDataError):
        if exc.line is not None:  # a record's own text may quote the member's data
            return f"{exc.path.name}:{exc.line}: invalid record (details in the member's log)"
        return exc.reason
    if isinstance(exc, OSError) and exc.strerror:
        return f"{type(exc).__name__}: {exc.strerror}"  # errno text, without the file name
    return f"{type(exc).__name__} (details in the member's log)"


class UpdateFailed(RoundFailed):
    """The member's local update raised: the message is for its log, ``report`` for the
    server."""

    def __init__(self, exc: BaseException) -> None:
        self.report = f"local update failed: {_brief(exc)}"
        super().__init__(f"local update failed: {type(exc).__name__}: {exc}")


def reported_cause(exc: BaseException) -> str:
    """The one line a member sends the server for abandoning a round because of ``exc``."""
    if isinstance(exc, UpdateFailed):
        text = exc.report
    elif isinstance(exc, RoundFailed):  # the protocol's own words about the round's terms
        text = str(exc)
    else:
        text = f"the member's half failed: {_brief(exc)}"
    return " ".join(text.split())[:REPORT_CHARS]
