"""The consortium's operations from the command line: profiles (``fedmor enroll``, ``fedmor
profile``) and the operator's commands over the server's REST API (members, rounds, the live
roster, alignment), each a thin layer over :class:`OperatorClient`, the typed client of the
server's routes. It uses only the wire contract (``sdk.wire``) and the round-kind registry
(``sdk.rounds``)."""

from sdk.ops._connection import Connection, add_connection_options, connection_from_args
from sdk.ops._operator_client import OperatorClient
from sdk.ops._profiles import ProfileBook

__all__ = [
    "Connection",
    "OperatorClient",
    "ProfileBook",
    "add_connection_options",
    "connection_from_args",
]
