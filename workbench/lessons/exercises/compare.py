"""Comparing a student's outputs with the package's, as plain data: :func:`difference` (one line on the first
difference: structure, shape, dtype, device, NaN or the largest gap), :func:`plain` (any output or input as data
that can cross to another process and be read back with ``torch.load(weights_only=True)``), and compact renderings
for the feedback."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

# -- comparing outputs -------------------------------------------------------------------------------------------
OPAQUE = "__opaque__"  # key of the plain-data stand-in for an object that is not plain data (see plain())


def _describe(x: Any) -> str:
    if isinstance(x, dict) and OPAQUE in x:
        return str(x[OPAQUE])
    if isinstance(x, Tensor):
        return f"a tensor of shape {tuple(x.shape)}"
    if isinstance(x, (tuple, list)):
        return f"a {type(x).__name__} of {len(x)} items"
    if isinstance(x, dict):
        return f"a dict with keys {sorted(map(str, x))}"
    name = type(x).__name__
    return f"{'an' if name[:1] in 'aeiou' else 'a'} {name} ({x!r:.40})"


def _where(path: str) -> str:
    return f" (in {path})" if path else ""


def difference(got: Any, want: Any, atol: float = 1e-5, rtol: float = 1e-4, path: str = "",
               float64: tuple[float, float] | None = None) -> str | None:
    """None when ``got`` equals ``want`` (tensors within tolerance, NaN where NaN), else a one-line description of
    the first difference: structure, type, shape, dtype, device, NaN, or the largest difference and where.

    ``float64`` is ``(atol, rtol)`` for float64 tensors (None: ``atol`` and ``rtol``): an answer that computes a
    float64 input in float32 and casts back is off by about 1e-7, which a float32 tolerance excuses. Types are
    strict: an ``int`` is expected as a Python int (not a float or a tensor), a float as a Python float or int, a
    list as a list and a tuple as a tuple.
    """
    if isinstance(got, dict) and OPAQUE in got and not (isinstance(want, dict) and OPAQUE in want):
        if isinstance(want, Tensor) and "device" in got:
            return f"device {got['device']}, expected {want.device}{_where(path)}"
        return f"returned {got[OPAQUE]}, expected {_describe(want)}{_where(path)}"
    if isinstance(want, Tensor):
        if not isinstance(got, Tensor):
            return f"returned {_describe(got)}, expected a tensor of shape {tuple(want.shape)}{_where(path)}"
        if got.shape != want.shape:
            return f"shape {tuple(got.shape)}, expected {tuple(want.shape)}{_where(path)}"
        if got.dtype != want.dtype:
            return f"dtype {got.dtype}, expected {want.dtype}{_where(path)}"
        if got.device != want.device:
            return f"device {got.device}, expected {want.device}{_where(path)}"
        if not want.dtype.is_floating_point:
            if torch.equal(got, want):
                return None
            idx = tuple(int(i) for i in (got != want).nonzero()[0])
            return (f"{int((got != want).sum())} of {want.numel()} entries differ, first at {idx}: yours "
                    f"{got[idx].item()!r}, expected {want[idx].item()!r}{_where(path)}")
        if float64 is not None and want.dtype == torch.float64:
            atol, rtol = float64
        g, w = got.detach().double(), want.detach().double()
        bad_nan = torch.isnan(g) & ~torch.isnan(w)
        if bool(bad_nan.any()):
            idx = tuple(int(i) for i in bad_nan.nonzero()[0])
            return f"NaN at {idx} where the expected value is {w[idx].item():.4g}{_where(path)}"
        if torch.allclose(g, w, atol=atol, rtol=rtol, equal_nan=True):
            return None
        same = (g == w) | (torch.isnan(g) & torch.isnan(w))  # equal infinities and NaN where NaN differ by nothing
        err = torch.where(same, 0.0, (g - w).abs()).nan_to_num(nan=math.inf, posinf=math.inf)
        idx = tuple(int(i) for i in divmod_index(int(err.argmax()), tuple(w.shape)))
        yours, expected = _apart(g[idx].item(), w[idx].item(), 4)
        return f"largest difference {err[idx].item():.3g} at index {idx}: yours {yours}, expected {expected}{_where(path)}"
    if isinstance(want, (tuple, list)):
        if type(got) is not type(want) and isinstance(got, (tuple, list)) and len(got) == len(want):
            return f"returned a {type(got).__name__}, expected a {type(want).__name__}{_where(path)}"
        if not isinstance(got, (tuple, list)) or len(got) != len(want):
            return f"returned {_describe(got)}, expected {_describe(want)}{_where(path)}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            d = difference(g, w, atol, rtol, f"{path}[{i}]", float64)
            if d:
                return d
        return None
    if isinstance(want, dict):
        if not isinstance(got, dict) or set(got) != set(want):
            return f"returned {_describe(got)}, expected {_describe(want)}{_where(path)}"
        for k in want:
            d = difference(got[k], want[k], atol, rtol, f"{path}[{k!r}]", float64)
            if d:
                return d
        return None
    if isinstance(want, float) or (isinstance(want, int) and not isinstance(want, bool)):
        kind = "an int" if isinstance(want, int) else "a float"
        if isinstance(got, Tensor):
            return (f"returned a {got.dtype} tensor of shape {tuple(got.shape)}, expected {kind} ({want:.6g}): "
                    f"convert with {'int' if kind == 'an int' else 'float'}(...) or .item(){_where(path)}")
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            return f"returned {_describe(got)}, expected {kind} ({want:.4g}){_where(path)}"
        if isinstance(want, int) and isinstance(got, float):  # an index or a count: 2.0 cannot index a list
            return f"returned the float {got!r}, expected an int ({want}): convert with int(...){_where(path)}"
        if math.isnan(got) and not math.isnan(want):
            return f"NaN where the expected value is {want:.4g}{_where(path)}"
        if math.isclose(got, want, rel_tol=rtol, abs_tol=atol):
            return None
        shown = _apart(got, want, 6)
        return f"{shown[0]}, expected {shown[1]} (difference {abs(got - want):.3g}){_where(path)}"
    if got != want:
        return f"{got!r:.60}, expected {want!r:.60}{_where(path)}"
    return None


def _apart(got: float, want: float, digits: int) -> tuple[str, str]:
    """The two numbers with enough significant digits (from ``digits``) to tell them apart."""
    return next((f"{got:.{p}g}", f"{want:.{p}g}") for p in (digits, 6, 9, 12, 17)
                if p == 17 or f"{got:.{p}g}" != f"{want:.{p}g}")


def divmod_index(flat: int, shape: tuple[int, ...]) -> list[int]:
    """The multi-index of position ``flat`` in a row-major tensor of ``shape``."""
    idx = []
    for size in reversed(shape):
        flat, r = divmod(flat, size)
        idx.append(r)
    return list(reversed(idx))


def plain(x: Any, depth: int = 0) -> Any:
    """``x`` as plain data (tensors on the CPU, lists, tuples, dicts with string keys, numbers, strings, None), so
    an observation can cross to another process and be read back with ``torch.load(weights_only=True)``.

    A module becomes its ``state_dict``, an object its attributes; anything else becomes ``{OPAQUE: description}``.
    """
    if depth > 8:
        return {OPAQUE: "a structure nested more than 8 levels deep"}
    if isinstance(x, Tensor):
        if x.device.type != "cpu":
            return {OPAQUE: f"a tensor of shape {tuple(x.shape)} on device {x.device}", "device": str(x.device)}
        if x.is_sparse or x.layout != torch.strided:
            return {OPAQUE: f"a {x.layout} tensor"}
        return x.detach().clone()
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if isinstance(x, tuple):
        return tuple(plain(v, depth + 1) for v in x)
    if isinstance(x, list):
        return [plain(v, depth + 1) for v in x]
    if isinstance(x, dict):
        return {str(k): plain(v, depth + 1) for k, v in x.items()}
    if isinstance(x, nn.Module):
        return {"__module__": type(x).__name__, **{k: plain(v, depth + 1) for k, v in x.state_dict().items()}}
    if isinstance(x, np.ndarray):
        return {OPAQUE: f"a numpy array of shape {x.shape} (return a torch tensor)"}
    if isinstance(x, np.integer):  # an index or count from numpy: not a Python int (json and torch refuse it)
        return {OPAQUE: f"a numpy {type(x).__name__} ({x}): return a Python int, int(...)"}
    if isinstance(x, np.floating):
        return x.item()
    attrs = getattr(x, "__dict__", None)
    if (isinstance(attrs, dict) and not callable(x)) or type(x).__module__.startswith("workbench"):
        return {"__object__": type(x).__name__, **{str(k): plain(v, depth + 1) for k, v in (attrs or {}).items()}}
    return {OPAQUE: f"a {type(x).__name__}"}



def _size(args: tuple) -> int:
    """How big an input is (the number of tensor entries and list items), to show the smallest failing case."""
    total = 0
    for a in args:
        if isinstance(a, Tensor):
            total += a.numel()
        elif isinstance(a, (list, tuple)):
            total += _size(tuple(a)) + len(a)
        elif isinstance(a, dict):
            total += _size(tuple(a.values()))
        elif isinstance(a, nn.Module):
            total += sum(p.numel() for p in a.parameters())
        else:
            total += 1
    return total


def _show_value(x: Any, limit: int = 160) -> str:
    """A compact one-line rendering of an output, for the feedback."""
    if isinstance(x, Tensor):
        with np.printoptions(precision=3, suppress=True, threshold=24, edgeitems=2, linewidth=10_000):
            body = np.array2string(x.detach().double().numpy() if x.is_floating_point() else x.numpy(),
                                   separator=", ").replace("\n", " ")
        text = f"{body} {tuple(x.shape)}"
    elif isinstance(x, dict) and OPAQUE in x:
        text = str(x[OPAQUE])
    elif isinstance(x, (list, tuple)):
        text = "[" + ", ".join(_show_value(v, 60) for v in x) + "]"
    elif isinstance(x, dict):
        text = "{" + ", ".join(f"{k}: {_show_value(v, 60)}" for k, v in x.items()) + "}"
    else:
        text = repr(x)
    return " ".join(text.split())[:limit] + ("…" if len(text) > limit else "")
