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


def test_measure_times_and_counts_steps():
    for kind in KINDS:
        assert measure_layer(kind, 16, 8, repeats=2)["time_s"] > 0
    assert measure_layer("recurrent", 16, 8, repeats=1)["steps"] == 16
    assert measure_layer("convolutional", 16, 8, repeats=1)["steps"] == 1


def test_measured_memory_is_the_tensors_the_layers_allocate():
    """Peak bytes against the sizes of the tensors each implementation creates, derived by hand (float32)."""
    B, n, d = 2, 64, 16
    mem = {kind: measure_layer(kind, n, d, batch=B, repeats=1)["memory_bytes"] for kind in KINDS}
    assert mem["convolutional"] == B * n * d * 4  # only the (B, d, n) output; the transposes are views
    # the explicit loop keeps the projected inputs (B, n, d), the n hidden states (B, d) and their stack (B, n, d)
    assert mem["recurrent"] == 3 * B * n * d * 4
    # the fused kernel never builds the (B, n, n) weights: its peak is its (B, 1, n, d) output and little more
    assert B * n * d * 4 <= mem["self_attention"] < B * n * n * 4 / 2
    # the band mask is an (n, n) tensor: memory quadratic in n even though only r keys per query are used
    assert mem["restricted"] >= n * n


# exact powers of k and their neighbours; math.ceil(math.log(n, k)) is one too many at 125 = 5**3, 216 = 6**3,
# 5**6 and 8**7 (math.log(125, 5) == 3.0000000000000004)
@pytest.mark.parametrize(
    "n,k,layers",
    [(124, 5, 3), (125, 5, 3), (126, 5, 4), (26, 3, 3), (27, 3, 3), (28, 3, 4), (243, 3, 5), (244, 3, 6),
     (8, 2, 3), (9, 2, 4), (999, 10, 3), (1000, 10, 3), (1001, 10, 4), (215, 6, 3), (216, 6, 3), (217, 6, 4),
     (5**6, 5, 6), (5**6 + 1, 5, 7), (8**7, 8, 7), (8**7 + 1, 8, 8)],
)
def test_dilated_path_length_exact_at_powers_of_k(n, k, layers):
    """The smallest L with k**L >= n, written out by hand, and for small n also measured by autograd on a stack
    of causal convolutions with dilations 1, k, k², ... (an independent check)."""
    assert analytic_path_length("convolutional", n, k=k, dilated=True) == layers
    if n <= 300:
        from workbench.analysis import causal_dilated_path_length

        assert causal_dilated_path_length(n, k) == layers


def test_dilated_path_length_rejects_kernel_below_two():
    with pytest.raises(ValueError, match="k"):
        analytic_path_length("convolutional", 10, k=1, dilated=True)
