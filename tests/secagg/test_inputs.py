"""Bad updates are refused before anything is sent; quantization and schema behave."""

from __future__ import annotations

import numpy as np
import pytest

from sdk.secagg import (
    MaskedInput,
    QuantizationConfig,
    SecAggClient,
    SecAggConfig,
    generate_identities,
    parse_client_message,
    parse_server_message,
)
from sdk.secagg._errors import InvalidUpdateError, QuantizationOverflowError
from sdk.secagg._quantize import decode_sum, encode_weighted

from .conftest import Harness

_GOOD = np.zeros(6, dtype=np.float32)


@pytest.mark.parametrize(
    ("update", "weight", "match"),
    [
        (np.array([0.1, np.nan, 0, 0, 0, 0], dtype=np.float32), 1, "NaN"),
        (np.array([0.1, np.inf, 0, 0, 0, 0]), 1, "NaN or Inf"),
        (np.zeros((2, 3), dtype=np.float32), 1, "1-D"),
        (np.zeros(6, dtype=np.int32), 1, "dtype"),
        ([0.0] * 6, 1, "numpy array"),
        (_GOOD, 0, "outside"),
        (_GOOD, -3, "outside"),
        (_GOOD, 2.5, "integer"),
        (_GOOD, True, "integer"),
    ],
)
def test_bad_updates_refused_at_construction(update: object, weight: object, match: str) -> None:
    keys, roster = generate_identities([0])
    with pytest.raises(InvalidUpdateError, match=match):
        SecAggClient(0, keys[0], roster, update, weight)  # type: ignore[arg-type]


@pytest.mark.parametrize(("update", "weight", "match"), [(np.zeros(5, dtype=np.float32), 1, "5 elements"), (_GOOD, 5000, "max_weight")])
def test_shape_and_weight_checked_against_round_before_replying(update: np.ndarray, weight: int, match: str) -> None:
    h = Harness(n=3, dim=6, config=SecAggConfig(degree=2, threshold=2, max_weight=100))
    bad = SecAggClient(0, h.keys[0], h.roster, update, weight)
    with pytest.raises(InvalidUpdateError, match=match):
        bad.receive(h.outbox[0])


def test_overflow_names_the_bound() -> None:
    with pytest.raises(QuantizationOverflowError, match="scale_bits"):
        QuantizationConfig(clip_range=1.0, scale_bits=25, max_weight=1000).check_capacity(100)
    with pytest.raises(QuantizationOverflowError, match="max_weight"):
        QuantizationConfig(scale_bits=4, max_weight=10**8).check_capacity(100)
    fitted = QuantizationConfig.fitted(num_clients=100, max_weight=1000)
    fitted.check_capacity(100)
    with pytest.raises(QuantizationOverflowError):
        fitted.model_copy(update={"scale_bits": fitted.scale_bits + 1}).check_capacity(100)


def test_explicit_quantization_owns_clip_range_and_max_weight() -> None:
    quant = QuantizationConfig(clip_range=4.0, scale_bits=16, max_weight=7)
    cfg = SecAggConfig(quantization=quant)
    # The fields report what the rounds use, not their defaults (1.0, 1000).
    assert (cfg.clip_range, cfg.max_weight) == (4.0, 7)
    assert cfg.round_params([0, 1, 2], 4).quantization == quant
    assert SecAggConfig(quantization=quant, clip_range=4.0, max_weight=7).quantization == quant
    for name, value in (("clip_range", 1.0), ("max_weight", 1000)):
        with pytest.raises(ValueError, match=f"{name}={value!r} contradicts quantization.{name}"):
            SecAggConfig(quantization=quant, **{name: value})  # type: ignore[arg-type]


def test_encoding_is_unbiased_and_wraps_negatives() -> None:
    cfg = QuantizationConfig(clip_range=2.0, scale_bits=4, max_weight=10)
    x = np.full(20000, -0.3)  # weight 5: -0.3 * 5/10 * 16 = -2.4 units, not exact
    enc = encode_weighted(x, 5, cfg, np.random.default_rng(0))
    total, w = decode_sum(enc, cfg)
    assert w == 5 and abs(total.mean() / 5 + 0.3) < 0.005
    assert set(np.unique(total)) == {-3 * 10 / 16, -2 * 10 / 16}
    clipped, _ = decode_sum(encode_weighted(np.array([7.0, -7.0]), 10, cfg, np.random.default_rng(0)), cfg)
    assert clipped.tolist() == [20.0, -20.0]


def test_messages_round_trip_json_and_binary() -> None:
    h = Harness(n=3, dim=5, config=SecAggConfig(degree=2, threshold=2))
    for _ in range(2):
        for m in h.outbox.values():
            assert parse_server_message(m.model_dump_json()) == m
        h.step()
    replies = h.deliver()
    for r in replies.values():
        assert isinstance(r, MaskedInput)
        assert parse_client_message(r.model_dump_json()) == r
        blob = r.to_bytes()
        assert MaskedInput.from_bytes(blob) == r
        assert len(blob) - 4 * 6 < 16  # 4 bytes per element plus a tiny header


def test_float32_update_encodes_like_its_float64_copy() -> None:
    # 0.1 has no exact float32 form: clipping in float32 would move the bound and the encoding.
    cfg = QuantizationConfig(clip_range=0.1, scale_bits=26, max_weight=10)
    x = np.random.default_rng(0).uniform(-0.3, 0.3, 50_000).astype(np.float32)
    narrow = encode_weighted(x, 7, cfg, np.random.default_rng(5), block=4096)
    wide = encode_weighted(x.astype(np.float64), 7, cfg, np.random.default_rng(5))
    assert np.array_equal(narrow, wide)
