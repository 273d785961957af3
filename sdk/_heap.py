"""A serving process's long-lived heap, kept out of the cyclic collector's full passes.

An app imports its web stack, torch and opacus once, hundreds of thousands of objects. CPython's
full (generation 2) collection walks every tracked object and stops the event loop meanwhile, so
every request waits for the whole walk. Once the one-time loads are done,
the objects alive then move to the collector's permanent generation (``gc.freeze``): reference
counting still frees them, the full passes skip them, and a pass walks only what the process
made since.

Freezing is for a process that serves (``sdk.serving.serve`` turns it on): a test or notebook
that builds an app in its own process keeps its collector as it was.
"""

from __future__ import annotations

import gc
import logging
import threading
import time

__all__ = ["freeze_heap", "freeze_heap_from_now_on"]

_log = logging.getLogger("fedmor.serve")
_lock = threading.Lock()
_serving = False


def freeze_heap_from_now_on() -> None:
    """This process serves: freeze its heap now and after each later one-time load."""
    global _serving
    _serving = True
    freeze_heap("the app started")


def freeze_heap(after: str) -> None:
    """Freeze every live object, ``after`` a one-time load (in a serving process only).

    Garbage is collected first: a frozen cycle could never be collected afterwards."""
    if not _serving:
        return
    with _lock:
        started = time.perf_counter()
        gc.collect()
        gc.freeze()
        _log.info("%s: %d long-lived objects frozen out of the collector's full passes (%.0f ms)",
                  after, gc.get_freeze_count(), (time.perf_counter() - started) * 1000)
