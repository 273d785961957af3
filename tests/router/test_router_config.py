"""The consortium's router configuration: its parameter count (counted without torch) is the
router's, and its hash depends on what it says, not on how it was written."""

from __future__ import annotations

import pytest

from sdk.router import HashingEncoder, Router, RouterConfig
from sdk.wire import ConsortiumRouterConfig


@pytest.mark.parametrize("router, heads", [
    ({}, 3),
    ({"input_dim": 64, "num_layers": 2}, 3),
    ({"input_dim": 16, "d_model": 32, "num_layers": 1, "num_heads": 8, "dim_feedforward": 7}, 5),
])
def test_the_counted_parameters_are_the_built_routers(router: dict[str, int], heads: int) -> None:
    config = ConsortiumRouterConfig.model_validate({
        "encoder": {"dim": router.get("input_dim", 64)}, "router": router,
        "heads": [f"m{k}" for k in range(heads)]})
    built = Router(config.router, config.heads, HashingEncoder(config.encoder).encoder_id)
    assert config.num_params == built.num_params()


def test_the_hash_follows_the_content_not_the_spelling() -> None:
    terse = ConsortiumRouterConfig(heads=["a", "b"])
    spelled = ConsortiumRouterConfig.model_validate(
        {"heads": ["a", "b"], "router": RouterConfig().model_dump(), "encoder": {"dim": 64}})
    assert terse.sha256 == spelled.sha256
    assert ConsortiumRouterConfig(heads=["b", "a"]).sha256 != terse.sha256  # head order counts
    assert terse.head_index("b") == 1
    with pytest.raises(ValueError, match="no head"):
        terse.head_index("c")


def test_mismatched_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="input_dim"):
        ConsortiumRouterConfig.model_validate({"heads": ["a"], "encoder": {"dim": 8}})
    with pytest.raises(ValueError, match="twice"):
        ConsortiumRouterConfig(heads=["a", "a"])
