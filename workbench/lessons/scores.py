"""Attention score functions compared (paper section 3.2.1): dot-product against additive, and why the
dot product is divided by sqrt(d_k).

* :func:`dot_scores` and :func:`additive_scores` compute the two compatibility functions the paper weighs;
  :func:`score_cost` gives their analytic FLOPs and largest intermediate;
* :func:`scaling_study` measures, for growing d_k, the variance of q·k and what it does to the softmax
  (saturation, entropy, gradient size through :func:`softmax_jacobian_norm`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

import torch
from torch import Tensor

from workbench.inspect.heads import head_entropy


def dot_scores(q: Tensor, k: Tensor) -> Tensor:
    """Scaled dot-product scores q·k / sqrt(d). Shapes: q (B, Tq, d), k (B, Tk, d) -> (B, Tq, Tk)."""
    return (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])


def additive_scores(q: Tensor, k: Tensor, w_q: Tensor, w_k: Tensor, v: Tensor) -> Tensor:
    """Bahdanau's additive compatibility score vᵀ tanh(W_q q_i + W_k k_j) for every (query, key) pair.

    Shapes:
        q (B, Tq, d), k (B, Tk, d), w_q and w_k (d, d_a), v (d_a,) -> scores (B, Tq, Tk)
    """
    hidden = torch.tanh((q @ w_q)[:, :, None, :] + (k @ w_k)[:, None, :, :])  # (B, Tq, Tk, d_a)
    return (hidden @ v[:, None]).squeeze(-1)  # (B, Tq, Tk, 1) -> (B, Tq, Tk)


def score_cost(kind: str, batch: int, Tq: int, Tk: int, d: int, d_a: int | None = None) -> dict[str, int]:
    """Analytic FLOPs (a multiply-add counts 2) and the largest intermediate (elements) of one score matrix.

    ``additive``: projections 2·B·(Tq + Tk)·d·d_a, then per pair an add, a tanh and a d_a-long dot product
    (about 4·d_a FLOPs), and a (B, Tq, Tk, d_a) hidden tensor. ``dot``: 2·B·Tq·Tk·d and a (B, Tq, Tk) matrix.
    """
    d_a = d if d_a is None else d_a
    if kind == "additive":
        flops = 2 * batch * (Tq + Tk) * d * d_a + 4 * batch * Tq * Tk * d_a
        return {"flops": flops, "largest_intermediate": batch * Tq * Tk * d_a}
    if kind == "dot":
        return {"flops": 2 * batch * Tq * Tk * d, "largest_intermediate": batch * Tq * Tk}
    raise ValueError(f"unknown score kind {kind!r}: choose 'additive' or 'dot'")


def softmax_jacobian_norm(logits: Tensor) -> Tensor:
    """Frobenius norm of d softmax(z) / d z at each row of ``logits``, measured with autograd (``torch.func``).

    The Jacobian is diag(p) - p pᵀ: near zero when one weight is ~1 (a saturated softmax passes back almost no
    gradient), largest when the weights are spread.

    Shapes:
        logits (N, K) -> (N,)
    """
    jac = torch.func.vmap(torch.func.jacrev(lambda z: torch.softmax(z, -1)))(logits)  # (N, K, K)
    return jac.flatten(1).norm(dim=-1)


def scaling_study(d_ks: Sequence[int], n_pairs: int = 20000, n_keys: int = 16, n_queries: int = 512,
                  generator: torch.Generator | None = None) -> dict[str, list[float]]:
    """Why the paper divides by sqrt(d_k), measured for each d_k on random unit-variance queries and keys.

    Returns lists (one value per d_k) under these keys:
        ``var_dot``, ``var_scaled``: variance of q·k and of q·k / sqrt(d_k) over ``n_pairs`` pairs;
        ``max_weight_unscaled``, ``max_weight_scaled``: mean largest softmax weight over ``n_keys`` keys;
        ``entropy_unscaled``, ``entropy_scaled``: mean entropy of those weights (log(n_keys) = uniform);
        ``jacobian_unscaled``, ``jacobian_scaled``: mean Frobenius norm of the softmax Jacobian (gradient size).
    """
    out: dict[str, list[float]] = defaultdict(list)
    for d_k in d_ks:
        q = torch.randn(n_pairs, d_k, generator=generator)
        k = torch.randn(n_pairs, d_k, generator=generator)
        dots = (q * k).sum(-1)  # (N,)
        out["var_dot"].append(float(dots.var()))
        out["var_scaled"].append(float((dots / math.sqrt(d_k)).var()))
        qs = torch.randn(n_queries, 1, d_k, generator=generator)
        ks = torch.randn(n_queries, n_keys, d_k, generator=generator)
        scores = (qs * ks).sum(-1)  # (n_queries, n_keys)
        for tag, logits in (("unscaled", scores), ("scaled", scores / math.sqrt(d_k))):
            p = torch.softmax(logits, -1)
            out[f"max_weight_{tag}"].append(float(p.max(-1).values.mean()))
            out[f"entropy_{tag}"].append(float(head_entropy(p[None, None])[0]))  # (1, 1, N, K): one "head"
            out[f"jacobian_{tag}"].append(float(softmax_jacobian_norm(logits).mean()))
    return dict(out)
