"""Reference values derived from first principles, shared by the tests (not a test module: no ``test_`` prefix).

Nothing here calls the workbench: the tests compare what the workbench measures with these.
"""

from __future__ import annotations

import math

import numpy as np
import torch


def jacobian_norm_closed_form(p: torch.Tensor) -> torch.Tensor:
    """||diag(p) - p p^T||_F from the weights alone. Squaring entry by entry: the diagonal gives
    sum_i p_i^2 (1 - p_i)^2 = S2 - 2 S3 + S4, the off-diagonal sum_{i != j} p_i^2 p_j^2 = S2^2 - S4, where
    Sk = sum_i p_i^k; so ||J||_F^2 = S2 - 2 S3 + S2^2. Uniform over n keys: sqrt(n - 1) / n; one-hot: 0;
    two equal weights: 1/2."""
    s2, s3 = (p**2).sum(-1), (p**3).sum(-1)
    return (s2 - 2 * s3 + s2**2).clamp(min=0).sqrt()  # clamp: rounding at a saturated softmax


def expected_jacobian_norm(d_k: int, n_keys: int, scaled: bool, n: int = 100_000) -> tuple[float, float]:
    """Mean and standard deviation of the Jacobian norm for random unit-variance q and k of width d_k.

    Given q, the scores q.k_j are independent N(0, |q|^2) (Gaussian keys), and |q|^2 is chi-squared with d_k
    degrees of freedom: so draw |q|^2, then the n_keys scores, divide by sqrt(d_k) when scaled, and apply the
    closed form. No autograd and no code of the workbench is involved."""
    rng = np.random.default_rng(1234)
    q2 = torch.from_numpy(rng.chisquare(d_k, n))  # |q|^2 ~ chi2(d_k)
    scores = torch.from_numpy(rng.standard_normal((n, n_keys))) * q2.sqrt()[:, None]
    if scaled:
        scores = scores / math.sqrt(d_k)
    f = jacobian_norm_closed_form(torch.softmax(scores, -1))
    return float(f.mean()), float(f.std())
