"""Table 1: analytic counts, the measured layers (restricted attention on windows), measured path lengths,
slope fitting."""

from __future__ import annotations

import math

import pytest
import torch

from workbench.lessons.complexity import (
    KINDS,
    RestrictedSelfAttention,
    analytic_path_length,
    ceil_log,
    fit_loglog_slope,
    layer_macs,
    make_layer,
    measure_layer,
    measured_path_length,
    sequential_ops,
    table1,
)


def test_analytic_counts_follow_the_table():
    n, d, k, r = 50, 64, 3, 8
    assert layer_macs("self_attention", n, d) == 2 * n * n * d
    assert layer_macs("recurrent", n, d) == 2 * n * d * d  # W_x x_t and W_h h_{t-1}: two products, like attention's
    assert layer_macs("convolutional", n, d, k=k) == k * n * d * d  # the square on d
    assert layer_macs("restricted", n, d, r=r) == 2 * r * n * d
    assert layer_macs("convolutional", n, 2 * d, k=k) == 4 * layer_macs("convolutional", n, d, k=k)
    rows = {row["layer"]: row for row in table1(n, d, k, r)}
    assert rows["convolutional"]["complexity"] == "O(k·n·d²)"
    assert sequential_ops("recurrent", n) == n and sequential_ops("self_attention", n) == 1
    # self-attention's core is cheaper than the recurrent one while n < d (2 n^2 d < 2 n d^2), equal at n = d
    assert layer_macs("self_attention", 20, 64) < layer_macs("recurrent", 20, 64)
    assert layer_macs("self_attention", 64, 64) == layer_macs("recurrent", 64, 64)
    assert layer_macs("self_attention", 200, 64) > layer_macs("recurrent", 200, 64)
    # one unit for the path column: the recurrent layer's n steps are n layers of its unrolled cell
    assert rows["recurrent"]["path_layers"] == analytic_path_length("recurrent", n) == sequential_ops("recurrent", n) == n


@pytest.mark.parametrize("kind", ["self_attention", "recurrent", "convolutional"])
@pytest.mark.parametrize("n,d", [(16, 32), (48, 16)])
def test_table_counts_the_products_the_measured_layers_run(kind, n, d):
    """Every row counts its layer's matrix products the same way: counted FLOPs are 2 x the table's multiply-adds."""
    assert measure_layer(kind, n, d, k=3, repeats=1)["flops"] == 2 * layer_macs(kind, n, d, k=3)


def test_restricted_window_holds_its_own_position_too():
    """Restricted attention's window is r keys plus the query's own position: r + 1 keys, as counted."""
    n, d, r = 32, 16, 8
    assert measure_layer("restricted", n, d, r=r, repeats=1)["flops"] == 2 * layer_macs("restricted", n, d, r=r) * (r + 1) / r


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", [5, 13])
def test_measured_path_length_matches_analytic(kind, n):
    assert measured_path_length(kind, n, k=3, r=4) == analytic_path_length(kind, n, k=3, r=4)
    if kind == "recurrent":
        assert measured_path_length(kind, n) == n  # unrolled: the signal crosses n applications of the cell


def test_slope_fit_recovers_power_law():
    x = [8, 16, 32, 64]
    slope, intercept = fit_loglog_slope(x, [3 * v**1.7 for v in x])
    assert slope == pytest.approx(1.7) and intercept == pytest.approx(1.0986, rel=1e-3)


def test_measure_times_and_counts_steps():
    for kind in KINDS:
        res = measure_layer(kind, 16, 8, repeats=2)
        assert res["seconds"] > 0 and res["memory_bytes"] > 0
    assert measure_layer("recurrent", 16, 8, repeats=1)["steps"] == 16


def test_restricted_attention_equals_banded_full_attention():
    x = torch.randn(2, 11, 8)
    i = torch.arange(11)
    band = (i[None] - i[:, None]).abs() <= 2
    ref = torch.softmax((x @ x.transpose(1, 2) / math.sqrt(8)).masked_fill(~band, float("-inf")), -1) @ x
    assert torch.allclose(RestrictedSelfAttention(4)(x), ref, atol=1e-5)
    assert isinstance(make_layer("restricted", 8, r=4), RestrictedSelfAttention)
    with pytest.raises(ValueError, match="even"):
        RestrictedSelfAttention(3)


def test_measure_layer_flops_memory_and_steps():
    att = [measure_layer("self_attention", n, 16, repeats=1) for n in (16, 32)]
    rnn = [measure_layer("recurrent", n, 16, repeats=1) for n in (16, 32)]
    assert att[1]["flops"] == 4 * att[0]["flops"] and rnn[1]["flops"] == 2 * rnn[0]["flops"]
    assert att[0]["flops"] == rnn[0]["flops"]  # n = d: 4 n² d = 4 n d²
    assert att[1]["memory_bytes"] == pytest.approx(4 * att[0]["memory_bytes"], rel=0.2)
    assert [m["steps"] for m in rnn] == [16.0, 32.0] and att[0]["steps"] == 1.0
    restricted = [measure_layer("restricted", n, 16, r=4, repeats=1) for n in (16, 32)]
    assert restricted[1]["flops"] == 2 * restricted[0]["flops"]  # O(r·n·d): linear in n, not a banded n² product


@pytest.mark.parametrize("n,k", [(2, 3), (9, 3), (10, 3), (27, 3), (28, 3), (125, 5), (126, 5), (16, 2)])
def test_dilated_path_length_is_ceil_log_k(n, k):
    assert ceil_log(n, k) == math.ceil(round(math.log(n, k), 9))
    assert analytic_path_length("convolutional", n, k=k, dilated=True) == ceil_log(n, k)
    assert measured_path_length("convolutional", n, k=k, dilated=True) == ceil_log(n, k)
