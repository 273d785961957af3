"""The consortium's operations from the command line: profiles (``fedmor enroll``, ``fedmor
profile``) and the operator's commands over the server's REST API (members, rounds, router
versions, the live roster, alignment). It uses only the wire contract (``sdk.wire``)."""

from sdk.ops._connection import (
    Connection,
    add_connection_options,
    connection_from_args,
    wait_for_server,
)
from sdk.ops._profiles import ProfileBook

__all__ = [
    "Connection",
    "ProfileBook",
    "add_connection_options",
    "connection_from_args",
    "wait_for_server",
]
