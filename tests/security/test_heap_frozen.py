"""A served app's start-up objects stay out of the cyclic collector's full passes.

Under load, CPython's full collections walked a server's import-time objects and paused its
event loop: those pauses were the load benchmark's worst health probes. ``serve`` freezes the heap once the app has started; a process that only builds an app
(a test, a notebook) keeps its collector as it was. Each check runs in a fresh interpreter, so
the test process's own collector is never touched.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from fedmor_local import free_port

ROOT = Path(__file__).resolve().parents[2]

SERVED = """
import gc, json, sys, threading, time
import httpx
from fastapi import FastAPI
from sdk.serving import serve

app = FastAPI()

@app.get("/heap")
async def heap() -> dict[str, int]:
    gc.collect()
    return {"frozen": gc.get_freeze_count(), "walked": len(gc.get_objects())}

port = int(sys.argv[1])
threading.Thread(target=serve, args=(app,), daemon=True, kwargs=dict(
    host="127.0.0.1", port=port, tls_cert=None, tls_key=None, log_level="warning")).start()
deadline = time.monotonic() + 120
while True:  # until the server answers (it has started), or the deadline
    try:
        print(json.dumps(httpx.get(f"http://127.0.0.1:{port}/heap", timeout=10).json()))
        break
    except httpx.TransportError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.05)
"""

BUILT = """
import gc, json
from sdk.secagg import preload_accountant
from sdk._heap import freeze_heap

freeze_heap("a test's own load")
preload_accountant().join()
print(json.dumps({"frozen": gc.get_freeze_count()}))
"""


def _run(script: str, *args: str) -> dict[str, int]:
    done = subprocess.run([sys.executable, "-c", script, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_served_app_walks_only_what_it_made_since_it_started() -> None:
    heap = _run(SERVED, str(free_port()))
    # The web stack's import-time objects (tens of thousands) are frozen; a full pass walks
    # a small fraction of that: what the process made after start-up.
    assert heap["frozen"] > 20_000, heap
    assert heap["walked"] < heap["frozen"] / 4, heap


def test_a_process_that_does_not_serve_keeps_its_collector() -> None:
    assert _run(BUILT) == {"frozen": 0}
