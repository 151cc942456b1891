"""Exercise of notebook 14 (activation patching): the hook that patches one position of a module's output with the
activation cached from another run, checked by registering it on a layer and comparing the patched output (and its
gradients) with the package's rule (:func:`workbench.inspect.patching.patch` replaces a site's positions the same
way)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from workbench.lessons.exercises import properties as P
from workbench.lessons.exercises.core import Case, Exercise, Mistake, register

PACKAGE = ("workbench.inspect.patching.patch", "workbench.inspect.patching.patch_plans")


def patch_hook(cached: Tensor, position: int) -> Callable[[nn.Module, tuple, Tensor], Tensor]:
    """A forward hook that returns the module's output (B, T, D) with position ``position`` replaced by
    ``cached[:, position]`` (the same site's activation in another run); every other position is left as it is.

    Shapes:
        cached (B, T, D); the hook: output (B, T, D) -> (B, T, D)
    """

    def hook(module: nn.Module, inputs: tuple, output: Tensor) -> Tensor:
        keep = torch.arange(output.shape[1], device=output.device) != position  # (T,)
        return torch.where(keep[None, :, None], output, cached.to(output.dtype))  # (B, T, D)

    return hook


def patched_run(fn, x: Tensor, layer: nn.Module, cached: Tensor, position: int) -> Tensor:
    """``layer(x)`` with the hook ``fn(cached, position)`` registered while it runs (removed after)."""
    handle = layer.register_forward_hook(fn(cached, position))
    try:
        return layer(x)
    finally:
        handle.remove()


def _case(name: str, B: int, T: int, D_in: int, D: int, position: int, seed: int, dtype=torch.float32,
          tanh: bool = False) -> Case:
    """A linear layer (or linear then tanh, whose backward reads the output it returned: a hook that writes into
    that output breaks the gradient) on random inputs, and a random cached activation."""
    g = torch.Generator().manual_seed(seed)
    linear = nn.Linear(D_in, D).to(dtype)
    with torch.no_grad():
        for p in linear.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64).to(dtype))
    layer = nn.Sequential(linear, nn.Tanh()) if tanh else linear
    x = torch.randn(B, T, D_in, generator=g, dtype=torch.float64).to(dtype)
    cached = torch.randn(B, T, D, generator=g, dtype=torch.float64).to(dtype)
    return Case(name, (x, layer, cached, position))


def _cases() -> list[Case]:
    return [_case("batch 2, 5 positions, patch position 2", 2, 5, 4, 6, 2, 13),
            _case("float64, patch the first position", 3, 4, 3, 5, 0, 14, dtype=torch.float64),
            _case("patch the last position", 2, 6, 4, 4, 5, 15),
            _case("batch 1, length 1", 1, 1, 2, 3, 0, 16, dtype=torch.float64),
            _case("a tanh layer, whose backward needs its own output", 2, 5, 4, 6, 1, 17, tanh=True)]


def _draw(rng) -> Case:
    B, T, D_in, D, dt = rng.randint(1, 4), rng.randint(1, 8), rng.randint(1, 6), rng.randint(1, 6), P.dtype(rng)
    pos, tanh = rng.randrange(T), rng.random() < 0.5
    return _case(f"B={B}, T={T}, D={D}, position {pos}, {dt}{', tanh' if tanh else ''}", B, T, D_in, D, pos,
                 rng.randrange(2**31), dtype=dt, tanh=tanh)


def _wrong(select: Callable[[Tensor, int], Tensor], add: bool = False) -> Callable[[Tensor, int], Any]:
    def make(cached: Tensor, position: int):
        def hook(module, inputs, output):
            chosen = select(torch.arange(output.shape[1]), position)  # (T,) bool: the positions replaced
            if add:
                return output + cached * chosen[None, :, None].to(output.dtype)
            return torch.where(chosen[None, :, None], cached.to(output.dtype), output)

        return hook

    return make


register(Exercise(
    "14.patch_hook", "a forward hook that replaces one position's output with the cached activation", patch_hook,
    _cases, driver=patched_run, draw=_draw, package=PACKAGE, differentiable=True,
    mistakes=(
        Mistake("every position patched", "replace only position `position` (output[:, position]); the other "
                "positions keep this run's activations", _wrong(lambda t, p: torch.ones_like(t, dtype=torch.bool))),
        Mistake("every position from `position` on patched", "patch one position: the later positions must be "
                "computed from this run (the patch reaches them only through the model)",
                _wrong(lambda t, p: t >= p)),
        Mistake("cached activation added", "patching replaces the activation: the output at that position becomes "
                "the cached one, it is not the sum of the two", _wrong(lambda t, p: t == p, add=True)),
        Mistake("the positions other than `position` patched", "`position` is the one to replace: keep the others",
                _wrong(lambda t, p: t != p)),
    )))
