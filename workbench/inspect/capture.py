"""Attention capture: the side door that listens to the model's hook points and records what they see.

The model carries identity :class:`~workbench.hook_points.HookPoint` modules (:mod:`workbench.model.hook_points`): every
attention block ``hook_q``, ``hook_k``, ``hook_v``, ``hook_scores``, ``hook_pattern`` (and ``hook_z``), every layer
``hook_resid``. The model never imports this module. :func:`capture_attention` finds the points by their names in
``model.named_modules()`` (:data:`SITES`), registers recording forward hooks on them for the duration of a ``with``
block, and always removes them on exit, also when the body raises.

Capture does not change the computation: the output still comes from the fused kernel, and while someone listens
the attention blocks compute the weights beside it (see :mod:`workbench.model.attention`), so outputs are bit-identical
with and without capture. Without hooks the points cost one check each and store nothing.

    with capture_attention(model) as cache:
        model(src, tgt_in)
    cache["enc_self", 0]   # (B, H, Tq, Tk) per-head weights of encoder layer 0, on the CPU
    cache["cross", -1]     # last decoder layer's cross-attention
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from workbench.model.hook_points import HookPoint, hook_points, n_hooks, tap
from workbench.runtime import full_precision

__all__ = [
    "FIELDS", "KINDS", "RESID_KINDS", "SITES", "AttentionCache", "HookPoint", "capture_attention", "hook_points",
    "hooks_remaining", "sites", "tap",
]

KINDS = ("enc_self", "dec_self", "cross", "rnn_cross")
RESID_KINDS = ("resid_enc", "resid_dec")
FIELDS = ("pattern", "scores", "q", "k", "v")

# Where each kind is recorded: (kind, module name with the layer index as its group, hook point the module must own).
# A prefix before the name is allowed (``_orig_mod.`` of torch.compile, ``module.`` of DistributedDataParallel).
SITES = (
    ("enc_self", r"encoder_layers\.(\d+)\.self_attn", "hook_pattern"),
    ("dec_self", r"decoder_layers\.(\d+)\.self_attn", "hook_pattern"),
    ("cross", r"decoder_layers\.(\d+)\.cross_attn", "hook_pattern"),
    ("rnn_cross", r"attention()", "hook_pattern"),  # the recurrent baseline's one attention: layer 0
    ("resid_enc", r"encoder_layers\.(\d+)", "hook_resid"),
    ("resid_dec", r"decoder_layers\.(\d+)", "hook_resid"),
)


def sites(model: nn.Module) -> Iterator[tuple[str, int, nn.Module]]:
    """Every module that capture can listen to, as (kind, layer, module), named by ``model.named_modules()``."""
    for name, module in model.named_modules():
        for kind, pattern, point in SITES:
            match = re.fullmatch(rf"(?:.+\.)?{pattern}", name)
            if match and isinstance(getattr(module, point, None), HookPoint):
                yield kind, int(match.group(1) or 0), module
                break


class AttentionCache:
    """What :func:`capture_attention` recorded, under short keys.

    ``cache[kind, layer]`` gives per-head attention weights (B, H, Tq, Tk); ``cache[kind, layer, field]`` gives
    ``field`` in ``("pattern", "scores", "q", "k", "v")``; ``cache["resid_enc", layer]`` the residual stream
    (B, T, D) after an encoder layer. Negative layers count from the last. When a block ran several times inside
    the context (step-by-step decoding), the plain key gives the last call and :meth:`calls` gives all of them.
    """

    def __init__(self, n_layers: dict[str, int]) -> None:
        self._n_layers = dict(n_layers)
        self._store: dict[tuple[str, int, str], list[Tensor]] = {}

    # -- recording -------------------------------------------------------------------------------------------
    def _record(self, kind: str, layer: int, field: str, value: Tensor) -> None:
        self._store.setdefault((kind, layer, field), []).append(value.detach().to("cpu", copy=True))

    # -- reading ---------------------------------------------------------------------------------------------
    def _key(self, key: Any) -> tuple[str, int, str]:
        if not isinstance(key, tuple) or len(key) not in (2, 3):
            raise KeyError(f"use cache[kind, layer] or cache[kind, layer, field]; got {key!r}")
        kind, layer = key[0], key[1]
        field = key[2] if len(key) == 3 else ("resid" if kind in RESID_KINDS else "pattern")
        if kind not in self._n_layers:
            raise KeyError(f"nothing captured for kind {kind!r}; captured kinds: {sorted(self._n_layers)}")
        n = self._n_layers[kind]
        if not -n <= layer < n:
            raise KeyError(f"layer {layer} out of range for {kind!r}, which has {n} layers")
        layer = layer % n
        full = (kind, layer, field)
        if full not in self._store:
            raise KeyError(
                f"{full} was not recorded: run the model inside the context, and ask for it "
                "(layers=..., scores=True, qkv=True or resid=True)"
            )
        return full

    def __getitem__(self, key: Any) -> Tensor:
        return self._store[self._key(key)][-1]

    def calls(self, kind: str, layer: int, field: str = "pattern") -> list[Tensor]:
        """Every recorded call of one block, in order."""
        return list(self._store[self._key((kind, layer, field))])

    def __contains__(self, key: Any) -> bool:
        try:
            self._key(key)
        except KeyError:
            return False
        return True

    def keys(self) -> list[tuple[str, int, str]]:
        return sorted(self._store)

    def layers(self, kind: str) -> list[int]:
        return sorted({layer for (k, layer, _) in self._store if k == kind})

    def stack(self, kind: str, field: str = "pattern") -> Tensor:
        """All layers of one kind stacked: (L, B, H, Tq, Tk) for patterns."""
        return torch.stack([self[kind, layer, field] for layer in self.layers(kind)])

    def __len__(self) -> int:
        return len(self._store)

    def __repr__(self) -> str:
        return f"AttentionCache({len(self._store)} entries: {self.keys()[:6]}{'...' if len(self) > 6 else ''})"


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


@contextlib.contextmanager
def capture_attention(
    model: nn.Module,
    kinds: Iterable[str] | None = None,
    layers: Sequence[int] | int | None = None,
    scores: bool = False,
    qkv: bool = False,
    resid: bool = False,
) -> Iterator[AttentionCache]:
    """Record attention weights (and optionally scores, Q/K/V, residual stream) while the block runs.

    Args:
        model: a :class:`~workbench.model.Transformer` or :class:`~workbench.rnn.RNNSeq2Seq`.
        kinds: subset of ``("enc_self", "dec_self", "cross", "rnn_cross")``; None records every kind present.
        layers: layer indices to record (negatives count from the end); None records all.
        scores: also record the scaled pre-softmax scores ``QK^T / sqrt(d_k)`` (before masking).
        qkv: also record per-head queries, keys and values (B, H, T, d_head); values (B, H, T, d_v).
        resid: also record the residual stream after each layer (``"resid_enc"``, ``"resid_dec"``).

    Yields:
        An :class:`AttentionCache`, filled as the model runs; tensors are detached CPU copies.
    """
    blocks = list(sites(model))
    present: dict[str, int] = {}
    for kind, layer, _ in blocks:
        present[kind] = max(present.get(kind, 0), layer + 1)
    wanted = set(present) if kinds is None else set(kinds)
    unknown = wanted - set(KINDS) - set(RESID_KINDS)
    if unknown:
        raise ValueError(f"unknown attention kinds {sorted(unknown)}: choose from {KINDS}")
    missing = {k for k in wanted if k not in present and k not in RESID_KINDS}
    if missing and kinds is not None:
        raise ValueError(f"this model has no {sorted(missing)} attention; it has {sorted(k for k in present if k in KINDS)}")
    if resid:
        wanted |= {k for k in present if k in RESID_KINDS}
    else:
        wanted -= set(RESID_KINDS)
    cache = AttentionCache({k: n for k, n in present.items() if k in wanted})
    fields = ["pattern"] + (["scores"] if scores else []) + (["q", "k", "v"] if qkv else [])
    handles = []
    try:
        for kind, layer, module in blocks:
            if kind not in wanted or layer not in _resolve_layers(layers, present[kind]):
                continue
            names = ["resid"] if kind in RESID_KINDS else fields
            for field in names:
                hook = getattr(module, f"hook_{field}")

                def record(_m: nn.Module, _inp: Any, out: Tensor, kind=kind, layer=layer, field=field) -> None:
                    cache._record(kind, layer, field, out)

                handles.append(hook.register_forward_hook(record))
        with full_precision():  # what the inspector shows is fp32, whatever precision a surrounding run uses
            yield cache
    finally:
        for handle in handles:
            handle.remove()


def hooks_remaining(model: nn.Module) -> int:
    """Number of forward hooks and pre-hooks still registered on the model's hook points (0 outside any capture)."""
    return sum(n_hooks(point) for point in hook_points(model).values())
