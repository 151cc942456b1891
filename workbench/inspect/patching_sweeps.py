"""Patching sweeps: layer x position, layer x head, and path patching from encoder heads to cross-attention heads.

Every sweep compares two runs of one sentence pair with the same decoder input (bos + a target prefix):

* the *clean* run, on the source that gives the answer we follow (``"his"``), and
* the *corrupted* run, on a minimal-pair source of equal token length (``seinem`` -> ``ihrem``, answer ``"her"``),
  or on the clean source with Gaussian noise added to chosen source embeddings (causal tracing, Meng et al. 2022:
  :class:`GaussianNoise`).

The metric is the logit difference between the two answers at one target position (:class:`LogitDiff`),
normalised so that 0 is the corrupted run and 1 the clean one::

    score = (LD(patched) - LD(corrupted)) / (LD(clean) - LD(corrupted))

``direction="clean->corrupted"`` runs the corrupted input and writes clean activations into one site at a time
(does this site *suffice* to bring the answer back? near 1 = yes); ``"corrupted->clean"`` runs the clean input and
writes corrupted activations (is this site *necessary*? near 0 = yes). Sites are batched: every patched variant
is one row of a batch, so a whole layer x position grid costs a few forward passes.

Results are :class:`PatchingResult` objects: the values with their axis names and tick labels.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from workbench.errors import PatchingError
from workbench.inspect.patching import (
    ActivationCache,
    _pos_axis,
    activation_sites,
    cache_activations,
    patch_plans,
)
from workbench.model.sites import ATTENTION_KINDS, expand_site, kind_name

__all__ = [
    "DIRECTIONS", "HEAD_FAMILIES", "POSITION_FAMILIES", "GaussianNoise", "LogitDiff", "PatchingResult",
    "PreparedPair", "path_patching", "position_family", "prepare_pair", "sweep_heads", "sweep_position_groups",
    "sweep_positions",
]

DIRECTIONS = ("clean->corrupted", "corrupted->clean")
POSITION_FAMILIES = ("enc.resid", "dec.memory", "dec.resid")  # kinds of workbench.model.sites
HEAD_FAMILIES = ATTENTION_KINDS  # ("enc.self", "dec.self", "dec.cross"): the heads' outputs, sites *.z


@dataclass(frozen=True)
class LogitDiff:
    """``logits[pos, good] - logits[pos, bad]``: how much the model prefers the clean answer at one target position.

    Args:
        pos: row of the logits (the decoder input position whose next token is the answer).
        good: token id of the clean run's answer (e.g. "his"); bad: the corrupted run's answer (e.g. "her").
    """

    pos: int
    good: int
    bad: int

    def __post_init__(self) -> None:
        if self.good == self.bad:
            raise PatchingError(f"LogitDiff needs two different tokens, got good = bad = {self.good}: pass the clean "
                                "and the corrupted run's answers")

    def __call__(self, logits: Tensor) -> Tensor:
        """Shapes: logits (N, T, V) -> (N,)."""
        if not -logits.shape[1] <= self.pos < logits.shape[1]:
            raise PatchingError(f"LogitDiff position {self.pos} is outside the {logits.shape[1]} target positions")
        row = logits[:, self.pos].float()  # (N, V)
        return row[:, self.good] - row[:, self.bad]


@dataclass(frozen=True)
class GaussianNoise:
    """Causal tracing's corruption: Gaussian noise added to the source embeddings at ``positions``.

    The noise's standard deviation is ``scale`` times the standard deviation of the model's scaled source token
    embeddings (Meng et al. use 3 times the embeddings' spread); ``seed`` fixes it, so every patched row sees the
    same corrupted input.
    """

    positions: tuple[int, ...]
    scale: float = 3.0
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.positions, int):
            object.__setattr__(self, "positions", (self.positions,))
        if not self.positions:
            raise PatchingError("GaussianNoise needs at least one source position to corrupt")
        if not self.scale > 0:
            raise PatchingError(f"GaussianNoise scale={self.scale!r} must be positive (Meng et al. use 3.0)")

    def noise(self, model: nn.Module, n_src: int) -> Tensor:
        """The noise added to the embedded source. Shapes: -> (1, S, d_model)."""
        for p in self.positions:
            if not -n_src <= p < n_src:
                raise PatchingError(f"GaussianNoise position {p} is outside the {n_src} source tokens")
        weight = model.src_embed.tokens.weight.detach()
        std = float(weight[weight.abs().sum(-1) > 0].std()) * model.src_embed.scale
        gen = torch.Generator().manual_seed(self.seed)
        noise = torch.zeros(1, n_src, weight.shape[1])
        noise[0, [p % n_src for p in self.positions]] = torch.randn(len(self.positions), weight.shape[1],
                                                                    generator=gen) * self.scale * std
        return noise.to(device=weight.device, dtype=weight.dtype)

    @contextlib.contextmanager
    def applied(self, model: nn.Module, n_src: int) -> Iterator[None]:
        """Add the noise to every source embedding computed inside the block (hook removed on exit)."""
        noise = self.noise(model, n_src)

        def add(_m: nn.Module, _inp: Any, out: Tensor) -> Tensor:
            if out.shape[1] != n_src:
                raise PatchingError(f"GaussianNoise was drawn for {n_src} source tokens, the run has {out.shape[1]}")
            return out + noise

        handle = model.src_embed.register_forward_hook(add)
        try:
            yield
        finally:
            handle.remove()


@dataclass(frozen=True)
class PatchingResult:
    """A sweep's scores with named axes.

    Shapes:
        values: one dimension per name in ``axes`` (e.g. (L + 1, S) for ``("layer", "src_pos")``), the normalised
        metric; raw: the same shape, the logit differences before normalising.
    """

    values: Tensor
    raw: Tensor
    axes: tuple[str, ...]
    labels: dict[str, tuple[str, ...]]
    family: str
    direction: str
    clean_metric: float
    corrupted_metric: float
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.values.dim() != len(self.axes) or self.values.shape != self.raw.shape:
            raise PatchingError(f"values {tuple(self.values.shape)} / raw {tuple(self.raw.shape)} do not match axes "
                                f"{self.axes}")
        for axis, n in zip(self.axes, self.values.shape, strict=True):
            if len(self.labels.get(axis, ())) != n:
                raise PatchingError(f"axis {axis!r} has {n} entries but {len(self.labels.get(axis, ()))} labels")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready form (lists of floats)."""
        return {"family": self.family, "direction": self.direction, "axes": list(self.axes),
                "labels": {k: list(v) for k, v in self.labels.items()}, "values": self.values.tolist(),
                "raw": self.raw.tolist(), "clean_metric": self.clean_metric,
                "corrupted_metric": self.corrupted_metric, **({"meta": self.meta} if self.meta else {})}


# -- the pair and its two runs ---------------------------------------------------------------------------------
@dataclass
class PreparedPair:
    """The two runs of a sweep, their caches and metrics."""

    model: nn.Module
    clean_src: Tensor  # (1, S)
    corrupt_src: Tensor  # (1, S): the minimal pair, or the clean source again under noise
    tgt: Tensor  # (1, T): the clean run's decoder input
    corrupt_tgt: Tensor  # (1, T): the corrupted run's (the same tensor when both runs share the prefix)
    noise: GaussianNoise | None
    metric: LogitDiff
    clean: ActivationCache
    corrupted: ActivationCache
    clean_metric: float
    corrupted_metric: float

    def context(self, corrupted: bool) -> contextlib.AbstractContextManager:
        if corrupted and self.noise is not None:
            return self.noise.applied(self.model, self.clean_src.shape[1])
        return contextlib.nullcontext()

    def normalise(self, value: Tensor) -> Tensor:
        return (value - self.corrupted_metric) / (self.clean_metric - self.corrupted_metric)


def _row(x: Tensor, name: str) -> Tensor:
    if x.dim() == 1:
        x = x[None]
    if x.dim() != 2 or x.shape[0] != 1:
        raise PatchingError(f"{name} must be one sentence's ids, shape (S,) or (1, S); got {tuple(x.shape)}")
    return x


def _prepare(model: nn.Module, clean_src: Tensor, corrupted: Tensor | GaussianNoise,
             tgt: Tensor | tuple[Tensor, Tensor], metric: LogitDiff) -> PreparedPair:
    device = next(model.parameters()).device
    clean_tgt, corrupt_tgt = tgt if isinstance(tgt, tuple | list) else (tgt, tgt)
    clean_src, tgt = _row(clean_src, "clean_src").to(device), _row(clean_tgt, "tgt").to(device)
    corrupt_tgt = _row(torch.as_tensor(corrupt_tgt), "corrupted tgt").to(device)
    if corrupt_tgt.shape != tgt.shape:
        raise PatchingError(f"the clean decoder input has {tgt.shape[1]} tokens and the corrupted one "
                            f"{corrupt_tgt.shape[1]}: target prefixes must have equal token length")
    if isinstance(corrupted, GaussianNoise):
        noise, corrupt_src = corrupted, clean_src
    else:
        noise, corrupt_src = None, _row(torch.as_tensor(corrupted), "corrupted").to(device)
        if corrupt_src.shape != clean_src.shape:
            raise PatchingError(f"the clean source has {clean_src.shape[1]} tokens and the corrupted one "
                                f"{corrupt_src.shape[1]}: patching position by position needs a minimal pair of "
                                "equal token length (or corrupt by GaussianNoise on the clean source)")
    clean = cache_activations(model, clean_src, tgt)
    pair = PreparedPair(model, clean_src, corrupt_src, tgt, corrupt_tgt, noise, metric, clean, clean, 0.0, 0.0)
    with pair.context(corrupted=True):
        pair.corrupted = cache_activations(model, corrupt_src, corrupt_tgt)
    pair.clean_metric = float(metric(pair.clean.logits)[0])
    pair.corrupted_metric = float(metric(pair.corrupted.logits)[0])
    if math.isclose(pair.clean_metric, pair.corrupted_metric, abs_tol=1e-6):
        raise PatchingError(f"the corruption does not change the metric (clean {pair.clean_metric:.4g}, corrupted "
                            f"{pair.corrupted_metric:.4g}): nothing to restore; choose a pair whose answers differ")
    return pair


@torch.no_grad()
def _run_rows(pair: PreparedPair, direction: str, n_rows: int, plans: dict[str, tuple[Tensor, Tensor | None]],
              batch_size: int) -> Tensor:
    """Run ``n_rows`` patched variants of the base run, ``batch_size`` at a time; return the metric per row.

    ``plans``: site -> (source (1 or n_rows, ...), mask (n_rows, ...) or None).

    Two shortcuts, both exact rewrites of ``model(src, tgt)`` (the same modules, so every hook still fires): when
    no site is in the encoder, the encoder runs once and its memory is shared by every row; and a
    :class:`LogitDiff` reads one target row, so only that row is projected onto the vocabulary.
    """
    if direction not in DIRECTIONS:
        raise PatchingError(f"unknown direction {direction!r}: choose from {DIRECTIONS}")
    base_corrupted = direction == "clean->corrupted"
    base_src = pair.corrupt_src if base_corrupted else pair.clean_src
    base_tgt = pair.corrupt_tgt if base_corrupted else pair.tgt
    model = pair.model
    halves = all(hasattr(model, f) for f in ("src_mask", "encode", "decode_hidden", "generator"))
    was_training = model.training
    model.eval()
    out = []
    try:
        shared = None  # (memory (1, S, D), src_mask (1, 1, 1, S)) when the encoder is not patched
        if halves and not any(name.startswith("enc.") for name in plans):
            src_mask = model.src_mask(base_src)
            with pair.context(corrupted=base_corrupted):
                shared = (model.encode(base_src, src_mask), src_mask)
        for start in range(0, n_rows, batch_size):
            stop = min(n_rows, start + batch_size)
            chunk = {name: (src if src.shape[0] == 1 else src[start:stop], None if mask is None else mask[start:stop])
                     for name, (src, mask) in plans.items()}
            n = stop - start
            with pair.context(corrupted=base_corrupted), patch_plans(model, chunk):
                if not halves:
                    out.append(pair.metric(model(base_src.expand(n, -1), base_tgt.expand(n, -1))))  # (n, T, V)
                    continue
                if shared is None:
                    src = base_src.expand(n, -1)
                    src_mask = model.src_mask(src)
                    memory = model.encode(src, src_mask)  # (n, S, D)
                else:
                    memory, src_mask = shared[0].expand(n, -1, -1), shared[1].expand(n, -1, -1, -1)
                hidden = model.decode_hidden(base_tgt.expand(n, -1), memory, src_mask)  # (n, T, D)
                out.append(_metric_of_hidden(model, pair.metric, hidden))
    finally:
        model.train(was_training)
    return torch.cat(out).cpu()


def _metric_of_hidden(model: nn.Module, metric: LogitDiff, hidden: Tensor) -> Tensor:
    """The metric of the decoder's final states, projecting only the row it reads. Shapes: (n, T, D) -> (n,)."""
    if not isinstance(metric, LogitDiff):
        return metric(model.generator(hidden))
    if not -hidden.shape[1] <= metric.pos < hidden.shape[1]:
        raise PatchingError(f"LogitDiff position {metric.pos} is outside the {hidden.shape[1]} target positions")
    row = model.generator(hidden[:, [metric.pos]])  # (n, 1, V)
    return LogitDiff(0, metric.good, metric.bad)(row)


def _donor(pair: PreparedPair, direction: str) -> ActivationCache:
    return pair.clean if direction == "clean->corrupted" else pair.corrupted


def _family_rows(model: nn.Module, family: str) -> list[tuple[str, list[str]]]:
    """(row label, sites patched together) of a layer x position family (a kind, :func:`position_family`)."""
    n_enc, n_dec = len(model.encoder_layers), len(model.decoder_layers)
    family = position_family(family)
    if family == "enc.resid":
        return [("embed", ["enc.embed"])] + [(f"enc {i}", [f"enc.{i}.resid"]) for i in range(n_enc)]
    if family == "dec.resid":
        return [("embed", ["dec.embed"])] + [(f"dec {i}", [f"dec.{i}.resid"]) for i in range(n_dec)]
    return [(f"dec {i}", expand_site(f"dec.{i}.memory")) for i in range(n_dec)]


def position_family(family: str) -> str:
    """A layer x position family's name: ``"enc.resid"``, ``"dec.memory"`` or ``"dec.resid"`` (the old ``"resid_enc"``,
    ``"memory"``, ``"resid_dec"`` warn); another name raises :class:`~workbench.errors.SiteNameError`."""
    return kind_name(family, POSITION_FAMILIES, what="layer x position family")


def sweep_positions(model: nn.Module, clean_src: Tensor, corrupted: Tensor | GaussianNoise,
                    tgt: Tensor | tuple[Tensor, Tensor],
                    metric: LogitDiff, family: str = "enc.resid", direction: str = "clean->corrupted",
                    src_tokens: Sequence[str] | None = None, tgt_tokens: Sequence[str] | None = None,
                    batch_size: int = 256, prepared: PreparedPair | None = None) -> PatchingResult:
    """Patch one (layer, position) at a time, every cell a row of one batched run.

    Families (kinds of :mod:`workbench.model.sites`): ``"enc.resid"`` (source embedding + encoder residual stream
    after each layer, per source position), ``"dec.memory"`` (the memory keys and values each decoder layer's
    cross-attention reads, per source position), and ``"dec.resid"`` (target embedding + decoder residual stream,
    per target position).

    Args:
        clean_src: (S,) or (1, S) ids; corrupted: the minimal pair's ids (same length) or a :class:`GaussianNoise`.
        tgt: (T,) or (1, T) decoder input (bos + target prefix) shared by both runs, or a tuple
            (clean_tgt, corrupted_tgt) of equal length when the two translations' prefixes differ (e.g. "man" and
            "woman" before the pronoun).
        metric: a :class:`LogitDiff`; src_tokens / tgt_tokens: tick labels (default: the positions).

    Returns:
        :class:`PatchingResult` with axes ``("layer", "src_pos")`` or ``("layer", "tgt_pos")``.
    """
    family = position_family(family)
    pair = prepared or _prepare(model, clean_src, corrupted, tgt, metric)
    rows = _family_rows(model, family)
    side = "tgt_pos" if family == "dec.resid" else "src_pos"
    n_pos = pair.tgt.shape[1] if side == "tgt_pos" else pair.clean_src.shape[1]
    donor = _donor(pair, direction)
    n = len(rows) * n_pos
    plans: dict[str, tuple[Tensor, Tensor | None]] = {}
    for r, (_, names) in enumerate(rows):
        for name in names:
            source = donor[name]
            axis = _pos_axis(name)
            shape = [n] + [1] * (source.dim() - 1)
            shape[axis] = n_pos
            mask = torch.zeros(n, n_pos, dtype=torch.bool)
            mask[r * n_pos + torch.arange(n_pos), torch.arange(n_pos)] = True
            plans[name] = (source, mask.view(shape).to(source.device))
    raw = _run_rows(pair, direction, n, plans, batch_size).view(len(rows), n_pos)
    tokens = tgt_tokens if side == "tgt_pos" else src_tokens
    pos_labels = tuple(str(t) for t in tokens) if tokens is not None else tuple(str(i) for i in range(n_pos))
    if len(pos_labels) != n_pos:
        raise PatchingError(f"{len(pos_labels)} token labels for {n_pos} positions: pass one label per token")
    return PatchingResult(pair.normalise(raw), raw, ("layer", side),
                          {"layer": tuple(label for label, _ in rows), side: pos_labels}, family, direction,
                          pair.clean_metric, pair.corrupted_metric)


def sweep_position_groups(model: nn.Module, clean_src: Tensor, corrupted: Tensor | GaussianNoise,
                          tgt: Tensor | tuple[Tensor, Tensor], metric: LogitDiff, groups: dict[str, Sequence[int]],
                          family: str = "enc.resid", direction: str = "clean->corrupted", batch_size: int = 256,
                          prepared: PreparedPair | None = None) -> PatchingResult:
    """Like :func:`sweep_positions`, but each column patches a named group of positions at once.

    Useful to average over pairs of different lengths: groups name roles (``{"edit": [2, 5], "random": [7]}``).

    Returns:
        :class:`PatchingResult` with axes ``("layer", "group")``.
    """
    family = position_family(family)
    pair = prepared or _prepare(model, clean_src, corrupted, tgt, metric)
    rows = _family_rows(model, family)
    n_pos = pair.tgt.shape[1] if family == "dec.resid" else pair.clean_src.shape[1]
    if not groups:
        raise PatchingError("no groups of positions given: pass {name: [positions]}")
    cols = list(groups)
    for name, positions in groups.items():
        if not positions or any(not -n_pos <= p < n_pos for p in positions):
            raise PatchingError(f"group {name!r} = {list(positions)} must be non-empty positions within 0..{n_pos - 1}")
    donor = _donor(pair, direction)
    n = len(rows) * len(cols)
    plans: dict[str, tuple[Tensor, Tensor | None]] = {}
    for r, (_, names) in enumerate(rows):
        for name in names:
            source = donor[name]
            shape = [n] + [1] * (source.dim() - 1)
            shape[_pos_axis(name)] = n_pos
            mask = torch.zeros(n, n_pos, dtype=torch.bool)
            for c, col in enumerate(cols):
                mask[r * len(cols) + c, [p % n_pos for p in groups[col]]] = True
            plans[name] = (source, mask.view(shape).to(source.device))
    raw = _run_rows(pair, direction, n, plans, batch_size).view(len(rows), len(cols))
    return PatchingResult(pair.normalise(raw), raw, ("layer", "group"),
                          {"layer": tuple(label for label, _ in rows), "group": tuple(cols)}, family, direction,
                          pair.clean_metric, pair.corrupted_metric)


def _head_site(family: str, layer: int) -> str:
    stack, attention = family.split(".")  # "dec.cross" -> dec.{layer}.cross.z
    return f"{stack}.{layer}.{attention}.z"


def sweep_heads(model: nn.Module, clean_src: Tensor, corrupted: Tensor | GaussianNoise, tgt: Tensor | tuple[Tensor, Tensor],
                metric: LogitDiff, family: str = "dec.cross", direction: str = "clean->corrupted",
                batch_size: int = 256, prepared: PreparedPair | None = None) -> PatchingResult:
    """Patch one head's output (all positions) at a time: ``"enc.self"``, ``"dec.self"`` or ``"dec.cross"`` heads.

    Returns:
        :class:`PatchingResult` with axes ``("layer", "head")``.
    """
    family = kind_name(family, HEAD_FAMILIES, what="layer x head family")
    pair = prepared or _prepare(model, clean_src, corrupted, tgt, metric)
    n_layers = len(model.encoder_layers if family == "enc.self" else model.decoder_layers)
    donor = _donor(pair, direction)
    n_heads = donor[_head_site(family, 0)].shape[1]
    n = n_layers * n_heads
    plans = {}
    for layer in range(n_layers):
        mask = torch.zeros(n, n_heads, dtype=torch.bool)
        mask[layer * n_heads + torch.arange(n_heads), torch.arange(n_heads)] = True
        source = donor[_head_site(family, layer)]
        plans[_head_site(family, layer)] = (source, mask.view(n, n_heads, 1, 1).to(source.device))
    raw = _run_rows(pair, direction, n, plans, batch_size).view(n_layers, n_heads)
    return PatchingResult(pair.normalise(raw), raw, ("layer", "head"),
                          {"layer": tuple(str(i) for i in range(n_layers)), "head": tuple(str(h) for h in range(n_heads))},
                          family, direction, pair.clean_metric, pair.corrupted_metric)


@torch.no_grad()
def path_patching(model: nn.Module, clean_src: Tensor, corrupted: Tensor | GaussianNoise, tgt: Tensor | tuple[Tensor, Tensor],
                  metric: LogitDiff, direction: str = "clean->corrupted", batch_size: int = 256,
                  prepared: PreparedPair | None = None,
                  receiver_layers: Sequence[int] | None = None) -> PatchingResult:
    """Path patching (Wang et al. 2022) from every encoder self-attention head to every cross-attention head.

    For a sender head ``(l, h)`` of the encoder and a receiver head ``(l', h')`` of a decoder layer's
    encoder-decoder attention: (1) run the base input with the sender's output taken from the donor run and every
    other encoder head frozen at its base value, so the sender reaches the memory only through the residual stream
    and the feed-forward layers; record the keys and values each cross-attention reads; (2) run the base input
    again with only the receiver head's keys and values replaced by those of step 1. The score says how much of
    the answer travels from the sender to the receiver through the memory.

    Args:
        receiver_layers: decoder layers whose cross-attention heads are receivers (default: all); fewer layers
            make step 2 proportionally cheaper.

    Returns:
        :class:`PatchingResult` with axes ``("sender_layer", "sender_head", "receiver_layer", "receiver_head")``.
    """
    if direction not in DIRECTIONS:
        raise PatchingError(f"unknown direction {direction!r}: choose from {DIRECTIONS}")
    pair = prepared or _prepare(model, clean_src, corrupted, tgt, metric)
    donor, base = _donor(pair, direction), (pair.corrupted if direction == "clean->corrupted" else pair.clean)
    n_enc, n_dec = len(model.encoder_layers), len(model.decoder_layers)
    layers = list(range(n_dec)) if receiver_layers is None else sorted({int(i) for i in receiver_layers})
    if not layers or any(not 0 <= i < n_dec for i in layers):
        raise PatchingError(f"receiver_layers={receiver_layers!r}: choose decoder layers among 0..{n_dec - 1}")
    n_heads = donor["enc.0.self.z"].shape[1]
    n_send = n_enc * n_heads
    base_corrupted = direction == "clean->corrupted"
    base_src = pair.corrupt_src if base_corrupted else pair.clean_src
    base_tgt = pair.corrupt_tgt if base_corrupted else pair.tgt
    # step 1: one row per sender; every encoder head frozen at the base run except the sender, taken from the donor
    plans = {}
    for layer in range(n_enc):
        sender = torch.zeros(n_send, n_heads, 1, 1, dtype=torch.bool, device=base_src.device)
        rows = torch.arange(layer * n_heads, (layer + 1) * n_heads)
        sender[rows, torch.arange(n_heads)] = True
        name = f"enc.{layer}.self.z"
        plans[name] = (torch.where(sender, donor[name], base[name]), None)  # (n_send, H, S, d_v)
    kv_sites = [f"dec.{i}.cross.{x}" for i in layers for x in ("k", "v")]
    with pair.context(corrupted=base_corrupted), patch_plans(model, plans):
        step1 = cache_activations(model, base_src.expand(n_send, -1), base_tgt.expand(n_send, -1), sites=kv_sites)
    # step 2: one row per (sender, receiver); only the receiver's keys and values come from step 1
    n_recv = len(layers) * n_heads
    n = n_send * n_recv
    plans2 = {}
    for j, layer in enumerate(layers):
        recv = torch.zeros(n_send, n_recv, n_heads, dtype=torch.bool)
        recv[:, j * n_heads + torch.arange(n_heads), torch.arange(n_heads)] = True
        mask = recv.view(n, n_heads, 1, 1).to(base_src.device)
        for x in ("k", "v"):
            name = f"dec.{layer}.cross.{x}"
            plans2[name] = (step1[name].repeat_interleave(n_recv, dim=0), mask)  # (n, H, S, d)
    raw = _run_rows(pair, direction, n, plans2, batch_size).view(n_enc, n_heads, len(layers), n_heads)
    heads = tuple(str(h) for h in range(n_heads))
    labels = {"sender_layer": tuple(str(i) for i in range(n_enc)), "sender_head": heads,
              "receiver_layer": tuple(str(i) for i in layers), "receiver_head": heads}
    return PatchingResult(pair.normalise(raw), raw, ("sender_layer", "sender_head", "receiver_layer", "receiver_head"),
                          labels, "path", direction, pair.clean_metric, pair.corrupted_metric)


def prepare_pair(model: nn.Module, clean_src: Tensor, corrupted: Tensor | GaussianNoise, tgt: Tensor | tuple[Tensor, Tensor],
                 metric: LogitDiff) -> PreparedPair:
    """Cache both runs once, for several sweeps of the same pair (pass it as ``prepared=``)."""
    activation_sites(model)
    return _prepare(model, clean_src, corrupted, tgt, metric)
