"""Hook points: identity modules on the model's intermediates, for forward hooks to listen to.

As in TransformerLens's ``hook_points.py``: the model modules (:mod:`~workbench.model.attention`, :mod:`~workbench.model.transformer`,
:mod:`~workbench.model.rnn`) own :class:`HookPoint` children and pass intermediates through :func:`tap`; they import
nothing else about inspection. Whoever listens (:mod:`~workbench.inspect.capture`, :mod:`~workbench.inspect.intervene`,
:mod:`~workbench.inspect.heads`) registers forward hooks from outside and finds the points by their names in
``model.named_modules()``, e.g. ``encoder_layers.0.self_attn.hook_pattern`` (:func:`hook_points`). Every point also
has a site name, the one name capture, caches, patching and interventions use for it (``enc.0.self.pattern``):
:mod:`workbench.model.sites` holds the scheme and its table.

A point nobody listens to is not even called: :func:`tap` returns its input as it is. A point with hooks returns
what its hooks return, which is its input when they only record (they return None).
"""

from __future__ import annotations

from torch import Tensor, nn


def n_hooks(module: nn.Module) -> int:
    """Forward hooks and forward pre-hooks registered on ``module`` itself (the one reader of torch's hook dicts)."""
    return len(module._forward_hooks) + len(module._forward_pre_hooks)


class HookPoint(nn.Identity):
    """An identity module whose only purpose is to carry forward hooks (TransformerLens style)."""

    def active(self) -> bool:
        """Does anything listen here (a forward hook or a forward pre-hook)?"""
        return n_hooks(self) > 0

    def n_hooks(self) -> int:
        """How many forward hooks and pre-hooks are registered on this point."""
        return n_hooks(self)


def tap(hook: HookPoint, x: Tensor) -> Tensor:
    """Pass ``x`` through ``hook`` only when something listens (keeps the inactive path free)."""
    return hook(x) if hook.active() else x


def hook_points(model: nn.Module) -> dict[str, HookPoint]:
    """Every hook point of ``model`` under its name in ``model.named_modules()``."""
    return {name: module for name, module in model.named_modules() if isinstance(module, HookPoint)}
