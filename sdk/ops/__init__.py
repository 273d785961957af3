"""The consortium's operations from the command line: profiles (``fedmor enroll``, ``fedmor
profile``) and the operator's commands over the server's REST API (members, rounds, router
versions, the live roster, alignment). It uses only the wire contract (``sdk.wire``)."""

from sdk.ops._connection import (
           ADMIN_TOKEN_ENV,
           Connection,
           ServerError,
           add_connection_options,
           connection_from_args,
    wait_for_server,
)
from sdk.ops._profiles import CONFIG_DIR_ENV, Profile, ProfileBook, config_dir, profiles_path

__all__ = ["ADMIN_TOKEN_ENV", "CONFIG_DIR_ENV", "Connection", "Profile", "ProfileBook",
           "ServerError", "add_connection_options", "config_dir", "connection_from_args",
           "profiles_path", "wait_for_server"]
