"""A signed request names the server it was sent to (its host and port as dialled): a listener
that captured one cannot relay it to the real server, which refuses it 401 and says why,
while the same request sent to the server directly succeeds."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

from sdk.wire import MemberInfo, SignedClient
from sdk.wire._auth import HEADER_AUTHORITY
from tests.apps.conftest import enrolled_team


def _capture_one(sock: socket.socket, into: dict[str, str]) -> None:
    """Accept one HTTP request on ``sock``, keep its headers, answer ``[]``."""
    conn, _ = sock.accept()
    with conn:
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")[1:]
        into.update(line.split(": ", 1) for line in head)  # type: ignore[arg-type]
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                     b"content-length: 2\r\nconnection: close\r\n\r\n[]")


def test_a_captured_request_cannot_be_relayed_to_the_server(tmp_path: Path) -> None:
    team = enrolled_team(tmp_path, {"ops": "operator"})
    ops = team["ops"]
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    captured: dict[str, str] = {}
    thread = threading.Thread(target=_capture_one, args=(listener, captured), daemon=True)
    thread.start()
    # The operator's profile points at the listener: it signs the request for that address.
    with SignedClient(f"http://127.0.0.1:{port}", key=ops.key, sender=ops.client_id) as at:
        assert at.get("/v1/members", list[MemberInfo]) == []
    thread.join(timeout=30)
    listener.close()
    assert captured[HEADER_AUTHORITY] == f"127.0.0.1:{port}"

    # Relayed byte for byte (headers and all) to the real server: refused, with the reason.
    relayed = ops.tc.get("/v1/members", headers={
        k: v for k, v in captured.items() if k.lower().startswith("x-fedmor-")})
    assert relayed.status_code == 401, relayed.text
    detail = relayed.json()["detail"]
    assert f"signed for '127.0.0.1:{port}'" in detail and "testserver:80" in detail, detail

    # Sent to the server itself, the same call is answered.
    with SignedClient(http=ops.tc, key=ops.key, sender=ops.client_id) as direct:
        assert [m.name for m in direct.get("/v1/members", list[MemberInfo])] == ["ops"]


def test_the_authorities_a_server_answers_to() -> None:
    from server_app import ServerSettings

    named = ServerSettings(public_urls=["https://Fedmor.Example.org", "https://[::1]:9000/x"])
    assert named.signed_authorities(host="0.0.0.0", port=8443, tls_cert=None) == {
        "fedmor.example.org:443", "[::1]:9000"}
    loopback = ServerSettings().signed_authorities(host="127.0.0.1", port=8443, tls_cert=None)
    assert loopback == {"127.0.0.1:8443", "localhost:8443", "[::1]:8443"}
    wildcard = ServerSettings().signed_authorities(host="0.0.0.0", port=8443, tls_cert=None)
    assert {"localhost:8443", f"{socket.gethostname().lower()}:8443"} <= wildcard
