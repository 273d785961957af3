"""Metric math: PSNR, SSIM, cosine, bootstrap means, ROC/AUC, null band, baselines, LPIPS."""

from pathlib import Path

import numpy as np
import pytest
import torch

from attacks import SSIMParams
from attacks._baselines import reconstruction_baselines
from attacks._errors import AttackInputError
from attacks._lpips import lpips_available, lpips_distance
from attacks._metrics import PSNR_CAP_DB, cosine_similarity, mean_ci, psnr, ssim
from attacks._roc import auc, bootstrap_auc_ci, null_auc_band, roc_curve, tpr_at_fpr

RNG = np.random.default_rng(0)


def test_psnr_identical_is_capped() -> None:
    x = RNG.random((3, 3, 16, 16))
    assert psnr(x, x) == PSNR_CAP_DB == 100.0


def test_psnr_of_known_error() -> None:
    x = 0.25 + 0.5 * RNG.random((4, 3, 16, 16))
    assert psnr(x, x + 0.1) == pytest.approx(20.0, abs=1e-9)  # MSE 0.01
    noisy = x + RNG.normal(0, 0.05, x.shape)  # stays inside [0, 1]: MSE ~ 0.0025
    assert psnr(x, np.clip(noisy, 0, 1)) == pytest.approx(26.02, abs=0.2)


def test_psnr_is_the_mean_of_per_image_values() -> None:
    x = 0.25 + 0.5 * RNG.random((2, 1, 16, 16))
    y = x.copy()
    y[0] += 0.1  # 20 dB
    y[1] += 0.01  # 40 dB
    assert psnr(x, y) == pytest.approx(30.0)


def test_layouts_agree_and_bad_inputs_raise() -> None:
    a, b = RNG.random((2, 3, 16, 16)), RNG.random((2, 3, 16, 16))
    nhwc = dict(layout="NHWC")
    at, bt = a.transpose(0, 2, 3, 1), b.transpose(0, 2, 3, 1)
    assert psnr(at, bt, **nhwc) == pytest.approx(psnr(a, b))  # type: ignore[arg-type]
    assert ssim(at, bt, **nhwc) == pytest.approx(ssim(a, b))  # type: ignore[arg-type]
    assert psnr(torch.from_numpy(a), b) == pytest.approx(psnr(a, b))
    with pytest.raises(AttackInputError, match=r"\[0, 1\]"):
        psnr(a * 255, b)
    with pytest.raises(AttackInputError, match="4-D"):
        psnr(a[0], b[0])
    with pytest.raises(AttackInputError, match="at least 11x11"):
        ssim(a[:, :, :8, :8], b[:, :, :8, :8])


def test_ssim_identity_unrelated_and_monotone() -> None:
    x = RNG.random((4, 3, 32, 32))
    assert ssim(x, x) == pytest.approx(1.0)
    assert abs(ssim(x, RNG.random(x.shape))) < 0.05
    smooth = np.repeat(np.linspace(0.2, 0.8, 32)[None, None, None, :], 32, axis=2)
    smooth = np.repeat(smooth, 3, axis=1)
    values = [
        ssim(smooth, np.clip(smooth + RNG.normal(0, s, smooth.shape), 0, 1))
        for s in (0.01, 0.05, 0.2)
    ]
    assert values[0] > values[1] > values[2]
    assert ssim(x, smooth.repeat(4, axis=0)) == pytest.approx(ssim(smooth.repeat(4, axis=0), x))


def test_ssim_of_flat_images_matches_the_closed_form() -> None:
    # Flat images have zero variance: SSIM reduces to the luminance term (2ab + C1)/(a²+b²+C1).
    a, b, c1 = 0.3, 0.6, (0.01 * 1.0) ** 2
    x, y = np.full((1, 1, 16, 16), a), np.full((1, 1, 16, 16), b)
    assert ssim(x, y) == pytest.approx((2 * a * b + c1) / (a**2 + b**2 + c1), rel=1e-9)


def test_ssim_params_are_pinned() -> None:
    assert SSIMParams().model_dump() == {
        "window_size": 11,
        "sigma": 1.5,
        "k1": 0.01,
        "k2": 0.03,
        "data_range": 1.0,
        "padding": "valid",
        "aggregation": "per-channel mean, then mean over images",
    }


def test_cosine_similarity() -> None:
    a = RNG.normal(size=(5, 8))
    assert cosine_similarity(a, 3 * a) == pytest.approx(1.0)
    assert cosine_similarity(a, -a) == pytest.approx(-1.0)
    assert abs(cosine_similarity(RNG.normal(size=(2000, 64)), RNG.normal(size=(2000, 64)))) < 0.02


def test_mean_ci_contains_the_mean() -> None:
    s = mean_ci(RNG.normal(10, 1, 50), metric="psnr")
    assert s.ci_low < s.mean < s.ci_high
    assert s.ci_high - s.ci_low < 1.0
    one = mean_ci(np.array([7.0]), metric="psnr")
    assert one.ci_low == one.mean == one.ci_high == 7.0


def test_auc_perfect_inverse_random_and_ties() -> None:
    y = np.r_[np.ones(50), np.zeros(50)].astype(int)
    s = np.r_[np.arange(50) + 100.0, np.arange(50)]
    assert auc(s, y) == 1.0
    assert auc(-s, y) == 0.0
    assert auc(np.zeros(100), y) == 0.5
    rand = RNG.random(100)
    lo, hi = null_auc_band(50, 50)
    assert lo <= auc(rand, y) <= hi
    tied = np.round(RNG.random(100), 1)
    assert roc_curve(tied, y).area == pytest.approx(auc(tied, y))
    assert tpr_at_fpr(roc_curve(s, y)) == {0.001: 1.0, 0.01: 1.0, 0.05: 1.0, 0.1: 1.0}
    with pytest.raises(AttackInputError, match="member"):
        auc([0.1, 0.2], [1, 1])


def test_tpr_at_fpr_reads_the_curve() -> None:
    # 10 non-members: members beat 9 of them -> at FPR 0.1 every member is caught.
    y = np.r_[np.ones(10), np.zeros(10)].astype(int)
    s = np.r_[np.full(10, 5.0), np.r_[np.zeros(9), 10.0]]
    tprs = tpr_at_fpr(roc_curve(s, y), (0.01, 0.1))
    assert tprs == {0.01: 0.0, 0.1: 1.0}


def test_bootstrap_ci_contains_point_and_is_seeded() -> None:
    y = np.r_[np.ones(100), np.zeros(100)].astype(int)
    s = y * 0.5 + RNG.normal(0, 1, 200)
    lo, hi = bootstrap_auc_ci(s, y, seed=3)
    assert lo < auc(s, y) < hi
    assert (lo, hi) == bootstrap_auc_ci(s, y, seed=3)


def test_null_band_matches_simulation() -> None:
    y = np.r_[np.ones(200), np.zeros(200)].astype(int)
    sims = [auc(RNG.random(400), y) for _ in range(2000)]
    lo, hi = null_auc_band(200, 200)
    q_lo, q_hi = np.quantile(sims, [0.025, 0.975])
    assert lo == pytest.approx(q_lo, abs=0.01)
    assert hi == pytest.approx(q_hi, abs=0.01)
    assert null_auc_band(1000, 1000)[1] < hi  # narrower with more samples


def test_baselines_on_uniform_images_match_known_values() -> None:
    originals, pool = RNG.random((8, 3, 16, 16)), RNG.random((16, 3, 16, 16))
    b = reconstruction_baselines(originals, pool)
    assert set(b) == {"grey", "dataset_mean", "unrelated"}
    assert b["grey"]["psnr"].mean == pytest.approx(10.79, abs=0.15)  # MSE 1/12
    assert b["unrelated"]["psnr"].mean == pytest.approx(7.78, abs=0.15)  # MSE 1/6
    assert abs(b["unrelated"]["ssim"].mean) < 0.05
    dm = b["dataset_mean"]["psnr"]
    assert dm.ci_low <= dm.mean <= dm.ci_high


def test_embedding_baselines_use_cosine_and_no_grey() -> None:
    b = reconstruction_baselines(RNG.normal(size=(4, 16)), RNG.normal(size=(32, 16)))
    assert set(b) == {"dataset_mean", "unrelated"}
    assert set(b["unrelated"]) == {"cosine"}
    with pytest.raises(AttackInputError, match="pool"):
        reconstruction_baselines(RNG.normal(size=(4, 16)), RNG.normal(size=(4, 8)))


def _random_lpips_file(path: Path) -> Path:
    """A real weights file with the documented keys (random values: tests the code path)."""
    from attacks._lpips import _expected_shapes

    g = torch.Generator().manual_seed(0)
    state = {k: torch.rand(s, generator=g) * 0.1 for k, s in _expected_shapes().items()}
    torch.save(state, path)
    return path


def test_lpips_unavailable_without_weights(tmp_path: Path) -> None:
    x = RNG.random((2, 3, 32, 32))
    assert not lpips_available(None)
    assert not lpips_available(tmp_path / "missing.pth")
    assert lpips_distance(x, x, None) is None
    bad = tmp_path / "bad.pth"
    torch.save({"features.0.weight": torch.zeros(1)}, bad)
    assert not lpips_available(bad)
    assert lpips_distance(x, x, bad) is None


def test_lpips_with_a_weights_file(tmp_path: Path) -> None:
    w = _random_lpips_file(tmp_path / "alex_lpips.pth")
    assert lpips_available(w)
    x, y = RNG.random((2, 3, 64, 64)), RNG.random((2, 3, 64, 64))
    assert lpips_distance(x, x, w) == pytest.approx(0.0, abs=1e-7)
    d = lpips_distance(x, y, w)
    assert d is not None and d > 0
    assert lpips_distance(y, x, w) == pytest.approx(d, rel=1e-5)
    assert lpips_distance(x[:, :, :16, :16], y[:, :, :16, :16], w) is None  # too small
