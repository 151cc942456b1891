"""Exercise of notebook 13 (attention as explanation): integrated gradients as the right Riemann sum the lesson's
attributions approximate (what Captum's ``IntegratedGradients(method="riemann_right")`` computes: a test checks),
tried on a small non-linear function, where a wrong path, a missing (x - baseline) or a gradient taken at one point
shows."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from workbench.lessons.exercises import properties as P
from workbench.lessons.exercises.core import Case, Exercise, Invariant, register, variants

PACKAGE = ("captum.attr.IntegratedGradients", "workbench.inspect.attribution.attribute")


def integrated_gradients(f: Callable[[Tensor], Tensor], x: Tensor, baseline: Tensor, n_steps: int) -> Tensor:
    """(x - x') times the mean of the gradients of f at x' + (k / n_steps)(x - x'), k = 1..n_steps: the right
    Riemann sum of integrated gradients (Sundararajan et al., 2017), one row of attributions per input row.

    Shapes:
        x, baseline (N, D); f: (N, D) -> (N,) -> (N, D)
    """
    alphas = torch.arange(1, n_steps + 1, dtype=x.dtype) / n_steps  # (n,) the right end of each step
    path = baseline[None] + alphas[:, None, None] * (x - baseline)[None]  # (n, N, D)
    path = path.detach().requires_grad_(True)
    with torch.enable_grad():
        (grads,) = torch.autograd.grad(f(path.reshape(-1, x.shape[-1])).sum(), path)  # (n, N, D)
    return (x - baseline) * grads.mean(0)  # Captum's IntegratedGradients(method="riemann_right") (a test checks)


def on_function(fn, x: Tensor, baseline: Tensor, W1: Tensor, w2: Tensor, n_steps: int) -> Tensor:
    """``fn`` on f(x) = tanh(x W1) w2: a non-linear, row-wise function (its gradient changes along the path)."""

    def f(inputs: Tensor) -> Tensor:
        return torch.tanh(inputs @ W1) @ w2  # (N, D) @ (D, Hd) -> (N, Hd) @ (Hd,) -> (N,)

    return fn(f, x, baseline, n_steps)


def _case(name: str, N: int, D: int, Hd: int, n_steps: int, seed: int, dtype=torch.float32, zero: bool = True,
          scale: float = 1.5) -> Case:
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(N, D, generator=g, dtype=torch.float64) * scale).to(dtype)
    base = torch.zeros_like(x) if zero else (torch.randn(N, D, generator=g, dtype=torch.float64) * 0.5).to(dtype)
    W1 = torch.randn(D, Hd, generator=g, dtype=torch.float64).to(dtype)
    w2 = torch.randn(Hd, generator=g, dtype=torch.float64).to(dtype)
    return Case(name, (x, base, W1, w2, n_steps))


def _cases() -> list[Case]:
    return [_case("4 rows, 6 features, 20 steps, zero baseline", 4, 6, 8, 20, 12),
            _case("float64, a non-zero baseline, 7 steps", 3, 5, 4, 7, 13, dtype=torch.float64, zero=False),
            _case("1 row, 1 step", 1, 3, 5, 1, 14, dtype=torch.float64),
            _case("2 rows, 50 steps", 2, 4, 6, 50, 15)]


def _draw(rng) -> Case:
    N, D, Hd, n = rng.randint(1, 5), rng.randint(1, 7), rng.randint(1, 8), rng.randint(1, 40)
    dt = P.dtype(rng)
    return _case(f"{N} rows, {D} features, {n} steps, {dt}", N, D, Hd, n, rng.randrange(2**31), dtype=dt,
                 zero=rng.random() < 0.5, scale=rng.choice([0.5, 1.5, 3.0]))


def _ig(f, x, baseline, n_steps, points: str = "right", times_delta: bool = True, mean: bool = True):
    """A parametrised integrated gradients, for writing the planted mistakes."""
    if points == "input":
        alphas = [1.0]
    elif points == "left":
        alphas = [k / n_steps for k in range(n_steps)]
    else:
        alphas = [k / n_steps for k in range(1, n_steps + 1)]
    total = torch.zeros_like(x)
    for a in alphas:
        point = (baseline + a * (x - baseline)).detach().requires_grad_(True)
        with torch.enable_grad():
            (grad,) = torch.autograd.grad(f(point).sum(), point)
        total = total + grad
    avg = total / len(alphas) if mean else total
    return avg * (x - baseline) if times_delta else avg


def _completeness(args: tuple, out) -> str | None:
    """Completeness holds only as n_steps grows; what holds at any n: a feature where x equals the baseline gets 0."""
    x, base = args[0], args[1]
    if not isinstance(out, torch.Tensor) or out.shape != x.shape:
        return None
    same = x == base
    bad = same & (out != 0)
    if bool(bad.any()):
        idx = tuple(int(i) for i in bad.nonzero()[0])
        return f"feature {idx} equals its baseline but got {out[idx].item():.4g}"
    return None


register(Exercise(
    "13.integrated_gradients", "the right Riemann sum of integrated gradients along the straight path",
    integrated_gradients, _cases, driver=on_function, draw=_draw, package=PACKAGE, atol=1e-5, rtol=1e-4,
    invariants=(Invariant("a feature equal to its baseline gets 0 (the factor x - x')", _completeness),),
    mistakes=variants(
        _ig,
        ("gradient at the input only (gradient x input)", "integrated gradients averages the gradient along the "
         "path from the baseline to x, at x' + (k / n)(x - x') for k = 1..n, not only at x", {"points": "input"}),
        ("left Riemann sum", "the lesson's sum takes the right end of each step: k = 1..n (k = 0 is the baseline, "
         "k = n is x itself)", {"points": "left"}),
        ("(x - baseline) not multiplied", "multiply the mean gradient by x - x', feature by feature: that factor makes "
         "the attributions add up to f(x) - f(x')", {"times_delta": False}),
        ("gradients summed, not averaged", "divide the summed gradients by n_steps (the step length 1/n of the "
         "Riemann sum)", {"mean": False}),
    )))
