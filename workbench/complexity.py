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
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from .attention import scaled_dot_product_attention
from .masks import causal_mask

KINDS = ("self_attention", "recurrent", "convolutional", "restricted")


def layer_macs(kind: str, n: int, d: int, k: int = 3, r: int = 8) -> int:
    """Multiply-adds of the core operation of one layer over a length-n sequence (projections excluded for
    attention, as in the paper's table: QK^T and the weighted sum of V, 2 * n * n * d)."""
    if kind == "self_attention":
        return 2 * n * n * d
    if kind == "recurrent":
        return n * d * d  # W_hh h_{t-1} at every step (the input projection adds another n d^2)
    if kind == "convolutional":
        return k * n * d * d
    if kind == "restricted":
        return 2 * r * n * d
    raise ValueError(f"unknown layer kind {kind!r}: choose one of {KINDS}")


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

    ``dilated=True`` for the convolutional row: causal convolutions with dilations 1, k, k², ... (WaveNet,
    ByteNet), whose receptive field after L layers is k**L positions, so ceil(log_k n) layers.
    """
    if kind == "convolutional" and dilated and k < 2:
        raise ValueError(f"a dilated convolution needs a kernel width k >= 2, got k={k}")
    if n <= 1 or kind in ("self_attention", "recurrent"):
        return 1  # recurrent: one layer, but through n sequential steps (see sequential_ops)
    # our layers use centred neighbourhoods: a kernel of width k (or a window of r keys) reaches (k-1)/2 (r/2)
    # positions to each side, so one layer moves information that far
    if kind == "convolutional":
        return ceil_log(n, k) if dilated else -(-(n - 1) // ((k - 1) // 2))  # integer ceiling division
    if kind == "restricted":
        return -(-(n - 1) // (r // 2))
    raise ValueError(f"unknown layer kind {kind!r}: choose one of {KINDS}")


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
            "path_layers": n if kind == "recurrent" else analytic_path_length(kind, n, k, r, dilated=kind == "convolutional"),
        })
    return rows


def crossover_n(d: int) -> int:
    """Self-attention's core costs 2 n^2 d vs recurrent n d^2 (+ n d^2 input): cheaper while n < d."""
    return d


# -- layers to measure ---------------------------------------------------------------------------------------------
class SelfAttentionCore(nn.Module):
    def __init__(self, d: int, r: int | None = None) -> None:
        super().__init__()
        self.r = r

    def forward(self, x: Tensor) -> Tensor:
        q = x[:, None]  # (B, 1, n, d): one head, so the cost is the paper's n^2 d
        mask = None
        if self.r is not None:
            n = x.shape[1]
            i = torch.arange(n)
            mask = ((i[None, :] - i[:, None]).abs() <= self.r // 2)[None, None]  # (1, 1, n, n) band
        return scaled_dot_product_attention(q, q, q, mask=mask)[0][:, 0]


class RecurrentLayer(nn.Module):
    """An Elman RNN written as an explicit loop, so its n sequential steps are visible and countable."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.w_x = nn.Linear(d, d)
        self.w_h = nn.Linear(d, d, bias=False)
        self.steps = 0

    def forward(self, x: Tensor) -> Tensor:
        h = torch.zeros(x.shape[0], x.shape[2])
        xs = self.w_x(x)  # (B, n, d): all inputs at once
        outs = []
        self.steps = 0
        for t in range(x.shape[1]):
            h = torch.tanh(xs[:, t] + self.w_h(h))  # depends on the previous step
            outs.append(h)
            self.steps += 1
        return torch.stack(outs, 1)


class ConvLayer(nn.Module):
    def __init__(self, d: int, k: int = 3, dilation: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv1d(d, d, k, padding=(k - 1) // 2 * dilation, dilation=dilation)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(x.transpose(1, 2)).transpose(1, 2)


def make_layer(kind: str, d: int, k: int = 3, r: int = 8) -> nn.Module:
    if kind == "self_attention":
        return SelfAttentionCore(d)
    if kind == "restricted":
        return SelfAttentionCore(d, r=r)
    if kind == "recurrent":
        return RecurrentLayer(d)
    if kind == "convolutional":
        return ConvLayer(d, k)
    raise ValueError(f"unknown layer kind {kind!r}: choose one of {KINDS}")


@torch.no_grad()
def measure_layer(kind: str, n: int, d: int, k: int = 3, r: int = 8, batch: int = 1, repeats: int = 5) -> dict[str, float]:
    """Median forward time of one layer, and the peak bytes of the tensors its forward allocates (measured by
    :func:`workbench.analysis.peak_tensor_bytes`, which intercepts every operation; input and weights excluded).

    What the memory shows: the convolution keeps its (B, n, d) output; the recurrent layer its projected inputs,
    n hidden states and their stack, 3 (B, n, d); self-attention through the fused kernel only O(n d) (the CPU
    flash kernel never materialises the n x n weights), while the restricted layer, written here as full
    attention under a band mask, builds n x n masks. :func:`workbench.analysis.measure_table1` measures the
    explicit and windowed layers instead, whose memory follows Table 1.
    """
    from .analysis import peak_tensor_bytes  # analysis imports this module

    layer = make_layer(kind, d, k, r).eval()
    x = torch.randn(batch, n, d)
    layer(x)  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        layer(x)
        times.append(time.perf_counter() - t0)
    memory = peak_tensor_bytes(lambda: layer(x), x, layer)
    return {"time_s": statistics.median(times), "memory_bytes": float(memory), "steps": float(getattr(layer, "steps", 1) or 1)}


def fit_loglog_slope(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Least-squares fit of log y = slope * log x + intercept."""
    slope, intercept = np.polyfit(np.log(np.asarray(x, float)), np.log(np.asarray(y, float)), 1)
    return float(slope), float(intercept)


def measured_path_length(kind: str, n: int, k: int = 3, r: int = 8, d: int = 4, max_layers: int | None = None) -> int:
    """Stack layers of ``kind`` until the last output position depends on input position 0 (by autograd).

    For the recurrent layer this is 1 layer (the dependency goes through n sequential steps instead).
    """
    max_layers = max_layers or n + 1
    torch.manual_seed(0)
    layers = [make_layer(kind, d, k, r) for _ in range(max_layers)]
    x = torch.randn(1, n, d, requires_grad=True)
    h = x
    for depth, layer in enumerate(layers, start=1):
        h = layer(h)
        grad = torch.autograd.grad(h[0, -1].sum(), x, retain_graph=True)[0]
        if grad[0, 0].abs().sum() > 0:
            return depth
    raise RuntimeError(f"position 0 never reached position {n - 1} within {max_layers} layers")


def causal_reach(n: int) -> Tensor:
    """Which inputs each output of one causal self-attention layer can see (for path illustrations)."""
    return causal_mask(n)
