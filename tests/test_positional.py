"""Sinusoidal positional encoding: the paper's formula and its properties."""

from __future__ import annotations

import math

import pytest
import torch

from workbench.lessons.positional import (
    distance_matrix,
    expected_norm,
    offset_rank_correlation,
    rotation_matrix,
    shuffled_rank_correlations,
)
from workbench.model.positional import (
    LearnedPositionalEncoding,
    SinusoidalPositionalEncoding,
    sinusoidal_table,
)


@pytest.mark.parametrize("d_model", [4, 16, 512])
def test_table_equals_paper_formula(d_model):
    table = sinusoidal_table(30, d_model)
    for pos in (0, 1, 7, 29):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


@pytest.mark.parametrize("d_model", [8, 64, 512])
def test_every_row_has_norm_sqrt_half_d(d_model):
    norms = sinusoidal_table(100, d_model).norm(dim=-1)
    torch.testing.assert_close(norms, torch.full((100,), expected_norm(d_model)))


def test_distance_depends_only_on_offset_and_grows():
    dist = distance_matrix(sinusoidal_table(64, 128))
    assert torch.allclose(dist, dist.T) and torch.all(dist.diagonal() == 0)
    for k in (1, 3, 10):
        diag = dist.diagonal(offset=k)
        assert diag.max() - diag.min() < 1e-4  # same distance for every pair k apart
    mean_by_offset = [dist.diagonal(offset=k).mean().item() for k in range(1, 20)]
    assert mean_by_offset[0] < mean_by_offset[5] < mean_by_offset[18]


def test_shift_is_a_linear_rotation():
    table = sinusoidal_table(40, 16)
    for k in (1, 5):
        m = rotation_matrix(k, 16)
        torch.testing.assert_close(table[:-k] @ m.T, table[k:], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(m @ m.T, torch.eye(16), atol=1e-5, rtol=1e-5)


def test_modules_add_table_with_offset_and_check_length():
    pe = SinusoidalPositionalEncoding(8, 10)
    x = torch.zeros(1, 3, 8)
    torch.testing.assert_close(pe(x, offset=2)[0], sinusoidal_table(10, 8)[2:5])
    assert "table" not in pe.state_dict()  # a non-persistent buffer
    with pytest.raises(ValueError, match="max_len"):
        pe(torch.zeros(1, 11, 8))
    learned = LearnedPositionalEncoding(8, 10)
    assert learned(x).shape == (1, 3, 8) and learned.table.requires_grad


def test_offset_rank_correlation_of_ordered_and_shuffled_tables():
    line = torch.arange(12.0)[:, None] * torch.tensor([[3.0, -4.0, 0.0]])  # rows p·v: distance 5·|p - q|, exact
    assert offset_rank_correlation(distance_matrix(line)) == pytest.approx(1.0, abs=1e-12)
    assert offset_rank_correlation(distance_matrix(line.flip(0))) == pytest.approx(1.0, abs=1e-12)
    # ties share their mean rank: (3, 1, 2, 2, 5, 1) -> (4, 0.5, 2.5, 2.5, 5, 0.5)
    from workbench.lessons.positional import _average_ranks
    assert _average_ranks(torch.tensor([3.0, 1, 2, 2, 5, 1])).tolist() == [4.0, 0.5, 2.5, 2.5, 5.0, 0.5]
    with pytest.raises(ValueError, match="at least 3"):
        offset_rank_correlation(torch.zeros(2, 2))


def test_shuffled_rank_correlations_are_the_shuffled_tables_and_centre_on_zero():
    table = sinusoidal_table(18, 64)  # distances rise with the offset, with ties (they depend on the offset only)
    dist = distance_matrix(table)
    fast = shuffled_rank_correlations(table, 20, torch.Generator().manual_seed(3))
    g = torch.Generator().manual_seed(3)
    direct = [offset_rank_correlation(dist[perm][:, perm]) for perm in (torch.randperm(18, generator=g) for _ in range(20))]
    torch.testing.assert_close(fast, torch.tensor(direct, dtype=torch.float64))
    null = shuffled_rank_correlations(table, 2000, torch.Generator().manual_seed(0))
    assert abs(float(null.mean())) < 3 * float(null.std()) / math.sqrt(2000)  # no order left: centred on 0
    assert offset_rank_correlation(dist) > float(null.quantile(0.99))  # the real order is far in the tail
