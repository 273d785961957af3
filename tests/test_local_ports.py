"""The harness's ports lie below the kernel's ephemeral range: an outgoing connection on the
host can never take one before the process it was given to binds it (a guide's member started
minutes after its port was chosen once found it taken)."""

import socket

from fedmor_local import free_port
from fedmor_local._ports import _ephemeral_from


def test_ports_are_below_the_ephemeral_range_free_and_never_handed_twice() -> None:
    start = _ephemeral_from()
    handed = [free_port() for _ in range(50)]
    run = free_port(4)
    assert all(p < start for p in [*handed, run + 3])
    assert len(set(handed) | set(range(run, run + 4))) == 54
    for port in range(run, run + 4):  # all four free together
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_an_outgoing_connection_gets_no_port_the_harness_hands_out() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        with socket.create_connection(listener.getsockname()) as outgoing:
            assert outgoing.getsockname()[1] >= _ephemeral_from()
