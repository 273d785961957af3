"""The federation's starting router: published once by the operator, then every round sums the
members' deltas from its base (server and client processes on 127.0.0.1)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from client_app._demo import demo_update
from fedmor_local import OPEN_POLICY, LocalConsortium
from sdk.rounds import as_delta, from_delta
from sdk.secagg import QuantizationConfig
from sdk.wire import RoundInfo

LENGTH = 48


@pytest.fixture
def trio(tmp_path: Path) -> Iterator[LocalConsortium]:
    with LocalConsortium(tmp_path, 3, tls=False, server={"stage_deadline_s": 20.0},
                         demo=True, policy=OPEN_POLICY) as c:  # random updates, any round
        c.start()
        c.wait_enrolled()
        yield c


@pytest.fixture(scope="module")
def unpublished(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalConsortium]:
    """A server alone, shared by the tests whose requests it refuses: none may publish."""
    with LocalConsortium(tmp_path_factory.mktemp("unpublished"), 0) as c:
        c.start()
        yield c


def _post(c: LocalConsortium, body: bytes, **headers: str) -> object:
    return c.admin.post("/v1/router", content=body,
                        headers={"content-type": "application/octet-stream", **headers})


def test_rounds_sum_deltas_from_the_published_router(trio: LocalConsortium) -> None:
    base = np.random.default_rng(0).uniform(-0.25, 0.25, LENGTH).astype(np.float32)
    meta = trio.publish_router(base)
    assert meta["version"] == 1 and meta["length"] == LENGTH
    # One starting point only: a second publish would silently fork the federation.
    again = _post(trio, base.tobytes())
    assert again.status_code == 409 and "exists already" in again.json()["detail"]  # type: ignore[attr-defined]

    info = trio.create_round(kind="router_secagg", vector_length=LENGTH, min_clients=3)
    assert info["base_version"] == 1
    done = trio.wait_round(info["round_id"])
    assert done["status"] == "finished", done["error"]
    published = np.frombuffer(trio.admin.get(f"/v1/router/{done['router_version']}").content,
                              dtype="<f4")
    ups = [demo_update(n, RoundInfo.model_validate(done), base) for n in trio.names]
    # The members sent n_k (phi_k - base); base + their weighted mean is the weighted mean of
    # the phi_k, up to one fixed-point step.
    exact = sum(w * u.astype(np.float64) for u, w in ups) / sum(w for _, w in ups)
    step = 2.0 ** -QuantizationConfig.fitted(num_clients=3).scale_bits
    assert np.max(np.abs(published - exact)) <= step + 1e-6
    assert np.max(np.abs(published - base)) > 0.05  # the round moved the router


@pytest.mark.parametrize(("body", "message"), [
    (b"", "whole float32 values"),
    (b"\x00" * 5, "whole float32 values"),
    (np.array([1.0, np.nan], dtype="<f4").tobytes(), "non-finite"),
])
def test_a_bad_starting_router_is_refused_and_nothing_is_published(
        unpublished: LocalConsortium, body: bytes, message: str) -> None:
    resp = _post(unpublished, body)
    assert resp.status_code == 422 and message in resp.json()["detail"]  # type: ignore[attr-defined]
    assert unpublished.admin.get("/v1/router/latest").status_code == 404


def test_only_the_operator_publishes_the_starting_router(unpublished: LocalConsortium) -> None:
    body = np.zeros(4, dtype="<f4").tobytes()
    resp = _post(unpublished, body, authorization="Bearer not-the-token")
    assert resp.status_code == 401
    assert unpublished.admin.get("/v1/router/latest").status_code == 404


def test_delta_helpers_round_trip() -> None:
    base = np.linspace(-3, 3, 7, dtype=np.float32)  # LayerNorm-sized values
    params = base + np.float32(0.01)
    delta = as_delta(params, base)
    assert np.max(np.abs(delta)) < 0.011  # small enough for the default clip range of 1
    np.testing.assert_allclose(from_delta(delta, base), params, atol=1e-6)
    np.testing.assert_array_equal(as_delta(params, None), params)  # no base: the parameters
    with pytest.raises(ValueError, match="shape"):
        as_delta(params, base[:3])
