"""The benchmarks' synthetic aligner: batches of completions to the server's ``POST /v1/rewards``
from a thread, sent as ``fedmor align`` sends them (the image by its sha256, its bytes only when
the server asks for them), and what became of each batch.

The churn and load benchmarks both drive the reward path with it while they measure something
else (a consortium that changes, a server under hostile load), so both send the same requests.
"""

from __future__ import annotations

import base64
import hashlib
import io
import threading
import time
from pathlib import Path
from typing import NamedTuple

import httpx
import numpy as np
from PIL import Image

from sdk.wire import AlignerItem, AlignerRequest, SignedClient, load_or_create_key

__all__ = ["BATCH", "Batch", "SyntheticAligner"]

BATCH = 16
"""Completions per batch (one GRPO step's prompts times their completions)."""

_PAUSE_S = 0.5  # after a refused batch, as a trainer pauses before it sends the step again


class Batch(NamedTuple):
    """One batch: when its answer came, its items, the items not scored (all of them when the
    request failed) and, for a failed request, why (None when the server answered 200)."""

    at: float
    items: int
    failed: int
    refused: str | None = None


def _png() -> bytes:
    pixels = np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()


class SyntheticAligner:
    """An aligner identity (``client_id``, its key at ``key_path``) that sends batches with the
    selection ``method``, the next one ``every_s`` after the last was sent (0: back to back)."""

    def __init__(self, url: str, client_id: str, key_path: Path, *, method: str,
                 every_s: float = 0.0, timeout_s: float = 120.0) -> None:
        image = _png()
        self.sha = hashlib.sha256(image).hexdigest()
        self.b64 = base64.b64encode(image).decode()
        self.method, self.every_s = method, every_s
        self.http = SignedClient(url, key=load_or_create_key(key_path), sender=client_id,
                                 timeout_s=timeout_s)
        self.batches: list[Batch] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _post(self, step: int, with_image: bool) -> httpx.Response:
        items = [AlignerItem(image_sha256=self.sha, prompt=f"What is shown? ({step})",
                             response=f"answer {i}", image_b64=self.b64 if with_image else None)
                 for i in range(BATCH)]
        body = AlignerRequest(items=items, method=self.method, step=step)
        return self.http.request("POST", "/v1/rewards", body.model_dump(exclude_none=True))

    def send(self, step: int) -> Batch:
        """One batch (again with the image's bytes when the server lacks them)."""
        try:
            resp = self._post(step, with_image=False)
            if resp.status_code == 200 and resp.json().get("missing"):
                resp = self._post(step, with_image=True)
        except httpx.HTTPError as exc:
            return Batch(time.monotonic(), BATCH, BATCH, type(exc).__name__)
        if resp.status_code != 200:
            return Batch(time.monotonic(), BATCH, BATCH, f"{resp.status_code} {resp.text[:120]}")
        return Batch(time.monotonic(), BATCH, int(resp.json().get("failed", 0)))

    def warm_up(self) -> None:
        """One batch before the measured ones (the server's first builds its selection, importing
        torch); not recorded. Raises if the server refused it."""
        batch = self.send(0)
        if batch.refused is not None:
            raise RuntimeError(f"the aligner's warm-up batch failed: {batch.refused}")

    def _run(self) -> None:
        step, last = 0, 0.0
        while not self._stop.wait(max(0.0, last + self.every_s - time.monotonic())):
            last, step = time.monotonic(), step + 1
            self.batches.append(self.send(step))
            if self.batches[-1].refused is not None:
                self._stop.wait(_PAUSE_S)

    def start(self) -> None:
        """Send batches from a thread until :meth:`stop`; the record starts empty."""
        self.batches = []
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float | None = None) -> list[Batch]:
        """Stop sending (the batch in flight finishes first); the batches of this run."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)
        return list(self.batches)

    def close(self, timeout_s: float | None = None) -> None:
        """:meth:`stop` (waiting up to ``timeout_s`` for the batch in flight), then close the
        connection to the server."""
        self.stop(timeout_s)
        self.http.close()

    def refusals(self) -> dict[str, int]:
        """Why requests failed, with how often."""
        out: dict[str, int] = {}
        for b in self.batches:
            if b.refused is not None:
                out[b.refused] = out.get(b.refused, 0) + 1
        return out
