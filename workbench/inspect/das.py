"""Distributed alignment search (DAS; Geiger et al., 2024) on the encoder memory and the decoder residual stream.

Activation patching swaps a whole site between two runs. DAS asks whether a *low-rank subspace* of a site carries a
variable (here: the gender, or the number, that a minimal pair swaps). It learns an orthogonal map ``W`` (k x D,
orthonormal rows: the first k coordinates of a rotation, :func:`torch.nn.utils.parametrizations.orthogonal`) and
intervenes by exchanging those k coordinates between a *base* run and a *source* run::

    h' = h_base + W^T W (h_source - h_base)        # (k = D: h' = h_source, plain activation patching)

Sites are the patching sites (:mod:`workbench.inspect.patching`) of width ``d_model``: ``enc.embed``,
``enc.{l}.resid`` (the memory after layer ``l``; every source position is intervened on, the pair's two sources
having as many tokens), ``dec.embed`` and ``dec.{l}.resid`` (only the row that predicts the contrasted word).

Data are the minimal pairs of :mod:`workbench.lessons.pronoun_pairs`, used both ways: base = corrupted, source =
clean (the intervention should make the model say the clean word, *his*), and base = clean, source = corrupted
(*her*). The objective is the two-way cross-entropy of the expected word against the other; the
**interchange-intervention accuracy** (IIA) is the share of held-out examples where the intervened run prefers
the expected word. Every example's base run prefers the *other* word (that is how pairs are chosen), so an
intervention that does nothing scores 0; a **random rotation** of the same rank, untrained, is the baseline a
learnt subspace must beat. The rotation is kept in float64 so that, at full rank, the intervention is patching
to within rounding.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.parametrizations import orthogonal

from workbench.errors import PatchingError
from workbench.inspect.patching import activation_sites

__all__ = [
    "DASExamples", "RotatedSubspace", "das_examples", "das_intervention", "das_sweep", "interchange_accuracy",
    "train_das",
]

_SITE = re.compile(r"(enc|dec)\.(embed|\d+\.resid)")


class RotatedSubspace(nn.Module):
    """k orthonormal directions in a D-dimensional site (the first k rows of a rotation), float64.

    Shapes:
        weight (k, D) with W W^T = I_k
    """

    def __init__(self, d_model: int, rank: int, seed: int = 0) -> None:
        super().__init__()
        if isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank <= d_model:
            raise PatchingError(f"rank {rank!r} out of range: a subspace of a {d_model}-dimensional site has rank "
                                f"1..{d_model}")
        self.d_model, self.rank = d_model, rank
        gen = torch.Generator().manual_seed(seed)
        linear = nn.Linear(d_model, rank, bias=False, dtype=torch.float64)
        with torch.no_grad():
            linear.weight.copy_(torch.randn(rank, d_model, generator=gen, dtype=torch.float64))
        self.proj = orthogonal(linear)  # a random orthonormal start, drawn from the seed

    @property
    def weight(self) -> Tensor:
        return self.proj.weight

    def interchange(self, base: Tensor, source: Tensor) -> Tensor:
        """``base + W^T W (source - base)``: base with its k rotated coordinates taken from source.

        Shapes: base, source (..., D) -> (..., D), in base's dtype
        """
        w = self.weight  # (k, D)
        delta = (source.double() - base.double()) @ w.T  # (..., k)
        return (base.double() + delta @ w).to(base.dtype)


def _check_site(model: nn.Module, site: str) -> nn.Module:
    known = activation_sites(model)
    if site not in known or not _SITE.fullmatch(site):
        options = [s for s in known if _SITE.fullmatch(s)]
        raise PatchingError(f"unknown site {site!r} for DAS: it needs a d_model-wide site, one of {', '.join(options)}")
    return known[site]


@dataclass
class DASExamples:
    """Interchange examples, padded: base inputs, source inputs, the row read, the expected and the other token.

    Shapes:
        base_src, source_src (N, S); base_tgt, source_tgt (N, T); pos, expected, other (N,)
    """

    base_src: Tensor
    base_tgt: Tensor
    source_src: Tensor
    source_tgt: Tensor
    pos: Tensor
    expected: Tensor
    other: Tensor

    def __len__(self) -> int:
        return int(self.pos.shape[0])

    def take(self, index: Tensor) -> DASExamples:
        return DASExamples(*(getattr(self, f)[index] for f in self.__dataclass_fields__))


def das_examples(pairs: Sequence[Any], pad_id: int = 0, both_ways: bool = True) -> DASExamples:
    """Interchange examples from :class:`~workbench.lessons.pronoun_pairs.PronounPair` objects (or alike).

    Raises:
        PatchingError: no pairs, or a pair whose two sources or target prefixes have unequal lengths.
    """
    from workbench.translation.batching import pad_to_tensor

    if not pairs:
        raise PatchingError("das_examples needs at least one minimal pair")
    rows: list[tuple] = []
    for p in pairs:
        if len(p.clean_src) != len(p.corrupt_src) or len(p.tgt) != len(p.corrupt_tgt):
            raise PatchingError(f"pair {p.clean_text!r} has sources of {len(p.clean_src)} and {len(p.corrupt_src)} "
                                "tokens (or prefixes of unequal length): interchanges need pairs of equal length")
        rows.append((p.corrupt_src, p.corrupt_tgt, p.clean_src, p.tgt, p.pos, p.good, p.bad))
        if both_ways:
            rows.append((p.clean_src, p.tgt, p.corrupt_src, p.corrupt_tgt, p.pos, p.bad, p.good))
    S = max(len(r[0]) for r in rows)
    T = max(len(r[1]) for r in rows)
    return DASExamples(
        base_src=pad_to_tensor([r[0] for r in rows], pad_id, S), base_tgt=pad_to_tensor([r[1] for r in rows], pad_id, T),
        source_src=pad_to_tensor([r[2] for r in rows], pad_id, S),
        source_tgt=pad_to_tensor([r[3] for r in rows], pad_id, T),
        pos=torch.tensor([r[4] for r in rows]), expected=torch.tensor([r[5] for r in rows]),
        other=torch.tensor([r[6] for r in rows]))


@torch.no_grad()
def _source_states(model: nn.Module, module: nn.Module, ex: DASExamples, batch_size: int = 256) -> Tensor:
    """The site's activation in every source run. Shapes: -> (N, P, D)."""
    out = []
    store: dict[str, Tensor] = {}
    handle = module.register_forward_hook(lambda _m, _i, o: store.__setitem__("x", o.detach()))
    try:
        for i in range(0, len(ex), batch_size):
            model(ex.source_src[i:i + batch_size], ex.source_tgt[i:i + batch_size])
            out.append(store["x"])
    finally:
        handle.remove()
    return torch.cat(out)


@contextlib.contextmanager
def das_intervention(model: nn.Module, site: str, subspace: RotatedSubspace, source: Tensor,
                     rows: Tensor | None = None) -> Iterator[None]:
    """Run the block with ``site`` interchanged along ``subspace`` from ``source``; the hook goes on exit.

    Args:
        source: the source runs' activations at the site, (N, P, D), one per row of the base batch run inside.
        rows: for target-side sites, the position (N,) to intervene on in each row; None: every position.
    """
    module = _check_site(model, site)
    if subspace.d_model != source.shape[-1]:
        raise PatchingError(f"a subspace of a {subspace.d_model}-dimensional site for a site of width "
                            f"{source.shape[-1]}: make it with d_model={source.shape[-1]}")

    def replace(_m: nn.Module, _inp: Any, out: Tensor) -> Tensor:
        if out.shape != source.shape:
            raise PatchingError(f"site {site!r}: the base run has shape {tuple(out.shape)}, the source "
                                f"{tuple(source.shape)}: base and source batches must be the same pairs, padded alike")
        new = subspace.interchange(out, source)
        if rows is None:
            return new
        mask = torch.zeros(out.shape[:2], dtype=torch.bool, device=out.device)  # (N, P)
        mask[torch.arange(out.shape[0]), rows] = True
        return torch.where(mask[..., None], new, out)

    handle = module.register_forward_hook(replace)
    try:
        yield
    finally:
        handle.remove()


def _rows_for(site: str, ex: DASExamples) -> Tensor | None:
    return ex.pos if site.startswith("dec.") else None


def _margin(model: nn.Module, site: str, subspace: RotatedSubspace, ex: DASExamples, source: Tensor) -> Tensor:
    """logit(expected) - logit(other) of every intervened base run. Shapes: -> (N,)."""
    with das_intervention(model, site, subspace, source, _rows_for(site, ex)):
        logits = model(ex.base_src, ex.base_tgt)  # (N, T, V)
    picked = logits[torch.arange(len(ex)), ex.pos]  # (N, V)
    return picked.gather(1, ex.expected[:, None])[:, 0] - picked.gather(1, ex.other[:, None])[:, 0]


@torch.no_grad()
def interchange_accuracy(model: nn.Module, site: str, subspace: RotatedSubspace, ex: DASExamples,
                         batch_size: int = 256) -> np.ndarray:
    """Whether each intervened example prefers the expected word (bool per example): the IIA is the mean."""
    module = _check_site(model, site)
    was_training = model.training
    model.eval()
    try:
        out = []
        for i in range(0, len(ex), batch_size):
            part = ex.take(torch.arange(i, min(i + batch_size, len(ex))))
            out.append((_margin(model, site, subspace, part, _source_states(model, module, part)) > 0).cpu())
    finally:
        model.train(was_training)
    return torch.cat(out).numpy()


def train_das(model: nn.Module, site: str, rank: int, ex: DASExamples, epochs: int = 5, batch_size: int = 32,
              lr: float = 1e-2, seed: int = 0) -> tuple[RotatedSubspace, list[float]]:
    """Learn a rank-``rank`` subspace of ``site`` whose interchange makes the model say the expected word.

    Returns:
        (subspace, loss per step). The model's weights are frozen (given back as they were).

    Raises:
        PatchingError: an unknown site or a rank out of range.
    """
    module = _check_site(model, site)
    d_model = model.cfg.d_model
    subspace = RotatedSubspace(d_model, rank, seed=seed).to(next(model.parameters()).device)
    was_training = model.training
    model.eval()
    source = _source_states(model, module, ex)
    opt = torch.optim.Adam(subspace.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    flags = [p.requires_grad for p in model.parameters()]
    for p in model.parameters():
        p.requires_grad_(False)
    losses = []
    try:
        for _ in range(epochs):
            order = torch.randperm(len(ex), generator=gen)
            for i in range(0, len(ex), batch_size):
                idx = order[i:i + batch_size]
                margin = _margin(model, site, subspace, ex.take(idx), source[idx])
                loss = F.softplus(-margin).mean()  # two-way cross-entropy of the expected word
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                losses.append(loss.item())
    finally:
        for p, flag in zip(model.parameters(), flags, strict=True):
            p.requires_grad_(flag)
        model.train(was_training)
    return subspace, losses


def das_sweep(model: nn.Module, train: DASExamples, test: DASExamples, sites: Sequence[str], ranks: Sequence[int],
              epochs: int = 5, lr: float = 1e-2, seed: int = 0, n_bootstrap: int = 1000) -> Any:
    """IIA on held-out examples per site and rank, learnt and random, with bootstrap intervals over examples.

    Returns:
        A pandas DataFrame: ``site, rank, iia, iia_lo, iia_hi, random, random_lo, random_hi, seconds``.
    """
    import pandas as pd

    from workbench.lessons.pronoun_pairs import bootstrap_ci

    rows = []
    for site in sites:
        _check_site(model, site)
        for rank in ranks:
            start = time.perf_counter()
            learnt, _ = train_das(model, site, rank, train, epochs=epochs, lr=lr, seed=seed)
            seconds = time.perf_counter() - start
            hits = interchange_accuracy(model, site, learnt, test).astype(float)
            rand = interchange_accuracy(model, site, RotatedSubspace(model.cfg.d_model, rank, seed=seed + 1000),
                                        test).astype(float)
            m, lo, hi = bootstrap_ci(hits, n_resamples=n_bootstrap, seed=seed)
            rm, rlo, rhi = bootstrap_ci(rand, n_resamples=n_bootstrap, seed=seed)
            rows.append({"site": site, "rank": rank, "iia": m, "iia_lo": lo, "iia_hi": hi, "random": rm,
                         "random_lo": rlo, "random_hi": rhi, "seconds": seconds})
    return pd.DataFrame(rows)
