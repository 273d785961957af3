"""The churn benchmark's pure parts: its event schedule, whether the operator's views name an
event's member and cause, and the headline figures.

No process, clock or HTTP here, so the detection and the arithmetic are tested on their own
(``tests/test_churn_naming.py``) and read the same on any tree the benchmark runs against.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CAUSES", "SERVER", "Event", "Sighting", "alignment_figures", "effect", "event_table",
           "find_named", "headline", "judge", "rounds_failed_with_enough_survivors", "schedule"]

SERVER = "server"
"""The member field of the server's own event: its cause is searched without a member name."""

CAUSES: dict[str, tuple[str, ...]] = {
    "killed": ("drop", "crash", "killed", "restart", "unreachable", "no answer", "missed",
               "deadline", "timed out", "timeout", "lost", "abandon"),
    "data_removed": ("data", "pairs", "not found", "no such file", "missing"),
    "slow": ("deadline", "timed out", "timeout", "slow", "late", "drop", "missed"),
    "revoked": ("revoked", "removed", "revocation"),
    "enrolled": ("enrolled", "joined", "added", "lineage"),
    "server_killed": ("restart", "interrupted", "crash"),
}
"""Per event kind, the words (lowercase substrings) that count as its cause when they stand
beside the member's name: in the same text, a key on the path to it, or a sibling field of the
same record that has a value (``{member, stage, reason}``, a member row's ``restarts=1``)."""


@dataclass
class Event:
    """One scripted event: ``kind`` (a key of :data:`CAUSES`) happening to ``member`` in the
    benchmark's round number ``round`` (1-based); the rest is filled in as it runs."""

    kind: str
    member: str
    round: int
    named: bool = False
    where: str = ""
    seen: str = ""
    round_id: int | None = None
    effect: str = ""
    problem: str = ""


@dataclass
class Sighting:
    """Where a member's name and a cause word were found together, and the text around them."""

    where: str
    text: str


@dataclass
class _Walk:
    identities: tuple[str, ...]
    keywords: tuple[str, ...]
    found: list[Sighting] = field(default_factory=list)


def schedule(members: Sequence[str], rounds: int, joiner: str) -> list[Event]:
    """The scripted events over ``rounds`` rounds (at least 8): a crash, a removed data folder,
    a member slower than the stage deadline, a server crash, a revocation and a new member, one
    per round after a quiet first round, spread over the run; the last round is quiet.

    ``members``: the starting members, at least 5 (the second trains the router on its own
    pairs, so its data folder matters); ``joiner``: the new member's name."""
    if rounds < 8 or len(members) < 5:
        raise ValueError(f"the churn schedule needs >= 8 rounds and >= 5 members, got "
                         f"{rounds} and {len(members)}")
    kinds = [("killed", members[1]), ("data_removed", members[2]), ("slow", members[3]),
             ("server_killed", SERVER), ("revoked", members[-1]), ("enrolled", joiner)]
    # Quiet rounds between events when there is room: round 1 and the last are always quiet.
    step = max(1, (rounds - 2) // len(kinds))
    return [Event(kind, member, 2 + i * step) for i, (kind, member) in enumerate(kinds)]


def effect(e: Event, info: Mapping[str, Any], client_id: str | None) -> str:
    """What the event did to its round ``info``, as the round's own record says: an event
    that left no trace there (a member that resumed the round after its restart) has nothing
    for the operator to fix."""
    if e.member == SERVER or client_id is None:
        return f"round {info['status']}"
    if client_id in info.get("dropouts", ()):
        return "dropped out"
    if any(r.get("client_id") == client_id for r in info.get("refusals", ())):
        return "refused"
    if client_id not in info.get("participants", ()):
        return "not a participant"
    return f"none (round {info['status']} with it)"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def _said(value: Any) -> bool:
    """Whether a record's field says something: a field without a value (null, empty, zero,
    false: ``restarts=0``, ``revoked_at=None``) names no cause by its key alone."""
    return not (value is None or value is False or value == "" or
                (isinstance(value, int | float) and value == 0))


def _walk(node: Any, path: tuple[str, ...], siblings: str, w: _Walk) -> None:
    if isinstance(node, Mapping):
        scalars = " | ".join(f"{k}={_text(v)}" for k, v in node.items()
                             if not isinstance(v, Mapping | list) and _said(v))
        for key, value in node.items():
            if any(i in str(key) for i in w.identities):  # a record keyed by the member
                _check(f"{key}: {scalars if isinstance(value, Mapping) else _text(value)}",
                       (*path, str(key)), "", w)
            _walk(value, (*path, str(key)), scalars, w)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _walk(value, (*path, str(i)), "", w)
    elif node is not None:
        _check(_text(node), path, siblings, w)


def _check(text: str, path: tuple[str, ...], siblings: str, w: _Walk) -> None:
    if not any(i in text for i in w.identities):
        return
    context = " ".join((text, *path, siblings)).lower()
    if any(k in context for k in w.keywords):
        w.found.append(Sighting(".".join(path), (siblings or text)[:200]))


def find_named(doc: Any, identities: Iterable[str], kind: str) -> list[Sighting]:
    """Every place in the JSON document ``doc`` (a round, a members list) where one of
    ``identities`` (the member's name, its client id) stands beside a cause word of ``kind``.

    For the server's own event (``identities`` empty) any text holding a cause word counts:
    the server names no member for its own crash."""
    ids = tuple(i for i in identities if i)
    w = _Walk(ids, CAUSES[kind])
    if ids:
        _walk(doc, (), "", w)
    else:
        w.found = [Sighting(where, text) for where, text in _strings(doc, ())
                   if any(k in text.lower() for k in w.keywords)]
    return w.found


def judge(e: Event, ordered: Sequence[int], views: Mapping[int, Sequence[Any]],
          ids: Mapping[str, str]) -> None:
    """Fill in ``e``'s effect, and whether it was named: by the operator's views (``views``:
    round id -> [its round, the members view] after it) of its round or the next one, which
    must hold the member (by name or client id, ``ids``) beside a cause of its kind."""
    assert e.round_id is not None
    at = list(ordered).index(e.round_id)
    e.effect = effect(e, views[e.round_id][0], ids.get(e.member))
    names = () if e.member == SERVER else (e.member, ids.get(e.member, ""))
    for rid in ordered[at:at + 2]:
        for label, doc in zip((f"rounds show {rid}", f"members view after {rid}"), views[rid],
                              strict=True):
            found = find_named(doc, names, e.kind)
            if found:
                e.named, e.where, e.seen = True, f"{label}: {found[0].where}", found[0].text
                return


def event_table(events: Iterable[Event]) -> str:
    """One line per event: what it did to its round, and where the operator saw it named."""
    lines = [f"{'event':<14} {'member':<8} {'round':>5}  {'effect on its round':<28} "
             f"{'named':<5} {'where':<36} seen"]
    lines += [f"{e.kind:<14} {e.member:<8} {e.round_id or '-'!s:>5}  {e.effect:<28} "
              f"{'yes' if e.named else 'no':<5} {e.where or '-':<36} {e.seen or '-'}"
              for e in events]
    return "\n".join(lines)


def _strings(node: Any, path: tuple[str, ...]) -> Iterator[tuple[str, str]]:
    if isinstance(node, Mapping):
        for key, value in node.items():
            yield from _strings(value, (*path, str(key)))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _strings(value, (*path, str(i)))
    elif isinstance(node, str):
        yield ".".join(path), node


def rounds_failed_with_enough_survivors(rounds: Iterable[Mapping[str, Any]],
                                        disabled: Mapping[int, int]) -> int:
    """Rounds that failed although the participants the schedule left working (participants
    minus ``disabled[round_id]``, the members its event took out) were at least the round's
    ``min_clients`` and its secure-aggregation threshold (when the round records one)."""
    count = 0
    for r in rounds:
        if r["status"] != "failed":
            continue
        working = len(r["participants"]) - disabled.get(int(r["round_id"]), 0)
        need = max(int(r.get("min_clients") or 1),
                   int((r.get("params") or {}).get("threshold") or 1))
        count += working >= need
    return count


def alignment_figures(batches: Sequence[tuple[float, int, int]], start: float,
                      end: float) -> dict[str, float | int]:
    """From the aligner's batches, each (time, items sent, items not scored: the whole batch
    when the request failed): items, items failed, and the longest time with no scored batch
    between ``start`` and ``end`` (a batch is scored when at least one of its items is)."""
    scored = [t for t, sent, failed in batches if failed < sent]
    marks = [start, *sorted(scored), end]
    stall = max(b - a for a, b in itertools.pairwise(marks))
    return {"alignment_items": sum(sent for _, sent, _ in batches),
            "alignment_items_failed": sum(failed for _, _, failed in batches),
            "max_alignment_stall_s": round(stall, 1)}


def headline(*, members: int, events: Sequence[Event], rounds: Sequence[Mapping[str, Any]],
             disabled: Mapping[int, int], alignment: Mapping[str, float | int],
             data_lost: int) -> dict[str, Any]:
    """The benchmark's headline dict (the keys issue 47 names)."""
    seconds = [float(r["finished_at"]) - float(r["created_at"]) for r in rounds
               if r.get("finished_at") and r.get("created_at")]
    return {"members": members, "events": len(events),
            "events_named": sum(e.named for e in events),
            "rounds_attempted": len(rounds),
            "rounds_finished": sum(r["status"] == "finished" for r in rounds),
            "rounds_failed_with_enough_survivors": rounds_failed_with_enough_survivors(
                rounds, disabled),
            **alignment,
            "round_seconds_p50": round(statistics.median(seconds), 2) if seconds else None,
            "data_lost": data_lost}
