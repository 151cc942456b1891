"""Activation patching for the encoder-decoder: cache a run's activations, replay them into another run.

Interventions (:mod:`workbench.inspect.intervene`) switch heads off and ask what breaks. Patching asks where the
information a translation needs is carried: run the model on one input (say the *corrupted* source, where
"seinem" became "ihrem"), and at one *site* substitute the activation the model had on another input (the
*clean* source). If the clean answer comes back, that site carried it.

Sites have the names of :mod:`workbench.model.sites`, the one scheme of capture, caches, interventions and
patching (:func:`site_names` lists the ones a model can patch; a hook point's module path such as
``encoder_layers.2.hook_resid`` is accepted for the same site):

=========================  ======================  ===========================================================
site                       shape                   what it is
=========================  ======================  ===========================================================
``enc.embed``              (B, S, d_model)         source embeddings (times sqrt(d_model)) plus positions
``enc.{l}.resid``          (B, S, d_model)         the encoder residual stream after layer ``l``
``enc.{l}.self.z``         (B, H, S, d_v)          every head's output in encoder layer ``l`` (before W^O)
``dec.embed``              (B, T, d_model)         target embeddings plus positions
``dec.{l}.self.z``         (B, H, T, d_v)          heads of decoder layer ``l``'s masked self-attention
``dec.{l}.cross.k``        (B, H, S, d_head)       the memory decoder layer ``l`` reads: its cross keys ...
``dec.{l}.cross.v``        (B, H, S, d_v)          ... and values, one row per source position
``dec.{l}.cross.z``        (B, H, T, d_v)          heads of decoder layer ``l``'s encoder-decoder attention
``dec.{l}.memory``         (group)                 the memory layer ``l`` reads: ``dec.{l}.cross.k`` and ``.v``
``dec.{l}.resid``          (B, T, d_model)         the decoder residual stream after layer ``l``
=========================  ======================  ===========================================================

A :class:`Site` narrows a site to positions (source positions for ``enc.*`` and the cross keys/values, target
positions otherwise) and heads::

    clean = cache_activations(model, clean_src, tgt_in)          # tgt_in: bos + a target prefix
    with patch(model, clean, ["enc.2.resid", Site("dec.1.cross.z", pos=4, head=3)]):
        logits = model(corrupted_src, tgt_in)

Patching also works step by step during greedy decoding with the key/value cache on (:func:`patched_greedy`): a
decoder site at target position t is replaced at the step that computes position t (the decoder's position
offset is read from its embedding call), and reaches later steps only through the cache, as in a full
recomputation. Target positions beyond the cached prefix are left as they are.

Like capture, patching is a side door: hooks are registered when the ``with`` block opens and removed when it
closes, also after an exception; the model's weights are never touched.

A cache knows its model: it records the architecture and a fingerprint of the weights (:func:`weights_fingerprint`),
and :func:`patch` refuses a cache from a model with other weights unless asked (``allow_other_model=True``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from workbench.errors import PatchingError
from workbench.inspect.site_cache import SiteCache
from workbench.model.sites import expand_site, model_sites, site_name

__all__ = [
    "ActivationCache", "Site", "activation_sites", "cache_activations", "patch", "patch_plans", "patched_greedy",
    "positions_differing", "site_names", "weights_fingerprint",
]


def _is_head_site(name: str) -> bool:
    return name.endswith((".z", ".k", ".v", ".memory"))


def _pos_axis(name: str) -> int:
    """Axis of positions: 2 in per-head tensors (B, H, T, d), 1 in the residual stream (B, T, D)."""
    return 2 if _is_head_site(name) else 1


def _side(name: str) -> str:
    """``"src"`` when the site's positions are source positions (encoder, cross keys/values), else ``"tgt"``."""
    return "src" if name.startswith("enc.") or name.endswith((".cross.k", ".cross.v")) else "tgt"


def activation_sites(model: nn.Module) -> dict[str, nn.Module]:
    """Every patchable site of a workbench :class:`~workbench.model.Transformer`: name -> the module it taps.

    Raises:
        PatchingError: the model has no encoder-decoder layers with hook points (e.g. the RNN baseline).
    """
    if not (hasattr(model, "encoder_layers") and hasattr(model, "decoder_layers") and hasattr(model, "src_embed")):
        raise PatchingError(f"{type(model).__name__} is not a workbench encoder-decoder Transformer: patching needs "
                            "encoder_layers, decoder_layers and src_embed/tgt_embed (build it with build_model, load "
                            "it with wb.pretrained or wb.load_model)")
    every = model_sites(model)
    names = ["enc.embed"]
    for layer in range(len(model.encoder_layers)):
        names += [f"enc.{layer}.self.z", f"enc.{layer}.resid"]
    names.append("dec.embed")
    for layer in range(len(model.decoder_layers)):
        names += [f"dec.{layer}.{x}" for x in ("self.z", "cross.k", "cross.v", "cross.z", "resid")]
    return {name: every[name] for name in names}  # in the order the forward pass meets them


def site_names(model: nn.Module) -> list[str]:
    """The names of every patchable site of ``model``, in the order the forward pass meets them."""
    return list(activation_sites(model))


def _signature(model: nn.Module) -> dict[str, Any]:
    """What two models must share for one's cache to patch the other: architecture and vocabularies."""
    cfg = getattr(model, "cfg", None)
    return {
        "type": type(model).__name__,
        "cfg": dataclasses.asdict(cfg) if dataclasses.is_dataclass(cfg) else repr(cfg),
        "src_vocab_size": getattr(model, "src_vocab_size", None),
        "tgt_vocab_size": getattr(model, "tgt_vocab_size", None),
    }


_FINGERPRINTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> (tensor versions, digest)


def weights_fingerprint(model: nn.Module) -> str:
    """SHA-256 (first 16 hex digits) of the model's parameters and buffers, names included: two models share it
    only when they hold the same weights.

    It is remembered per model until a tensor changes (in-place updates such as an optimizer step or
    ``load_state_dict`` bump the tensor's version counter), so asking again costs nothing.
    """
    tensors = model.state_dict(keep_vars=True)
    key = tuple((name, id(t), t._version, t.data_ptr()) for name, t in tensors.items())
    memo = _FINGERPRINTS.get(model)
    if memo is not None and memo[0] == key:
        return memo[1]
    digest = hashlib.sha256()
    for name, t in tensors.items():
        t = t.detach().cpu().contiguous()
        digest.update(f"{name}:{t.dtype}:{tuple(t.shape)}\0".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    fingerprint = digest.hexdigest()[:16]
    _FINGERPRINTS[model] = (key, fingerprint)
    return fingerprint


@dataclass(frozen=True)
class Site:
    """A site narrowed to some positions and heads.

    Args:
        name: a site name from :func:`site_names`, e.g. ``"enc.2.resid"`` or ``"dec.0.cross.z"``.
        pos: position(s) to patch (source positions for ``enc.*`` and ``dec.*.cross.k/v``, target positions
            otherwise); None patches every position. Negative positions count from the end of the cached run.
        head: head(s) to patch, for per-head sites (``.z``, ``.k``, ``.v``); None patches every head.
    """

    name: str
    pos: int | tuple[int, ...] | None = None
    head: int | tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", site_name(self.name))  # any accepted spelling -> the canonical name
        for field in ("pos", "head"):
            value = getattr(self, field)
            if isinstance(value, list):
                object.__setattr__(self, field, tuple(value))
                value = getattr(self, field)
            items = value if isinstance(value, tuple) else (value,) if value is not None else ()
            for item in items:
                if isinstance(item, bool) or not isinstance(item, int):
                    raise PatchingError(f"Site {self.name!r}: {field}={value!r} must be an int, a tuple of ints or None")
        if self.head is not None and not _is_head_site(self.name):
            raise PatchingError(f"Site {self.name!r} has no heads (head={self.head!r}): heads exist only at the "
                                "per-head sites ending in .z, .k or .v")


def _as_site(item: Any) -> Site:
    if isinstance(item, Site):
        return item
    if isinstance(item, str):
        return Site(item)
    if isinstance(item, tuple | list) and item and isinstance(item[0], str) and len(item) <= 3:
        return Site(*item)
    raise PatchingError(f"{item!r} is not a site: pass a name such as 'enc.0.resid', a Site(name, pos, head), or "
                        "a tuple (name, pos[, head])")


class ActivationCache(SiteCache):
    """Activations of one run, site name -> detached tensor on the model's device (see the module table).

    A :class:`~workbench.inspect.site_cache.SiteCache`, like capture's :class:`~workbench.inspect.capture.AttentionCache`:
    ``cache["enc.2.resid"]``, ``cache["enc.resid", 2]`` and ``cache["encoder_layers.2.hook_resid"]`` are one tensor.
    Also keeps the run's inputs (``src``, ``tgt``), its ``logits`` (B, T, V), the model's signature and the
    fingerprint of its weights (:func:`weights_fingerprint`), so that :func:`patch` refuses a cache from another
    architecture, and from a model with other weights unless asked.
    """

    def __init__(self, store: dict[str, Tensor], src: Tensor, tgt: Tensor, logits: Tensor,
                 signature: dict[str, Any], fingerprint: str | None = None) -> None:
        cfg = signature.get("cfg") if isinstance(signature.get("cfg"), dict) else {}
        n_enc, n_dec = cfg.get("n_enc_layers"), cfg.get("n_dec_layers")
        super().__init__({k: n for k, n in (("enc.resid", n_enc), ("enc.self", n_enc), ("dec.resid", n_dec),
                                            ("dec.self", n_dec), ("dec.cross", n_dec)) if isinstance(n, int)})
        for name, value in store.items():
            self._record(site_name(name), value)
        self.src, self.tgt, self.logits, self.signature = src, tgt, logits, signature
        self.fingerprint = fingerprint  # of the weights of the model that ran (None: not recorded, not checked)

    def __repr__(self) -> str:
        return (f"ActivationCache({len(self)} sites, src {tuple(self.src.shape)}, tgt {tuple(self.tgt.shape)}: "
                f"{', '.join(list(self)[:4])}, ...)")


def _offset_tracker(model: nn.Module, state: dict[str, int]) -> Any:
    """A pre-hook on the target embedding that records the position offset of each decoder call."""

    def before(_m: nn.Module, args: tuple, kwargs: dict) -> None:
        state["offset"] = int(kwargs.get("offset", args[1] if len(args) > 1 else 0))

    return model.tgt_embed.register_forward_pre_hook(before, with_kwargs=True)


@torch.no_grad()
def cache_activations(model: nn.Module, src: Tensor, tgt: Tensor, sites: Iterable[str] | None = None) -> ActivationCache:
    """Run the model with teacher forcing and keep every site's activation.

    Args:
        model: a workbench Transformer (put in eval mode for the run, then restored).
        src: source ids (B, S), eos included, right-padded with ``model.pad_id``.
        tgt: decoder input (B, T): bos followed by a target prefix.
        sites: names to keep (default: all of :func:`site_names`).

    Returns:
        An :class:`ActivationCache`; ``cache.logits`` (B, T, V) are the run's logits.
    """
    known = activation_sites(model)
    if isinstance(sites, str):  # one name, not its letters
        sites = [sites]
    wanted = list(known) if sites is None else [_check_name(part, known) for name in sites for part in _expand(name)]
    store: dict[str, Tensor] = {}
    handles = []
    was_training = model.training
    model.eval()
    try:
        for name in wanted:
            def record(_m: nn.Module, _inp: Any, out: Tensor, name: str = name) -> None:
                store[name] = out.detach().clone()

            handles.append(known[name].register_forward_hook(record))
        logits = model(src, tgt)  # (B, T, V)
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    return ActivationCache(store, src.detach().clone(), tgt.detach().clone(), logits.detach(), _signature(model),
                           fingerprint=weights_fingerprint(model))


def _check_name(name: Any, known: Mapping[str, Any]) -> str:
    """The canonical name of a patchable site (:func:`~workbench.model.sites.site_name`, restricted to ``known``)."""
    return site_name(name, valid=known)


def _expand(name: Any) -> list[Any]:
    """A group (``dec.{l}.memory``) as its member sites; anything else as it is."""
    return expand_site(name) if isinstance(name, str) and name.endswith(".memory") else [name]


def _index_mask(spec: int | tuple[int, ...] | None, n: int, what: str, site: str) -> Tensor:
    """A boolean (n,) mask from a position/head spec (None = all); negatives count from the end."""
    mask = torch.zeros(n, dtype=torch.bool)
    if spec is None:
        mask[:] = True
        return mask
    for i in spec if isinstance(spec, tuple) else (spec,):
        if not -n <= i < n:
            raise PatchingError(f"{what} {i} out of range at site {site!r}: the cached run has {n} {what}s "
                                f"(use 0..{n - 1} or negatives)")
        mask[i % n] = True
    return mask


@dataclass
class _Plan:
    """What to write into one site: ``where(mask, source, x)``, with source and mask over the cached positions.

    Shapes:
        source: (Bs, ..., P, ...) the cached activation (Bs = 1 or the run's batch)
        mask: bool, broadcastable to source, or None for "every element"
    """

    source: Tensor
    mask: Tensor | None


def _site_mask(site: Site, source: Tensor) -> Tensor | None:
    """Boolean mask broadcastable to the cached tensor selecting ``site.pos`` and ``site.head``."""
    if site.pos is None and site.head is None:
        return None
    axis = _pos_axis(site.name)
    shape = [1] * source.dim()
    pos = _index_mask(site.pos, source.shape[axis], "position", site.name)
    shape[axis] = source.shape[axis]
    mask = pos.view(shape)
    if _is_head_site(site.name):
        hshape = [1] * source.dim()
        hshape[1] = source.shape[1]
        mask = mask & _index_mask(site.head, source.shape[1], "head", site.name).view(hshape)
    return mask.to(source.device)


def _merge(a: _Plan | None, b: _Plan) -> _Plan:
    """Two selections of one site from the same cache: their union."""
    if a is None:
        return b
    if a.mask is None or b.mask is None:
        return _Plan(a.source, None)
    return _Plan(a.source, a.mask | b.mask)


def _apply(x: Tensor, plan: _Plan, axis: int, offset: int, site: str) -> Tensor:
    """Replace the planned elements of ``x``, which holds positions ``offset .. offset + n`` of the site."""
    n, total = x.shape[axis], plan.source.shape[axis]
    if plan.source.shape[0] not in (1, x.shape[0]):
        raise PatchingError(f"site {site!r}: the cache holds a batch of {plan.source.shape[0]} but the run has "
                            f"{x.shape[0]} rows: cache a batch of 1 (it is broadcast) or of the same size")
    other = [d for i, d in enumerate(x.shape) if i not in (0, axis)]
    cached = [d for i, d in enumerate(plan.source.shape) if i not in (0, axis)]
    if other != cached:
        raise PatchingError(f"site {site!r}: the run's activation has shape {tuple(x.shape)} but the cache holds "
                            f"{tuple(plan.source.shape)}: the cache comes from another model or another layout")
    avail = max(0, min(n, total - offset))
    if avail == 0:
        return x
    src = plan.source.narrow(axis, offset, avail).to(x.dtype)
    head = x.narrow(axis, 0, avail)
    if plan.mask is None:
        new = src.expand_as(head) if src.shape[0] != head.shape[0] else src
    else:
        mask = plan.mask.narrow(axis, offset, avail) if plan.mask.shape[axis] > 1 else plan.mask
        new = torch.where(mask, src, head)
    if avail == n:
        return new.contiguous() if new.shape != x.shape or new.stride() != x.stride() else new
    return torch.cat([new.expand_as(head) if new.shape != head.shape else new, x.narrow(axis, avail, n - avail)], axis)


@contextlib.contextmanager
def _patched(model: nn.Module, plans: Mapping[str, _Plan]) -> Iterator[None]:
    """Register the replacing hooks of ``plans`` (site name -> plan) for the block; always remove them."""
    known = activation_sites(model)
    state = {"offset": 0}
    handles = []
    try:
        if any(_side(name) == "tgt" for name in plans):
            handles.append(_offset_tracker(model, state))
        for name, plan in plans.items():
            axis, side = _pos_axis(name), _side(name)
            total = plan.source.shape[axis]

            def replace(_m: nn.Module, _inp: Any, out: Tensor, name: str = name, plan: _Plan = plan,
                        axis: int = axis, side: str = side, total: int = total) -> Tensor:
                if side == "src" and out.shape[axis] != total:
                    raise PatchingError(f"site {name!r}: the run has {out.shape[axis]} source tokens but the cached "
                                        f"run had {total}: patching needs sources of equal token length (pad the "
                                        "shorter one or choose a pair with as many tokens)")
                return _apply(out, plan, axis, state["offset"] if side == "tgt" else 0, name)

            handles.append(known[name].register_forward_hook(replace))
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def patch(model: nn.Module, cache: ActivationCache, sites: Iterable[str | Site | tuple] | str | Site,
          allow_other_model: bool = False) -> Iterator[list[Site]]:
    """Run the model with the activations at ``sites`` replaced by ``cache``'s, for the duration of the block.

    Works for any forward pass inside the block: teacher forcing (``model(src, tgt)``), ``encode``/``decode``,
    and greedy or beam decoding with or without the key/value cache (decoder sites follow the decoder's position
    offset). All hooks are removed when the block ends, also after an exception.

    Args:
        model: the workbench Transformer that made ``cache``.
        cache: from :func:`cache_activations`; a batch of 1 is broadcast over the run's batch.
        sites: site names, :class:`Site` objects, or ``(name, pos[, head])`` tuples.
        allow_other_model: patch with a cache that another model of the same architecture made (other weights:
            another seed, a fine-tuned copy, a checkpoint of another step), for deliberate cross-model patching.
            By default such a cache is refused: activations of other weights answer another question.

    Yields:
        The sites as :class:`Site` objects.

    Raises:
        PatchingError: an unknown site (the message lists the valid ones), a position or head out of range, a
            cache from another architecture, a cache from a model with other weights (unless
            ``allow_other_model``), or (during the run) a source of another token length.
    """
    if not isinstance(cache, ActivationCache):
        raise PatchingError(f"cache must be an ActivationCache from cache_activations, got {type(cache).__name__}")
    if cache.signature != _signature(model):
        raise PatchingError("this cache comes from another model (architecture or vocabulary differ: cache "
                            f"{cache.signature['cfg']}, model {_signature(model)['cfg']}): cache the activations "
                            "with this model")
    if not allow_other_model and cache.fingerprint is not None and cache.fingerprint != weights_fingerprint(model):
        raise PatchingError(f"this cache comes from a model with other weights (fingerprint {cache.fingerprint}, this "
                            f"model's {weights_fingerprint(model)}): cache the activations with this model, or pass "
                            "allow_other_model=True to patch across models on purpose")
    if isinstance(sites, str | Site):
        sites = [sites]
    elif not isinstance(sites, Iterable):
        raise PatchingError(f"sites must be a site name, a Site, or a list of them, got {type(sites).__name__}: "
                            "e.g. patch(model, cache, 'enc.2.resid') or patch(model, cache, activation_sites(model))")
    chosen = [dataclasses.replace(site, name=part) for item in sites for site in [_as_site(item)]
              for part in _expand(site.name)]
    known = activation_sites(model)
    plans: dict[str, _Plan] = {}
    for site in chosen:
        _check_name(site.name, known)
        if site.name not in cache:
            raise PatchingError(f"site {site.name!r} was not cached: call cache_activations without sites= (or "
                                f"with it); the cache has {', '.join(cache)}")
        source = cache[site.name]
        plans[site.name] = _merge(plans.get(site.name), _Plan(source, _site_mask(site, source)))
    with _patched(model, plans):
        yield chosen


@torch.no_grad()
def patched_greedy(model: nn.Module, src: Tensor, cache: ActivationCache | None = None,
                   sites: Iterable[str | Site | tuple] = (), use_cache: bool = True, allow_other_model: bool = False,
                   **kwargs: Any) -> Tensor:
    """Greedy translation of ``src`` with ``sites`` patched from ``cache`` (no cache: the plain model;
    ``allow_other_model`` as in :func:`patch`).

    ``kwargs`` go to :func:`workbench.translation.decode.greedy_decode` (``bos_id``, ``eos_id``, ``max_extra``).

    Shapes:
        src (B, S) -> (B, T) output ids without bos, eos included
    """
    from workbench.translation.decode import greedy_decode

    if cache is None:
        return greedy_decode(model, src, use_cache=use_cache, **kwargs)
    if src.shape[0] > 1:  # keep every row to the end: row i of the cache patches sentence i at every step (on a
        kwargs.setdefault("on_step", lambda *_: None)  # CPU a finished sentence would otherwise leave the batch)
    with patch(model, cache, sites, allow_other_model=allow_other_model):
        return greedy_decode(model, src, use_cache=use_cache, **kwargs)


def patch_plans(model: nn.Module, values: Mapping[str, tuple[Tensor, Tensor | None]]) -> contextlib.AbstractContextManager:
    """Low-level patching for sweeps: site -> (source, mask), where ``mask`` selects per batch row what to replace.

    Shapes:
        source: (1 or N, ...) as the site's activation over the cached positions; mask: bool broadcastable to
        (N, ...), or None for every element
    """
    known = activation_sites(model)
    return _patched(model, {_check_name(name, known): _Plan(src, mask) for name, (src, mask) in values.items()})


def positions_differing(a: Sequence[int], b: Sequence[int]) -> list[int]:
    """Positions where two token sequences of equal length differ (a minimal pair's edit)."""
    if len(a) != len(b):
        raise PatchingError(f"the pair has {len(a)} and {len(b)} tokens: patching position by position needs equal "
                            "token lengths (choose a minimal pair whose edits keep the token count)")
    return [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
