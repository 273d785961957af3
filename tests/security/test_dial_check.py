"""A reward URL is checked where the server dials it: every spelling of a loopback address and
every name that resolves to one is refused before a connection opens (a real listener on
127.0.0.1 counts the connections), unless ``allow_private_reward_urls``; and the caller's
error text is the same whether a port answered or not."""

from __future__ import annotations

import asyncio
import hashlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdk.wire import ImageRef, generate_key, public_key_b64
from sdk.wire._dial import DialRefused, checked_addresses
from server_app import BrokerError, ServerSettings
from server_app._app import create_app

SPELLINGS = ["127.1", "2130706433", "0x7f.0.0.1", "017700000001", "[::ffff:127.0.0.1]",
             "localhost"]


class Listener:
    """A TCP listener on 127.0.0.1 that counts the connections it accepts, closing each."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.thread.join(timeout=10)


@pytest.fixture
def listener() -> Iterator[Listener]:
    found = Listener()
    yield found
    found.close()


def _query(tmp_path: Path, url: str, *, allow_private: bool) -> str:
    """The error a reward query to a member enrolled at ``url`` ends in, from the broker of a
    server app built with ``allow_private_reward_urls=allow_private`` (the URL is written to
    its store as a member whose DNS answer changed after enrollment would have it)."""
    folder = tmp_path / f"s{allow_private}{hashlib.sha256(url.encode()).hexdigest()[:8]}"
    app = create_app(ServerSettings(db_path=folder / "s.db", identity_key=folder / "id.pem",
                                    allow_private_reward_urls=allow_private,
                                    reward_timeout_s=10))
    store, broker = app.state.store, app.state.broker
    key = public_key_b64(generate_key())
    store.upsert_roster("m", key, hashlib.sha256(b"token").hexdigest())
    store.enroll(name="m", token="token", public_key=key, reward_url=url, new_id="c-m",
                 clip_bound=1.0)

    async def go() -> str:
        try:
            await broker.query("c-m", [ImageRef.of(b"image")], ["p"], ["r"])
        except BrokerError as exc:
            return str(exc)
        finally:
            await broker.aclose()
        raise AssertionError("a listener that closes at once gave scores")
    try:
        return asyncio.run(go())
    finally:
        store.close()


@pytest.mark.parametrize("host", SPELLINGS)
def test_a_loopback_spelling_is_never_dialled(tmp_path: Path, listener: Listener,
                                              host: str) -> None:
    refused = _query(tmp_path, f"https://{host}:{listener.port}", allow_private=False)
    assert listener.accepted == 0, f"the server connected to {host}"
    assert refused == "client c-m could not be reached"
    allowed = _query(tmp_path, f"https://{host}:{listener.port}", allow_private=True)
    assert listener.accepted >= 1, f"with the setting on, {host} was not dialled"
    assert allowed == refused  # a TLS failure on an open port reads like a refusal


@pytest.mark.parametrize("host", ["0xA9FEA9FE", "2852039166", "0251.0376.0251.0376", "10.1",
                                  "[::ffff:169.254.169.254]", "[::]", "0", "224.0.0.1",
                                  "[2002:7f00:1::]", "localhost."])
def test_every_internal_address_is_refused_before_a_connection(host: str) -> None:
    with pytest.raises(DialRefused):
        checked_addresses(host.strip("[]"), 443)


def test_a_public_address_passes_in_any_spelling() -> None:
    assert checked_addresses("0x08080808", 443) == ["8.8.8.8"]
    assert checked_addresses("::ffff:8.8.8.8", 443) == ["8.8.8.8"]


def test_the_error_does_not_say_whether_a_port_answered(tmp_path: Path,
                                                         listener: Listener) -> None:
    closed = socket.create_server(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()  # nobody listens there now
    texts = {_query(tmp_path, f"https://127.0.0.1:{port}", allow_private=True)
             for port in (closed_port, listener.port)}
    assert listener.accepted >= 1
    assert texts == {"client c-m could not be reached"}
