"""Contrastive attribution at a patching site: why this token and not that one, position by position.

The function attributed is the **logit difference** between two candidate target tokens at one decoder position,
``f = logit(good) - logit(bad)`` (the metric of activation patching, :class:`~workbench.inspect.patching_sweeps.LogitDiff`),
in the *clean* run of a minimal pair. It is attributed to the activation at one patching site
(:func:`~workbench.inspect.patching.site_names`: ``enc.embed``, ``enc.{l}.resid``, ``dec.{l}.cross.v`` ...), and the
scores are summed per position (source positions for encoder and cross key/value sites, target positions
otherwise), so they sit beside the patching result for the same pair and site (:func:`patching_effects`):

* ``"gradient_x_input"``: ``grad f(x) . (x - x')``, the first-order estimate of what replacing the activation by the
  baseline ``x'`` changes (with the corrupted run as ``x'``, *attribution patching*);
* ``"integrated_gradients"``: the path integral of the gradient from ``x'`` to ``x`` (Sundararajan et al., 2017),
  by Captum's :class:`~captum.attr.IntegratedGradients` (Gauss-Legendre nodes). Its scores sum to
  ``f(x) - f(x')``; the relative **completeness error** ``|sum - (f(x) - f(x'))| / |f(x) - f(x')|`` is reported.

The baseline ``x'`` is the corrupted run's activation at the site (``baseline="corrupted"``: then ``f(x')`` is the
clean run with the whole site patched from the corrupted one) or zeros (``"zero"``). The model runs unchanged: a
forward hook on the site's module puts in the activation asked for, and is removed after each call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from workbench.errors import AttributionError, PatchingError
from workbench.inspect.patching import Site, _pos_axis, activation_sites, cache_activations, patch
from workbench.runtime import full_precision

__all__ = ["CONTRASTIVE_METHODS", "ContrastiveAttribution", "contrastive_attribution", "patching_effects"]

CONTRASTIVE_METHODS = ("gradient_x_input", "integrated_gradients")


@dataclass
class ContrastiveAttribution:
    """Per-position attribution of ``logit(good) - logit(bad)`` at one site.

    Shapes:
        scores (P,): one per position of the site (source or target positions)
    """

    site: str
    method: str
    scores: Tensor
    value: float  # f(x): the clean run's logit difference
    baseline_value: float  # f(x'): the clean run with the site at its baseline
    n_steps: int  # integration steps (1 for gradient x input)

    @property
    def completeness_error(self) -> float:
        """|sum of scores - (f(x) - f(x'))| / |f(x) - f(x')|: 0 for exact integrated gradients."""
        diff = self.value - self.baseline_value
        return abs(float(self.scores.sum()) - diff) / max(abs(diff), 1e-12)


def _row(x: Tensor, name: str) -> Tensor:
    if not isinstance(x, Tensor) or x.dtype != torch.long or x.dim() != 2 or x.shape[0] != 1:
        raise PatchingError(f"{name} must be a (1, T) tensor of token ids, got "
                            f"{tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__}")
    return x


def _check(model: nn.Module, clean_src: Tensor, corrupt_src: Tensor, tgt: Tensor | tuple[Tensor, Tensor],
           position: int, good: int, bad: int, site: str) -> tuple[Tensor, Tensor]:
    known = activation_sites(model)
    if site not in known:
        raise PatchingError(f"unknown site {site!r}: this model's sites are {', '.join(known)}")
    _row(clean_src, "clean_src"), _row(corrupt_src, "corrupt_src")
    if clean_src.shape != corrupt_src.shape:
        raise PatchingError(f"the pair has {clean_src.shape[1]} and {corrupt_src.shape[1]} source tokens: sources of "
                            "unequal length cannot be compared position by position (choose a pair with as many tokens)")
    clean_tgt, corrupt_tgt = tgt if isinstance(tgt, tuple) else (tgt, tgt)
    _row(clean_tgt, "tgt"), _row(corrupt_tgt, "corrupt tgt")
    if clean_tgt.shape != corrupt_tgt.shape:
        raise PatchingError(f"the clean and corrupted target prefixes have {clean_tgt.shape[1]} and "
                            f"{corrupt_tgt.shape[1]} tokens: give prefixes of equal length")
    if not 0 <= position < clean_tgt.shape[1]:
        raise AttributionError(f"position {position} is not a decoder position 0..{clean_tgt.shape[1] - 1}")
    for name, token in (("good", good), ("bad", bad)):
        if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < model.tgt_vocab_size:
            raise AttributionError(f"{name}={token!r} is not a target token id 0..{model.tgt_vocab_size - 1}")
    if good == bad:
        raise AttributionError(f"good and bad are the same token ({good}): contrast two different candidates")
    return clean_tgt, corrupt_tgt


@contextlib.contextmanager
def _site_replaced(module: nn.Module, x: Tensor) -> Iterator[None]:
    def swap(_m: nn.Module, _inp: Any, out: Tensor) -> Tensor:
        if out.shape[1:] != x.shape[1:]:
            raise PatchingError(f"the site's activation has shape {tuple(out.shape)}, the replacement {tuple(x.shape)}")
        return x

    handle = module.register_forward_hook(swap)
    try:
        yield
    finally:
        handle.remove()


def contrastive_attribution(model: nn.Module, clean_src: Tensor, corrupt_src: Tensor,
                            tgt: Tensor | tuple[Tensor, Tensor], position: int, good: int, bad: int,
                            site: str = "enc.embed", method: str = "integrated_gradients",
                            baseline: str = "corrupted", n_steps: int = 64,
                            internal_batch_size: int = 64) -> ContrastiveAttribution:
    """Attribute ``logit(good) - logit(bad)`` at ``position`` of the clean run to each position of ``site``.

    Args:
        model: a workbench Transformer (eval mode for the call; weights untouched).
        clean_src, corrupt_src: the minimal pair's sources, (1, S) each, of equal length.
        tgt: the clean decoder input (1, T), or (clean, corrupted) inputs of equal length (the corrupted one makes
            the corrupted baseline of decoder sites).
        position: decoder position whose next-token logits are compared.
        good, bad: the two candidate target token ids (e.g. his / her).
        site: a patching site name.
        method: ``"integrated_gradients"`` or ``"gradient_x_input"``.
        baseline: ``"corrupted"`` (the corrupted run's activation at the site) or ``"zero"``.
        n_steps: integrated gradients' steps; check :attr:`ContrastiveAttribution.completeness_error`.

    Raises:
        PatchingError: an unknown site or a pair of unequal lengths; AttributionError: a bad method, baseline,
            position or token.
    """
    from captum.attr import IntegratedGradients

    if method not in CONTRASTIVE_METHODS:
        raise AttributionError(f"unknown method {method!r}: choose from {CONTRASTIVE_METHODS}")
    if baseline not in ("corrupted", "zero"):
        raise AttributionError(f"unknown baseline {baseline!r}: use 'corrupted' or 'zero'")
    if n_steps < 1:
        raise AttributionError(f"n_steps={n_steps} must be at least 1, e.g. 64")
    clean_tgt, corrupt_tgt = _check(model, clean_src, corrupt_src, tgt, position, good, bad, site)
    module = activation_sites(model)[site]
    was_training = model.training
    model.eval()
    try:
        clean = cache_activations(model, clean_src, clean_tgt, sites=[site])[site]  # (1, ...)
        if baseline == "corrupted":
            base = cache_activations(model, corrupt_src, corrupt_tgt, sites=[site])[site]
        else:
            base = torch.zeros_like(clean)

        def f(x: Tensor) -> Tensor:
            n = x.shape[0]
            with _site_replaced(module, x):
                logits = model(clean_src.expand(n, -1), clean_tgt.expand(n, -1))[:, position]  # (n, V)
            return logits[:, good] - logits[:, bad]

        with torch.enable_grad(), full_precision():
            with torch.no_grad():
                value, base_value = float(f(clean)), float(f(base))
            if method == "integrated_gradients":
                attr = IntegratedGradients(f).attribute(clean, baselines=base, n_steps=n_steps,
                                                        method="gausslegendre", internal_batch_size=internal_batch_size)
            else:
                x = clean.clone().requires_grad_(True)
                (grad,) = torch.autograd.grad(f(x).sum(), x)
                attr = grad * (clean - base)
                n_steps = 1
    finally:
        model.train(was_training)
    axis = _pos_axis(site)
    scores = attr[0].detach().double().movedim(axis - 1, 0).reshape(attr.shape[axis], -1).sum(-1).cpu()  # (P,)
    return ContrastiveAttribution(site=site, method=method, scores=scores, value=value, baseline_value=base_value,
                                  n_steps=n_steps)


@torch.no_grad()
def patching_effects(model: nn.Module, clean_src: Tensor, corrupt_src: Tensor, tgt: Tensor | tuple[Tensor, Tensor],
                     position: int, good: int, bad: int, site: str = "enc.embed") -> Tensor:
    """What patching each position of ``site`` from the corrupted run does to the clean logit difference.

    ``effect[p] = f(clean) - f(clean with position p of the site from the corrupted run)``, the quantity that
    :func:`contrastive_attribution` with ``baseline="corrupted"`` estimates position by position.

    Shapes:
        -> (P,) float64
    """
    clean_tgt, corrupt_tgt = _check(model, clean_src, corrupt_src, tgt, position, good, bad, site)
    was_training = model.training
    model.eval()
    try:
        donor = cache_activations(model, corrupt_src, corrupt_tgt, sites=[site])
        logits = model(clean_src, clean_tgt)[0, position]
        value = float(logits[good] - logits[bad])
        n = donor[site].shape[_pos_axis(site)]
        out = torch.zeros(n, dtype=torch.float64)
        for p in range(n):
            with patch(model, donor, Site(site, pos=p)):
                patched = model(clean_src, clean_tgt)[0, position]
            out[p] = value - float(patched[good] - patched[bad])
    finally:
        model.train(was_training)
    return out
