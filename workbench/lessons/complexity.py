"""The paper's Table 1 made computable: per-layer cost, sequential operations and maximum path length of
self-attention, recurrent, convolutional and restricted self-attention layers, analytic and measured.

Per-layer complexity (n = sequence length, d = width, k = kernel, r = neighbourhood):

| layer                      | operations     | sequential | max path length |
|----------------------------|----------------|------------|-----------------|
| self-attention             | O(n^2 d)       | O(1)       | O(1)            |
| recurrent                  | O(n d^2)       | O(n)       | O(n)            |
| convolutional              | O(k n d^2)     | O(1)       | O(log_k n)      |
| restricted self-attention  | O(r n d)       | O(1)       | O(n / r)        |

Note the square on d in the convolutional row: a k-wide convolution mapping d channels to d channels costs
k * d * d multiply-adds per position. (Study notes sometimes print O(k n d), which is a misprint.)

Units, the same for every row. Work is counted in multiply-adds of the matrix products the layer runs (one
multiply-add = 2 FLOPs, what ``torch.utils.flop_counter`` reports): both products of attention (QK^T and the
weighted sum of V) and both of the recurrent cell (W_x x_t and W_h h_{t-1}); the projections of attention are left
out, as in the paper's table. Path lengths are counted in layers a signal crosses; unrolled in time, the recurrent
layer is n applications of one cell, so its path between the two ends of the sequence is n of those layers.

One implementation of each row's layer (:func:`make_layer`), one measurer (:func:`measure_layer`: counted FLOPs,
peak tensor memory, median time and sequential steps, through :mod:`workbench.lessons.measure`) and one path-length
finder (:func:`measured_path_length`, contiguous or dilated convolutions included), beside the analytic counts.
Path lengths are counted with integers (``math.ceil(math.log(n, k))`` is off by one at exact powers of k).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from workbench.lessons.measure import count_operations, counted_flops, median_seconds, peak_tensor_bytes
from workbench.model.attention import scaled_dot_product_attention

KINDS = ("self_attention", "recurrent", "convolutional", "restricted")


def _unknown(kind: str) -> ValueError:
    return ValueError(f"unknown layer kind {kind!r}: choose one of {KINDS}")


# -- analytic --------------------------------------------------------------------------------------------------------
def layer_macs(kind: str, n: int, d: int, k: int = 3, r: int = 8) -> int:
    """Multiply-adds of the matrix products of one layer over a length-n sequence, counted alike for every kind
    (2 FLOPs each): attention's QK^T and weighted sum of V, 2 * n * n * d (its projections excluded, as in the
    paper's table); the recurrent cell's W_x x_t and W_h h_{t-1} at every step, 2 * n * d * d; the convolution's
    k * d * d per position; restricted attention's two products over r keys, 2 * r * n * d. The measured layers
    (:func:`make_layer`) run exactly these, except that restricted attention's window also holds the query's own
    position (r + 1 keys)."""
    if kind == "self_attention":
        return 2 * n * n * d
    if kind == "recurrent":
        return 2 * n * d * d  # W_x x_t and W_h h_{t-1} at every step
    if kind == "convolutional":
        return k * n * d * d
    if kind == "restricted":
        return 2 * r * n * d
    raise _unknown(kind)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def ceil_log(n: int, k: int) -> int:
    """Smallest L >= 0 with k**L >= n, counted in integers.

    ``math.ceil(math.log(n, k))`` is one too many at some exact powers of k (``math.log(125, 5)`` is
    3.0000000000000004), so multiply instead.
    """
    if k < 2:
        raise ValueError(f"a logarithm needs base k >= 2, got k={k}: use a kernel width of at least 2")
    layers, reach = 0, 1
    while reach < n:
        reach *= k
        layers += 1
    return layers


def analytic_path_length(kind: str, n: int, k: int = 3, r: int = 8, dilated: bool = False) -> int:
    """Layers needed before output position n-1 depends on input position 0 (the table's last column).

    ``dilated`` (convolutional only): causal kernels of width k with dilations 1, k, k², ... reach back
    k**L - 1 positions after L layers, so ceil(log_k n) layers. Recurrent: the layer unrolled in time is n
    applications of its cell, and the signal from position 0 crosses all of them, so n layers (the O(n) of the table).
    """
    if kind == "recurrent":
        return max(n, 1)
    if n <= 1 or kind == "self_attention":
        return 1
    # our layers use centred neighbourhoods: a kernel of width k (or a window of r keys) reaches (k-1)/2 (r/2)
    # positions to each side, so one layer moves information that far
    if kind == "convolutional":
        if not dilated and k < 3:
            raise ValueError(f"a centred kernel of width k={k} reaches no neighbour: use k >= 3 (or dilated=True)")
        return ceil_log(n, k) if dilated else _ceil_div(n - 1, (k - 1) // 2)
    if kind == "restricted":
        if r < 2:
            raise ValueError(f"a window of r={r} key reaches no neighbour: use r >= 2")
        return _ceil_div(n - 1, r // 2)
    raise _unknown(kind)


def sequential_ops(kind: str, n: int) -> int:
    """Operations that must run one after another within a layer (O(n) only for the recurrent layer)."""
    return n if kind == "recurrent" else 1


def table1(n: int, d: int, k: int = 3, r: int = 8) -> list[dict[str, Any]]:
    """Rows of the paper's Table 1 with concrete numbers for this (n, d, k, r)."""
    big_o = {
        "self_attention": ("O(n²·d)", "O(1)", "O(1)"),
        "recurrent": ("O(n·d²)", "O(n)", "O(n)"),
        "convolutional": ("O(k·n·d²)", "O(1)", "O(log_k n)"),
        "restricted": ("O(r·n·d)", "O(1)", "O(n/r)"),
    }
    rows = []
    for kind in KINDS:
        ops, seq, path = big_o[kind]
        rows.append({
            "layer": kind, "complexity": ops, "sequential": seq, "max_path": path,
            "macs": layer_macs(kind, n, d, k, r), "sequential_ops": sequential_ops(kind, n),
            "path_layers": analytic_path_length(kind, n, k, r, dilated=kind == "convolutional"),
        })
    return rows


# -- layers to measure -----------------------------------------------------------------------------------------------
class SelfAttentionCore(nn.Module):
    """softmax(x xᵀ / sqrt(d)) x on the explicit path (one head, no projections: the n²·d core the paper's table
    counts); the FLOP counter sees these matrix products, while it cannot see inside the fused CPU kernel."""

    def forward(self, x: Tensor) -> Tensor:
        """Shapes: x (B, n, d) -> (B, n, d)."""
        q = x[:, None]  # (B, 1, n, d): one head
        return scaled_dot_product_attention(q, q, q, need_weights=True)[0][:, 0]  # (B, 1, n, d) -> (B, n, d)


class RestrictedSelfAttention(nn.Module):
    """Restricted self-attention (Table 1, last row): each position attends to its neighbourhood of r // 2 keys
    on each side plus itself, computed on windows so the cost really is O(r·n·d), not O(n²·d)."""

    def __init__(self, r: int) -> None:
        super().__init__()
        if r < 2 or r % 2:
            raise ValueError(f"r={r}: use an even neighbourhood size of 2 or more (r // 2 keys on each side)")
        self.r = r

    def forward(self, x: Tensor) -> Tensor:
        """Shapes: x (B, n, d) -> (B, n, d)."""
        B, n, d = x.shape
        half = self.r // 2
        padded = torch.nn.functional.pad(x, (0, 0, half, half))  # (B, n + r, d)
        windows = padded.unfold(1, 2 * half + 1, 1)  # (B, n, d, r + 1): keys p - r/2 .. p + r/2
        scores = torch.einsum("bnd,bndw->bnw", x, windows) / math.sqrt(d)  # (B, n, r + 1)
        pos = torch.arange(n)[:, None] + torch.arange(-half, half + 1)[None, :]  # (n, r + 1) key positions
        scores = scores.masked_fill(((pos < 0) | (pos >= n))[None], float("-inf"))  # padding is no key
        return torch.einsum("bnw,bndw->bnd", torch.softmax(scores, -1), windows)  # (B, n, d)


class RecurrentLayer(nn.Module):
    """An Elman RNN written as an explicit loop, so its n sequential steps are visible and countable."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.w_x = nn.Linear(d, d)
        self.w_h = nn.Linear(d, d, bias=False)
        self.steps = 0

    def forward(self, x: Tensor) -> Tensor:
        """Shapes: x (B, n, d) -> (B, n, d)."""
        h = torch.zeros(x.shape[0], x.shape[2])  # (B, d)
        xs = self.w_x(x)  # (B, n, d): all inputs at once
        outs = []
        self.steps = 0
        for t in range(x.shape[1]):
            h = torch.tanh(xs[:, t] + self.w_h(h))  # depends on the previous step
            outs.append(h)
            self.steps += 1
        return torch.stack(outs, 1)  # (B, n, d)

    def last_output(self, x: Tensor, cells: int) -> Tensor:
        """The output at the last position computed by only the last ``cells`` applications of the cell (the state
        restarted from zero ``cells`` positions back): the unrolled recurrence cut to a depth of ``cells`` layers.

        Shapes: x (B, n, d) -> (B, d).
        """
        n = x.shape[1]
        h = torch.zeros(x.shape[0], x.shape[2])  # (B, d)
        for t in range(max(0, n - cells), n):
            h = torch.tanh(self.w_x(x[:, t]) + self.w_h(h))
        return h


class ConvLayer(nn.Module):
    """A width-k convolution mapping d channels to d: centred (k // 2 keys each side) by default, or causal with
    a dilation (left padding only), the building block of WaveNet/ByteNet-style dilated stacks."""

    def __init__(self, d: int, k: int = 3, dilation: int | None = None) -> None:
        super().__init__()
        span = (k - 1) * (dilation or 1)  # positions one output sees beyond its own
        self.conv = nn.Conv1d(d, d, k, padding=0 if dilation else span // 2, dilation=dilation or 1)
        self.left_pad = span if dilation else 0  # causal: all of the span on the left

    def forward(self, x: Tensor) -> Tensor:
        """Shapes: x (B, n, d) -> (B, n, d)."""
        h = x.transpose(1, 2)  # (B, d, n)
        if self.left_pad:
            h = torch.nn.functional.pad(h, (self.left_pad, 0))  # (B, d, n + left_pad)
        return self.conv(h).transpose(1, 2)  # (B, d, n) -> (B, n, d)


def make_layer(kind: str, d: int, k: int = 3, r: int = 8, dilation: int | None = None) -> nn.Module:
    """One layer of a Table 1 row. ``dilation`` (convolutional only): a causal convolution with that dilation
    instead of the centred contiguous one."""
    if kind == "self_attention":
        return SelfAttentionCore()
    if kind == "restricted":
        return RestrictedSelfAttention(r)
    if kind == "recurrent":
        return RecurrentLayer(d)
    if kind == "convolutional":
        return ConvLayer(d, k, dilation)
    raise _unknown(kind)


# -- measured --------------------------------------------------------------------------------------------------------
@torch.no_grad()
def measure_layer(kind: str, n: int, d: int, k: int = 3, r: int = 8, batch: int = 1, repeats: int = 3) -> dict[str, float]:
    """Counted FLOPs, peak activation bytes, median seconds and sequential steps of one layer of ``kind`` on a
    (batch, n, d) input.

    ``steps`` is the number of dependent steps the layer ran (the recurrent layer counts its loop; the others
    run as a handful of batched operations and report 1); ``operations`` is what :func:`count_operations`
    measures, the same for every n except in the recurrent layer.
    """
    torch.manual_seed(0)
    layer = make_layer(kind, d, k, r).eval()
    x = torch.randn(batch, n, d)
    flops = counted_flops(lambda: layer(x))
    memory = peak_tensor_bytes(lambda: layer(x), x, layer)
    seconds = median_seconds(lambda: layer(x), repeats=repeats)
    return {"flops": float(flops), "memory_bytes": float(memory), "seconds": seconds,
            "steps": float(getattr(layer, "steps", 1) or 1), "operations": float(count_operations(lambda: layer(x)))}


def fit_loglog_slope(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Least-squares fit of log y = slope * log x + intercept."""
    slope, intercept = np.polyfit(np.log(np.asarray(x, float)), np.log(np.asarray(y, float)), 1)
    return float(slope), float(intercept)


def measured_path_length(kind: str, n: int, k: int = 3, r: int = 8, d: int = 4, dilated: bool = False,
                         max_layers: int | None = None) -> int:
    """Stack layers of ``kind`` until the last output position depends on input position 0 (by autograd).

    ``dilated`` (convolutional only): layer L is a causal convolution with dilation k**(L-1), the paper's
    O(log_k n) case. Recurrent: the layer unrolled in time is a stack of cell applications, so the depth tried is
    the number of cells unrolled before the last position (:meth:`RecurrentLayer.last_output`); it reaches position
    0 at n cells, the same unit as the other rows.
    """
    if dilated and kind != "convolutional":
        raise ValueError(f"dilated=True applies to the convolutional kind, not {kind!r}")
    max_layers = max_layers or n + 1
    torch.manual_seed(0)
    x = torch.randn(1, n, d, requires_grad=True)
    if kind == "recurrent":
        cell = RecurrentLayer(d)
        for depth in range(1, max_layers + 1):
            grad = torch.autograd.grad(cell.last_output(x, depth).sum(), x)[0]
            if grad[0, 0].abs().sum() > 0:
                return depth
        raise RuntimeError(f"position 0 never reached position {n - 1} within {max_layers} cells")
    h = x
    for depth in range(1, max_layers + 1):
        h = make_layer(kind, d, k, r, dilation=k ** (depth - 1) if dilated else None)(h)  # built as it is needed
        grad = torch.autograd.grad(h[0, -1].sum(), x, retain_graph=True)[0]
        if grad[0, 0].abs().sum() > 0:
            return depth
    raise RuntimeError(f"position 0 never reached position {n - 1} within {max_layers} layers")
