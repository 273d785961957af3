from pathlib import Path

import numpy as np
import pytest
import torch

from sdk.router import Router, RouterConfig
from sdk.router._errors import RouterMismatchError, RouterShapeError

from ._helpers import tiny_router


def _inputs(
    b: int = 3, t: int = 5, d: int = 16, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(b, t, d, generator=g)
    mask = torch.ones(b, t, dtype=torch.bool)
    mask[1, 3:] = False
    return hidden, mask


def test_logits_shape_and_default_depth() -> None:
    router = tiny_router(clients=("a", "b", "c"))
    hidden, mask = _inputs()
    assert router(hidden, mask).shape == (3, 3)
    assert router.features(hidden, mask).shape == (3, 16)
    assert len(Router(RouterConfig(), ["a"], "e").layers.layers) == 4


def test_padding_does_not_change_outputs() -> None:
    router = tiny_router().eval()
    hidden, mask = _inputs()
    base = router(hidden, mask)
    # append 4 padded positions full of garbage (even NaN) and change the masked-out tail of row 1
    garbage = torch.full((3, 4, 16), float("nan"))
    hidden2 = torch.cat([hidden.clone(), garbage], dim=1)
    hidden2[1, 3:5] = 1e6
    mask2 = torch.cat([mask, torch.zeros(3, 4, dtype=torch.bool)], dim=1)
    torch.testing.assert_close(router(hidden2, mask2), base)
    # one row alone gives the same logits as inside the batch
    torch.testing.assert_close(router(hidden[1:2, :3], mask[1:2, :3]), base[1:2])


def test_empty_row_and_bad_shapes_are_clear_errors() -> None:
    router = tiny_router()
    hidden, mask = _inputs()
    mask[0] = False
    with pytest.raises(RouterShapeError, match="at least one real token"):
        router(hidden, mask)
    with pytest.raises(RouterShapeError, match=r"\(B, T, 16\)"):
        router(torch.zeros(2, 3, 8), torch.ones(2, 3, dtype=torch.bool))


def test_save_load_round_trip_gives_identical_outputs(tmp_path: Path) -> None:
    router = tiny_router(clients=("h1", "h2", "h3")).eval()
    hidden, mask = _inputs()
    router.save(tmp_path / "ckpt")
    loaded = Router.load(
        tmp_path / "ckpt", client_ids=["h1", "h2", "h3"], encoder_id="test-encoder"
    )
    assert loaded.client_ids == ["h1", "h2", "h3"]
    assert loaded.config == router.config
    assert torch.equal(loaded.eval()(hidden, mask), router(hidden, mask))


def test_loading_for_another_client_set_or_encoder_fails(tmp_path: Path) -> None:
    tiny_router(clients=("h1", "h2")).save(tmp_path)
    with pytest.raises(RouterMismatchError, match="serves clients"):
        Router.load(tmp_path, client_ids=["h1", "h3"])
    with pytest.raises(RouterMismatchError, match="serves clients"):
        Router.load(tmp_path, client_ids=["h2", "h1"])  # order is the head's row order
    with pytest.raises(RouterMismatchError, match="encoder"):
        Router.load(tmp_path, encoder_id="another-encoder")
    with pytest.raises(FileNotFoundError):
        Router.load(tmp_path / "missing")


def test_add_client_keeps_old_logits_and_starts_at_zero(tmp_path: Path) -> None:
    router = tiny_router(clients=("a", "b")).eval()
    hidden, mask = _inputs()
    before = router(hidden, mask)
    router.add_client("c")
    after = router(hidden, mask)
    assert after.shape == (3, 3)
    assert torch.equal(after[:, :2], before)
    assert torch.equal(after[:, 2], torch.zeros(3))
    assert router.client_ids == ["a", "b", "c"]
    # the grown router survives a checkpoint round trip
    router.save(tmp_path)
    assert torch.equal(
        Router.load(tmp_path, client_ids=["a", "b", "c"]).eval()(hidden, mask), after
    )
    with pytest.raises(RouterMismatchError, match="already"):
        router.add_client("a")


def test_constructor_rejects_bad_client_sets() -> None:
    with pytest.raises(RouterMismatchError, match="duplicate"):
        tiny_router(clients=("a", "a"))
    with pytest.raises(RouterMismatchError, match="at least one"):
        tiny_router(clients=())


def test_flat_params_round_trip_and_wrong_shape() -> None:
    a, b = tiny_router(seed=0), tiny_router(seed=1)
    hidden, mask = _inputs()
    vec = a.get_flat_params()
    assert vec.dtype == np.float32 and vec.shape == (a.num_params(),)
    assert not np.array_equal(vec, b.get_flat_params())
    b.set_flat_params(vec)
    assert np.array_equal(b.get_flat_params(), vec)
    assert torch.equal(a.eval()(hidden, mask), b.eval()(hidden, mask))
    with pytest.raises(RouterShapeError, match="wrong shape"):
        b.set_flat_params(vec[:-1])
    with pytest.raises(RouterShapeError, match="wrong shape"):
        b.set_flat_params(vec.reshape(1, -1))
    bad = vec.copy()
    bad[0] = np.nan
    with pytest.raises(RouterShapeError, match="NaN"):
        b.set_flat_params(bad)


def test_same_seed_same_init() -> None:
    assert np.array_equal(
        tiny_router(seed=3).get_flat_params(), tiny_router(seed=3).get_flat_params()
    )


def test_router_needs_at_least_one_layer() -> None:
    import pydantic

    from sdk.router import RouterConfig

    with pytest.raises(pydantic.ValidationError, match="num_layers"):
        RouterConfig(num_layers=0)
