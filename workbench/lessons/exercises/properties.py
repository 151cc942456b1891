"""Shared pieces of the exercises' checks: drawing random inputs (sizes, dtypes, ragged lengths) from a
:class:`random.Random`, and the invariants that name what a wrong output breaks."""

from __future__ import annotations

import random
from typing import Any

import torch
from torch import Tensor

from workbench.lessons.exercises.core import Invariant


def dtype(rng: random.Random) -> torch.dtype:
    """float32 or float64, at random."""
    return rng.choice([torch.float32, torch.float64])


def gen(rng: random.Random) -> torch.Generator:
    """A torch generator seeded from ``rng``."""
    return torch.Generator().manual_seed(rng.randrange(2**31))


def randn(rng: random.Random, *shape: int, dtype: torch.dtype = torch.float32, scale: float = 1.0) -> Tensor:
    """Standard normal entries times ``scale`` (drawn from ``rng``)."""
    return torch.randn(*shape, generator=gen(rng), dtype=torch.float64).mul(scale).to(dtype)


def lengths(rng: random.Random, B: int, T: int, minimum: int = 1) -> list[int]:
    """Ragged row lengths in [minimum, T], the longest row always full (as a batch padded to its longest)."""
    out = [rng.randint(minimum, T) for _ in range(B)]
    out[rng.randrange(B)] = T
    return out


def key_mask(lens: list[int], T: int) -> Tensor:
    """(B, T) bool, True at the first ``lens[b]`` positions of row b."""
    return torch.arange(T)[None, :] < torch.tensor(lens)[:, None]


# -- invariants of attention weights ---------------------------------------------------------------------------------
def _allowed(mask: Tensor | None, shape: torch.Size) -> Tensor:
    if mask is None:
        return torch.ones(shape, dtype=torch.bool)
    return mask.expand(shape) if mask.dim() == len(shape) else mask.reshape(
        (1,) * (len(shape) - mask.dim()) + tuple(mask.shape)).expand(shape)


def rows_sum_to_one(mask_arg: int | None, fully_masked_zero: bool = True) -> Invariant:
    """Each row of weights sums to 1 over the keys it may see (a row that may see nothing: 0)."""

    def test(args: tuple, out: Any) -> str | None:
        if not isinstance(out, Tensor) or not out.is_floating_point():
            return None
        mask = args[mask_arg] if mask_arg is not None else None
        allowed = _allowed(mask, out.shape)
        sums = out.double().sum(-1)
        want = allowed.any(-1).double() if fully_masked_zero else torch.ones_like(sums)
        bad = (sums - want).abs() > 1e-4
        bad = bad | sums.isnan()
        if bool(bad.any()):
            idx = tuple(int(i) for i in bad.nonzero()[0])
            return f"row {idx} sums to {sums[idx].item():.4g}, not {want[idx].item():.0f}"
        return None

    name = "each row of weights sums to 1" + (" (0 for a row that may see no key)" if fully_masked_zero else "")
    return Invariant(name, test)


def masked_weights_zero(mask_arg: int) -> Invariant:
    """A key the mask blocks gets weight exactly 0."""

    def test(args: tuple, out: Any) -> str | None:
        mask = args[mask_arg]
        if mask is None or not isinstance(out, Tensor) or not out.is_floating_point():
            return None
        blocked = ~_allowed(mask, out.shape)
        bad = blocked & (out != 0)
        if bool(bad.any()):
            idx = tuple(int(i) for i in bad.nonzero()[0])
            return f"the blocked key at {idx} got weight {out[idx].item():.4g}"
        return None

    return Invariant("a key the mask blocks gets weight exactly 0", test)


def no_nan() -> Invariant:
    """No NaN anywhere (a fully masked row gives zeros, never NaN)."""

    def test(args: tuple, out: Any) -> str | None:
        if isinstance(out, Tensor) and out.is_floating_point() and bool(out.isnan().any()):
            idx = tuple(int(i) for i in out.isnan().nonzero()[0])
            masks = [a for a in args if isinstance(a, Tensor) and a.dtype == torch.bool]
            row_open = True  # without a mask every row may attend
            if masks:
                try:
                    row_open = bool(_allowed(masks[-1], out.shape)[idx[:-1]].any())
                except RuntimeError:  # a mask of another shape (an output that is not the weights)
                    row_open = False
            if row_open:
                return f"NaN at {idx}, a row with keys to attend: did exp() overflow? Take off the row's maximum first"
            return f"NaN at {idx}"
        return None

    return Invariant("no NaN (a row that may see nothing gives zeros)", test)


def boolean() -> Invariant:
    """The output is a boolean tensor."""

    def test(args: tuple, out: Any) -> str | None:
        if isinstance(out, Tensor) and out.dtype != torch.bool:
            return f"dtype {out.dtype}"
        return None

    return Invariant("a mask is boolean (True = may attend)", test)
