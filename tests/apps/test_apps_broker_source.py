"""BrokerRewardSource: a selection's client index k reaches member ``client_ids[k]`` with the
image references unchanged; a member that fails gives the failure value (or the error)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from client_app import ClientStore, HashScorer
from sdk.wire import ImageRef, generate_key, public_key_b64
from server_app import BrokerError, BrokerRewardSource, RewardBroker, Store

from .conftest import push_member


def _broker(tmp_path: Path, db: str = "s.db", url: str = "http://127.0.0.1:9"
            ) -> RewardBroker:
    """Two enrolled push members, ``c-m0`` and ``c-m1``, at ``url`` (by default an address
    nobody listens on)."""
    store = Store(tmp_path / db)
    for name in ("m0", "m1"):
        key = public_key_b64(generate_key())
        store.upsert_roster(name, key, hashlib.sha256(f"token-{name}".encode()).hexdigest())
        store.enroll(name=name, token=f"token-{name}", public_key=key,
                     reward_url=url, new_id=f"c-{name}", clip_bound=1.0)
    return RewardBroker(store, generate_key(), mode="push", timeout_s=5,
                        allow_private=True)  # members on 127.0.0.1


def _score(source: BrokerRewardSource, k: int, images: list[Any]) -> list[float]:
    async def go() -> list[float]:
        try:
            return await source.score(k, images, ["p"] * len(images), ["r"] * len(images))
        finally:
            await source.broker.aclose()
    return asyncio.run(go())


class _Recording(HashScorer):
    """The hash scorer, keeping the (prompt, response) pairs of each call."""

    def __init__(self) -> None:
        self.asked: list[list[tuple[str, str]]] = []

    def score(self, images: list[Image.Image], prompts: list[str],
              responses: list[str]) -> list[float]:
        self.asked.append(list(zip(prompts, responses, strict=True)))
        return super().score(images, prompts, responses)


def test_index_k_asks_member_k_with_the_references_as_they_are(tmp_path: Path) -> None:
    # Two real member apps on 127.0.0.1; the selection's index 1 is member c-m1.
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (9, 8, 7)).save(buf, format="PNG")
    refs = [ImageRef.of(buf.getvalue())] * 2
    store, server_key = Store(tmp_path / "s.db"), generate_key()
    scorers = {"m0": _Recording(), "m1": _Recording()}
    with contextlib.ExitStack() as stack:
        for name, scorer in scorers.items():
            stack.enter_context(push_member(tmp_path, store, server_key, name, scorer))
        broker = RewardBroker(store, server_key, mode="push", timeout_s=60,
                              allow_private=True)  # members on 127.0.0.1
        source = BrokerRewardSource(broker, ["c-m0", "c-m1"])
        scores = _score(source, 1, refs)
    image = Image.open(io.BytesIO(refs[0].data)).convert("RGB")
    assert scores == pytest.approx(HashScorer().score([image] * 2, ["p"] * 2, ["r"] * 2))
    assert scorers["m0"].asked == [] and scorers["m1"].asked == [[("p", "r"), ("p", "r")]]
    # The member holds the aligner's bytes under their hash: no decode and re-encode between.
    assert ClientStore(tmp_path / "m1.db").image(refs[0].sha256) == refs[0].data
    assert [source.judge(refs[0], "p", "r") for _ in range(3)] == ["c-m1", "c-m1", ""]


def test_a_failing_member_gives_the_failure_value_or_the_error(tmp_path: Path) -> None:
    ref = ImageRef.of(b"image")
    tolerant = BrokerRewardSource(_broker(tmp_path), ["c-m0"], failure=-2.0)
    assert _score(tolerant, 0, [ref, ref]) == [-2.0, -2.0]  # nobody answers at 127.0.0.1:9
    assert tolerant.failed == 2 and tolerant.judge(ref, "p", "r") == ""
    strict = BrokerRewardSource(_broker(tmp_path, "strict.db"), ["c-m0"])
    with pytest.raises(BrokerError, match="could not be reached"):
        _score(strict, 0, [ref])


def test_a_pil_image_or_a_bad_index_is_refused(tmp_path: Path) -> None:
    source = BrokerRewardSource(_broker(tmp_path), ["c-m0"])
    with pytest.raises(TypeError, match="image references"):
        _score(source, 0, [Image.new("RGB", (4, 4))])
    with pytest.raises(IndexError, match="out of range"):
        _score(source, 1, [ImageRef.of(b"image")])


@contextmanager
def _member_answering(text: str | bytes, *, repeat: int = 1, headers: dict[str, str] | None = None
                      ) -> Iterator[tuple[str, list[bytes], list[int]]]:
    """A member's reward app on 127.0.0.1 (a free port) that answers every POST with ``text``
    as JSON, as it is (``repeat`` times over, then without a length: the connection's close
    ends it), with ``headers`` added: its URL, the bodies it received and, per answer, the
    bytes it wrote before the caller hung up (all of them when it read the whole answer)."""
    received: list[bytes] = []
    written: list[int] = []
    body = text.encode() if isinstance(text, str) else text

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(self.rfile.read(int(self.headers["content-length"])))
            self.send_response(200)
            self.send_header("content-type", "application/json")
            if repeat == 1:
                self.send_header("content-length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            sent = 0
            try:
                for _ in range(repeat):
                    self.wfile.write(body)
                    sent += len(body)
            except OSError:  # the caller closed the connection
                pass
            written.append(sent)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received, written
    finally:
        server.shutdown()
        server.server_close()  # waits for the handlers: ``written`` is complete
        thread.join()


@pytest.mark.parametrize("score", ["NaN", "Infinity", "-Infinity"])
def test_a_pushed_non_finite_score_is_refused(score: str, tmp_path: Path) -> None:
    """A member app answering a non-finite number in its JSON (Python's json reads NaN and
    Infinity) fails the query: the aligner's item gets the failure value, never the score."""
    ref = ImageRef.of(b"image")
    answer = f'{{"scores": [{score}, 0.5], "query_sha256": "{"0" * 64}"}}'
    with _member_answering(answer) as (url, received, _):
        strict = BrokerRewardSource(_broker(tmp_path, url=url), ["c-m0"])
        with pytest.raises(BrokerError, match="finite number"):
            _score(strict, 0, [ref, ref])
        tolerant = BrokerRewardSource(_broker(tmp_path, "tolerant.db", url), ["c-m0"],
                                      failure=-2.0)
        assert _score(tolerant, 0, [ref, ref]) == [-2.0, -2.0]
    assert len(received) == 2  # the member was asked both times: its answer was refused
    assert tolerant.failed == 2 and tolerant.judge(ref, "p", "r") == ""


def test_a_member_cannot_make_the_server_hold_a_large_answer(tmp_path: Path) -> None:
    """A member's answer is read up to RewardResponse.MAX_BYTES, whatever it declares: one
    longer than it says, or endless, is cut off there; a compressed one is refused unread."""
    ref = ImageRef.of(b"image")
    mib = b" " * 2**20  # JSON whitespace: a valid answer's padding
    endless = 64  # MiB the member would send: a thousand times what the broker may hold
    with (_member_answering(mib, repeat=endless) as (url, _, written),
          pytest.raises(BrokerError, match="max_answer_bytes")):
        _score(BrokerRewardSource(_broker(tmp_path, url=url), ["c-m0"]), 0, [ref])
    assert written and written[0] < endless * len(mib)  # the broker hung up early
    gzip = {"content-encoding": "gzip"}
    with (_member_answering(b"\x1f\x8b" + b"\0" * 64, headers=gzip) as (url, _, _),
          pytest.raises(BrokerError, match="compressed")):
        _score(BrokerRewardSource(_broker(tmp_path, "gzip.db", url), ["c-m0"]), 0, [ref])
