"""One real consortium (a server and five client apps over HTTPS) shared by the apps tests.

Test files run in name order; the destructive tests (killing processes) live in the last
file, ``test_apps_rounds.py``, and kill the server / a client only at its end.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from server_app._local import LocalConsortium

N_CLIENTS = 5


@pytest.fixture(scope="session")
def consortium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalConsortium]:
    with LocalConsortium(tmp_path_factory.mktemp("consortium"), N_CLIENTS, tls=True,
                         server={"stage_deadline_s": 20.0, "max_request_bytes": 2**21},
                         clients={"max_request_bytes": 2**21}) as c:
        c.start()
        c.wait_enrolled()
        yield c
