"""A local consortium of real processes (one server, N member apps) on 127.0.0.1, for tests,
benchmarks and the demo."""

from sdk.consortium._local import (
    ADMIN_TOKEN,
    OPEN_POLICY,
    LocalConsortium,
    client_cert_paths,
    free_port,
    make_pki,
    wait_healthy,
)

__all__ = ["ADMIN_TOKEN", "OPEN_POLICY", "LocalConsortium", "client_cert_paths", "free_port",
           "make_pki", "wait_healthy"]
