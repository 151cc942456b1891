"""What lesson 04 measures of the positional encodings: the distance between positions and its dependence on the
offset alone, cosine similarity, the rank correlation of distance with offset against shuffled tables, the rotation
that moves the sinusoidal table by k positions, and the norm of its rows."""

from __future__ import annotations

import math

import torch
from torch import Tensor


def distance_matrix(table: Tensor) -> Tensor:
    """Euclidean distance between every pair of position vectors.

    Shapes:
        table: (T, D) -> (T, T)
    """
    t = table.double()
    return torch.cdist(t, t, compute_mode="donot_use_mm_for_euclid_dist").to(table.dtype)


def cosine_matrix(table: Tensor) -> Tensor:
    """Cosine similarity between every pair of rows. Shapes: (T, D) -> (T, T)."""
    unit = torch.nn.functional.normalize(table.double(), dim=-1)
    return (unit @ unit.T).to(table.dtype)


def offset_profile(dist: Tensor, max_offset: int | None = None) -> dict[str, list[float]]:
    """Distances grouped by offset k = |p - q|: mean, min and max of every k-th diagonal, k = 1..max_offset.

    Shapes:
        dist (T, T)
    """
    T = dist.shape[0]
    max_offset = T - 1 if max_offset is None else min(max_offset, T - 1)
    prof: dict[str, list[float]] = {"offset": [], "mean": [], "min": [], "max": []}
    for k in range(1, max_offset + 1):
        diag = dist.diagonal(k).double()
        prof["offset"].append(k)
        prof["mean"].append(float(diag.mean()))
        prof["min"].append(float(diag.min()))
        prof["max"].append(float(diag.max()))
    return prof


def offset_spread(dist: Tensor, max_offset: int | None = None) -> float:
    """Largest (max - min) over the pairs sharing one offset: 0 when distance depends only on the offset."""
    prof = offset_profile(dist, max_offset)
    return max((hi - lo for hi, lo in zip(prof["max"], prof["min"], strict=True)), default=0.0)


def _average_ranks(x: Tensor) -> Tensor:
    """Ranks 0..n-1 of a 1-D tensor, tied values sharing the mean of their ranks (as Spearman's rho needs)."""
    order = torch.argsort(x, stable=True)
    _, counts = torch.unique_consecutive(x[order], return_counts=True)  # sizes of the groups of equal values
    ends = counts.cumsum(0)
    group_rank = (ends - counts + ends - 1).double() / 2  # mean of the ranks start..end-1 of each group
    ranks = torch.empty(x.shape[0], dtype=torch.float64)
    ranks[order] = group_rank.repeat_interleave(counts)
    return ranks


def offset_rank_correlation(dist: Tensor) -> float:
    """Spearman's rank correlation between the offset |p - q| and the distance, over all pairs p < q.

    1 when every larger offset means a larger distance; about 0 for position vectors in random order. It asks
    whether *nearby positions are closer than distant ones*, without asking for a particular shape of the profile.

    Shapes:
        dist (T, T), T >= 3
    """
    T = dist.shape[0]
    if T < 3:
        raise ValueError(f"need at least 3 positions to correlate distance with offset, got {T}")
    p, q = torch.triu_indices(T, T, 1)  # all pairs p < q
    a, b = _average_ranks((q - p).double()), _average_ranks(dist[p, q].double())
    a, b = a - a.mean(), b - b.mean()
    return float((a * b).sum() / (a.norm() * b.norm()).clamp_min(1e-300))


def shuffled_rank_correlations(table: Tensor, n_shuffles: int, generator: torch.Generator | None = None) -> Tensor:
    """:func:`offset_rank_correlation` of ``table`` with its rows put in random order, ``n_shuffles`` times.

    The baseline for "nearby positions are closer": the same vectors (the same norms and the same set of pairwise
    distances), with only their assignment to positions made random. A table whose order means something lands in
    the upper tail of these values; one whose order means nothing lands inside them.

    Shapes:
        table (T, D) -> (n_shuffles,)
    """
    dist = distance_matrix(table)
    T = dist.shape[0]
    p, q = torch.triu_indices(T, T, 1)  # all pairs p < q
    a = _average_ranks((q - p).double())  # (P,) ranks of the offsets: the same for every shuffle
    a = a - a.mean()
    # a shuffle moves the vectors, not the set of distances: the rank of the distance between vectors i and j is
    # fixed, and the shuffle only decides which offset it is compared with
    rank = torch.zeros(T, T, dtype=torch.float64)
    rank[p, q] = _average_ranks(dist[p, q].double())
    rank = rank + rank.T  # (T, T) symmetric
    b_norm = (rank[p, q] - rank[p, q].mean()).norm()
    perms = torch.stack([torch.randperm(T, generator=generator) for _ in range(n_shuffles)])  # (N, T)
    ranks = rank[perms[:, p], perms[:, q]]  # (N, P): distance ranks in the shuffled order
    ranks = ranks - ranks.mean(-1, keepdim=True)
    return (ranks @ a) / (a.norm() * b_norm).clamp_min(1e-300)  # (N,)


def rotation_matrix(k: int, d_model: int, base: float = 10000.0) -> Tensor:
    """The linear map M_k with PE[p + k] = PE[p] @ M_k.T for every p (block-diagonal 2x2 rotations).

    Shapes:
        -> (d_model, d_model), even d_model only
    """
    if d_model % 2:
        raise ValueError(f"rotation_matrix needs an even d_model, got {d_model}")
    freq = 1.0 / base ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (D/2,)
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    cos, sin = torch.cos(k * freq), torch.sin(k * freq)
    i = torch.arange(0, d_model, 2)
    # sin(a+b) = sin a cos b + cos a sin b ; cos(a+b) = cos a cos b - sin a sin b
    m[i, i], m[i, i + 1] = cos, sin
    m[i + 1, i], m[i + 1, i + 1] = -sin, cos
    return m.float()


def expected_norm(d_model: int) -> float:
    """Every sinusoidal row has norm sqrt(d_model / 2) (each sin/cos pair has norm 1)."""
    return math.sqrt(d_model / 2)
