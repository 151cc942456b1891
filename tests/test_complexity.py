"""Table 1: analytic counts, measured path lengths, slope fitting."""

from __future__ import annotations

import pytest

from workbench.complexity import (
    KINDS,
    analytic_path_length,
    fit_loglog_slope,
    layer_macs,
    measure_layer,
    measured_path_length,
    sequential_ops,
    table1,
)


def test_analytic_counts_follow_the_table():
    n, d, k, r = 50, 64, 3, 8
    assert layer_macs("self_attention", n, d) == 2 * n * n * d
    assert layer_macs("recurrent", n, d) == n * d * d
    assert layer_macs("convolutional", n, d, k=k) == k * n * d * d  # the square on d
    assert layer_macs("restricted", n, d, r=r) == 2 * r * n * d
    assert layer_macs("convolutional", n, 2 * d, k=k) == 4 * layer_macs("convolutional", n, d, k=k)
    rows = {row["layer"]: row for row in table1(n, d, k, r)}
    assert rows["convolutional"]["complexity"] == "O(k·n·d²)"
    assert sequential_ops("recurrent", n) == n and sequential_ops("self_attention", n) == 1
    # self-attention's core is cheaper than the recurrent one while n < d / 2 (2 n^2 d < n d^2)
    assert layer_macs("self_attention", 20, 64) < layer_macs("recurrent", 20, 64)
    assert layer_macs("self_attention", 200, 64) > layer_macs("recurrent", 200, 64)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", [5, 13])
def test_measured_path_length_matches_analytic(kind, n):
    assert measured_path_length(kind, n, k=3, r=4) == analytic_path_length(kind, n, k=3, r=4)


def test_slope_fit_recovers_power_law():
    x = [8, 16, 32, 64]
    slope, intercept = fit_loglog_slope(x, [3 * v**1.7 for v in x])
    assert slope == pytest.approx(1.7) and intercept == pytest.approx(1.0986, rel=1e-3)


def test_measure_returns_positive_numbers_and_counts_steps():
    for kind in KINDS:
        res = measure_layer(kind, 16, 8, repeats=2)
        assert res["time_s"] > 0 and res["memory_bytes"] > 0
    assert measure_layer("recurrent", 16, 8, repeats=1)["steps"] == 16
