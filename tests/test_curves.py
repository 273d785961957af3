"""sdk.curves: the trailing moving average every alignment plot draws over the raw trace."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sdk.curves import default_window, moving_average, plot_trace


def test_the_average_trails_over_the_window_and_skips_missing_values() -> None:
    got = moving_average([1.0, 2.0, 3.0, None, 5.0, float("nan"), 7.0], 3)
    # point i: mean of the finite values among points i-2..i
    assert list(got) == [1.0, 1.5, 2.0, 2.5, 4.0, 5.0, 6.0]
    assert math.isnan(moving_average([None, 1.0], 1)[0])  # nothing seen yet: no value
    assert list(moving_average([4.0, 6.0], 1)) == [4.0, 6.0]  # window 1: the trace itself


def test_the_default_window_is_a_tenth_of_the_trace_within_bounds() -> None:
    assert [default_window(n) for n in (0, 5, 30, 200, 5000)] == [1, 1, 3, 20, 50]
    values = list(np.arange(30.0))
    assert moving_average(values)[-1] == pytest.approx((27 + 28 + 29) / 3)
    with pytest.raises(ValueError, match="window of at least 1"):
        moving_average(values, 0)


def test_plot_trace_draws_the_raw_trace_under_its_average() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    average = plot_trace(ax, [1, 2, 3, 4], [0.0, 1.0, None, 3.0], "reward", window=2)
    raw, smooth = ax.get_lines()
    assert np.isnan(raw.get_ydata()[2]) and list(raw.get_ydata()[[0, 1, 3]]) == [0, 1, 3]
    assert list(smooth.get_ydata()) == list(average) == [0.0, 0.5, 1.0, 3.0]
    assert smooth.get_linewidth() > raw.get_linewidth()
    assert smooth.get_label() == "reward, moving average (2 steps)"
    plt.close(fig)
