"""Attention capture: the side door that listens to the model's hook points and records what they see.

The model carries identity :class:`~workbench.hook_points.HookPoint` modules (:mod:`workbench.model.hook_points`): every
attention block ``hook_q``, ``hook_k``, ``hook_v``, ``hook_scores``, ``hook_pattern`` (and ``hook_z``), every layer
``hook_resid``. The model never imports this module. :func:`capture_attention` finds the points by their site names
(:mod:`workbench.model.sites`: ``enc.0.self.pattern``, ``dec.1.cross.q``, ``enc.2.resid``), registers recording
forward hooks on them for the duration of a ``with`` block, and always removes them on exit, also when the body
raises.

Capture does not change the computation: the output still comes from the fused kernel, and while someone listens
the attention blocks compute the weights beside it (see :mod:`workbench.model.attention`), so outputs are bit-identical
with and without capture. Without hooks the points cost one check each and store nothing.

    with capture_attention(model) as cache:
        model(src, tgt_in)
    cache["enc.0.self.pattern"]  # (B, H, Tq, Tk) per-head weights of encoder layer 0, on the CPU
    cache["dec.cross", -1]       # the same by kind and layer: the last decoder layer's cross-attention
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from torch import Tensor, nn

from workbench.errors import InterventionError, SiteNameError
from workbench.inspect.site_cache import SiteCache
from workbench.model.hook_points import HookPoint, hook_points, n_hooks, tap
from workbench.model.sites import (
    ATTENTION_KINDS,
    FIELDS,
    RESID_KINDS,
    describe_sites,
    kind_name,
    model_sites,
    split_site,
)
from workbench.runtime import full_precision

__all__ = [
    "ATTENTION_KINDS", "FIELDS", "RESID_KINDS", "AttentionCache", "HookPoint", "capture_attention", "hook_points",
    "hooks_remaining", "sites", "tap",
]


def sites(model: nn.Module) -> Iterator[tuple[str, int, str, nn.Module]]:
    """Every hook point capture can listen to, as (kind, layer, site name, hook point), in the model's order."""
    for name, module in model_sites(model).items():
        if isinstance(module, HookPoint):
            kind, layer, _ = split_site(name)
            yield kind, layer, name, module


class AttentionCache(SiteCache):
    """What :func:`capture_attention` recorded: site name -> detached CPU tensor (a :class:`SiteCache`).

    ``cache["dec.1.cross.pattern"]`` or ``cache["dec.cross", 1]`` gives per-head attention weights (B, H, Tq, Tk);
    ``cache["dec.cross", 1, "q"]`` one of the fields ``("pattern", "scores", "q", "k", "v")``;
    ``cache["enc.resid", layer]`` the residual stream (B, T, D) after an encoder layer. Negative layers count from
    the last. When a block ran several times inside the context (step-by-step decoding), the plain key gives the
    last call and :meth:`calls` gives all of them. The old keys (``cache["cross", 1]``) work with a warning.
    """

    def _record(self, name: str, value: Tensor) -> None:
        super()._record(name, value.detach().to("cpu", copy=True))

    def _missing(self, name: str) -> str:
        return (f"{name!r} was not recorded: run the model inside the context, and ask for it (kinds=..., layers=..., "
                f"scores=True, qkv=True or resid=True); recorded: {describe_sites(self) or 'nothing'}")


def _resolve_layers(layers: Sequence[int] | int | None, n: int) -> set[int]:
    if layers is None:
        return set(range(n))
    if isinstance(layers, int):
        layers = [layers]
    out = set()
    for layer in layers:
        if not -n <= layer < n:
            raise ValueError(f"layer {layer} out of range: this stack has {n} layers (use 0..{n - 1} or negatives)")
        out.add(layer % n)
    return out


class _Reusable(contextlib.AbstractContextManager):
    """A context manager that can be entered again: every ``with`` runs a fresh generator (so a capture object kept
    in a variable records anew each time, into a new cache), where a plain ``@contextmanager`` object fails."""

    def __init__(self, make: Any) -> None:
        self._make = make
        self._open: list[Any] = []  # the generators entered and not yet left (nested use)

    def __enter__(self) -> Any:
        cm = contextlib.contextmanager(self._make)()
        value = cm.__enter__()
        self._open.append(cm)
        return value

    def __exit__(self, *exc: Any) -> bool | None:
        return self._open.pop().__exit__(*exc)


def capture_attention(
    model: nn.Module,
    kinds: str | Iterable[str] | None = None,
    layers: Sequence[int] | int | None = None,
    scores: bool = False,
    qkv: bool = False,
    resid: bool = False,
) -> contextlib.AbstractContextManager[AttentionCache]:
    """Record attention weights (and optionally scores, Q/K/V, residual stream) while the block runs.

    Args:
        model: a :class:`~workbench.model.Transformer` or :class:`~workbench.rnn.RNNSeq2Seq`.
        kinds: subset of ``("enc.self", "dec.self", "dec.cross")`` (and ``"enc.resid"``, ``"dec.resid"``), or one
            of them as a string; None records every attention the model has (the GRU baseline's one attention is
            ``"dec.cross"``).
        layers: layer indices to record (negatives count from the end); None records all.
        scores: also record the scaled pre-softmax scores ``QK^T / sqrt(d_k)`` (before masking).
        qkv: also record per-head queries, keys and values (B, H, T, d_head); values (B, H, T, d_v).
        resid: also record the residual stream after each layer (``"enc.resid"``, ``"dec.resid"``).

    Yields:
        An :class:`AttentionCache`, filled as the model runs; tensors are detached CPU copies.

    Raises:
        SiteNameError: an unknown kind, or one this model does not have (the message lists the valid ones).

    The returned object may be entered again (``with capture:`` twice): each time records into a new cache.
    """
    return _Reusable(lambda: _capture(model, kinds, layers, scores, qkv, resid))


def _capture(model: nn.Module, kinds: str | Iterable[str] | None, layers: Sequence[int] | int | None, scores: bool,
             qkv: bool, resid: bool) -> Iterator[AttentionCache]:
    if isinstance(kinds, str):  # one kind, not its letters
        kinds = [kinds]
    blocks = list(sites(model)) if isinstance(model, nn.Module) else []
    if not blocks:
        raise InterventionError(f"capture_attention needs a workbench model (a Transformer or the GRU baseline), got "
                                f"{type(model).__name__}: it has no attention to record")
    present: dict[str, int] = {}
    for kind, layer, _, _ in blocks:
        present[kind] = max(present.get(kind, 0), layer + 1)
    asked: set[str] = set()
    unknown = []
    for kind in kinds or ():
        try:
            asked.add(kind_name(kind, ATTENTION_KINDS + RESID_KINDS))
        except SiteNameError:
            unknown.append(kind)
    if unknown:
        raise SiteNameError(f"unknown attention kinds {unknown}: choose from {', '.join(ATTENTION_KINDS + RESID_KINDS)}")
    missing = sorted(k for k in asked if k not in present and k not in RESID_KINDS)
    if missing:
        raise SiteNameError(f"this model has no {missing} attention; it has "
                            f"{sorted(k for k in present if k in ATTENTION_KINDS)}")
    wanted = {k for k in present if k in ATTENTION_KINDS} if kinds is None else asked
    if resid:
        wanted |= {k for k in present if k in RESID_KINDS}
    cache = AttentionCache(present)
    fields = {"pattern"} | ({"scores"} if scores else set()) | ({"q", "k", "v"} if qkv else set())
    handles = []
    try:
        for kind, layer, name, point in blocks:
            if kind not in wanted or layer not in _resolve_layers(layers, present[kind]):
                continue
            if kind in ATTENTION_KINDS and split_site(name)[2] not in fields:
                continue

            def record(_m: nn.Module, _inp: Any, out: Tensor, name: str = name) -> None:
                cache._record(name, out)

            handles.append(point.register_forward_hook(record))
        with full_precision():  # what the inspector shows is fp32, whatever precision a surrounding run uses
            yield cache
    finally:
        for handle in handles:
            handle.remove()


def hooks_remaining(model: nn.Module) -> int:
    """Number of forward hooks and pre-hooks still registered on the model's hook points (0 outside any capture)."""
    return sum(n_hooks(point) for point in hook_points(model).values())
