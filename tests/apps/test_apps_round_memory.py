"""One definition of the secure round: the in-memory driver (what the router's federated
training runs) and a REST round between the real apps agree on the aggregate."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from fedmor_local import OPEN_POLICY, LocalConsortium
from sdk.rounds import ROUND_KINDS, memory_spec, run_in_memory
from sdk.wire import generate_key
from tests.apps._grid_update import QUANTIZATION, STEP, grid_delta

from .conftest import running

LENGTH = 64
NAMES = ["site-0", "site-1", "site-2"]


@pytest.fixture(scope="module")
def consortium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalConsortium]:
    with running(tmp_path_factory.mktemp("round-memory"), len(NAMES), demo=True,
                 policy=OPEN_POLICY, server={"stage_deadline_s": 20.0},
                 updates={n: "tests.apps._grid_update:grid_update" for n in NAMES}) as c:
        yield c


def test_in_memory_round_equals_the_rest_round(consortium: LocalConsortium) -> None:
    """Same updates, same base, same params: the published router and the in-memory driver's
    are equal to the bit (the grid updates make the fixed-point encoding deterministic)."""
    base = (np.random.default_rng(9).integers(-64, 65, size=LENGTH) * 2.0**-8).astype(np.float32)
    consortium.publish_router(base)
    params = {"quantization": QUANTIZATION, "degree": 2}
    done = consortium.run_round(kind="router_secagg", vector_length=LENGTH, min_clients=3,
                                params=params)
    assert done["base_version"] is not None
    blob = consortium.admin.get(f"/v1/router/{done['router_version']}")
    assert blob.status_code == 200, blob.text
    rest = np.frombuffer(blob.content, dtype="<f4")

    keys = {name: generate_key() for name in NAMES}
    spec = memory_spec("router_secagg", keys, LENGTH, {**params, "graph_seed": "00" * 32},
                       round_id=1, min_clients=3)
    updates = {}
    for name in NAMES:
        delta, weight = grid_delta(name, LENGTH)
        updates[name] = (base + delta, weight)
    memory = run_in_memory(ROUND_KINDS["router_secagg"], spec, keys, updates, base)
    assert memory.failed is None and memory.params is not None
    assert memory.survivors == NAMES and memory.weight_sum == 1 + 2 + 4
    np.testing.assert_array_equal(memory.params, rest)
    # Not a trivial agreement: the round moved the router off its base, by the weighted mean.
    expected = base + sum(w * d for d, w in (grid_delta(n, LENGTH) for n in NAMES)) / 7
    assert float(np.abs(rest - base).max()) > 10 * STEP
    np.testing.assert_allclose(rest, expected, atol=1e-6)

