"""Head interventions: switch attention heads off for the duration of a ``with`` block, weights untouched.

Every multi-head block carries a hook point ``hook_z`` on its per-head outputs ``z`` (B, H, Tq, d_v): the
``head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)`` of the paper, just before they are concatenated and multiplied
by ``W^O``. Ablating head ``h`` of a block replaces ``z[:, h]`` there, through a forward hook that is removed on
exit (also when the body raises):

* ``mode="zero"`` (the default): by zeros, so the head no longer reaches ``W^O`` (Michel et al., 2019; the
  same as deleting the head's ``d_v`` input columns of ``W^O``);
* ``mode="mean"``: by the head's mean output over a reference set (:func:`head_means`), which keeps the
  average signal the next layers expect and removes only what depends on the input.

    with ablate_heads(model, [("dec.cross", 2, 5), ("enc.self", 0, 1)]):
        logits = model(src, tgt_in)
    with ablate_heads(model, [("dec.cross", 2, None)]):  # every head of decoder layer 2's cross-attention
        ...
    means = head_means(model, batches)
    with ablate_heads(model, [("dec.self", 1, 3)], mode="mean", means=means):
        ...

Heads are ``(kind, layer, head)`` with kind in ``("enc.self", "dec.self", "dec.cross")`` (the kinds of
:mod:`workbench.model.sites`; the old ``"enc_self"``, ``"dec_self"``, ``"cross"`` warn); negative layers and heads
count from the end, ``head=None`` means the whole layer. Interventions act on every forward pass inside the
block: teacher forcing, greedy and beam search with or without the key/value cache.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from workbench.errors import InterventionError
from workbench.inspect.capture import AttentionCache, capture_attention
from workbench.model.hook_points import HookPoint
from workbench.model.sites import ATTENTION_KINDS, KindDict, kind_name, site_name, split_site
from workbench.runtime import full_precision

HEAD_KINDS = ATTENTION_KINDS  # ("enc.self", "dec.self", "dec.cross")
ABLATION_MODES = ("zero", "mean")
BlockKey = tuple[str, int]  # (kind, layer)
Head = tuple[str, int, int]  # (kind, layer, head)


def attention_blocks(model: nn.Module) -> dict[BlockKey, nn.Module]:
    """Every multi-head block of a Transformer by (kind, layer), e.g. ``("dec.cross", 0)``: the blocks with a
    ``hook_z`` point, named by the site of that point (``dec.0.cross.z``)."""
    blocks = KindDict()
    for path, module in model.named_modules():
        if isinstance(getattr(module, "hook_z", None), HookPoint):
            kind, layer, _ = split_site(site_name(f"{path}.hook_z" if path else "hook_z"))
            blocks[(kind, layer)] = module
    return blocks


def _index(value: Any, n: int, what: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InterventionError(f"{what} {value!r} in {where} is not an integer: use 0..{n - 1} (or negatives)")
    if not -n <= value < n:
        raise InterventionError(f"{what} {value} out of range in {where}: it has {n} (use 0..{n - 1} or negatives)")
    return value % n


def resolve_heads(model: nn.Module, heads: Iterable[tuple[str, int, int | None]]) -> dict[BlockKey, list[int]]:
    """Check ``(kind, layer, head)`` triples against the model and group them by block.

    Returns:
        (kind, layer) -> sorted head indices; ``head=None`` expands to every head of the layer.

    Raises:
        InterventionError: a triple that is malformed or names a kind, layer or head the model does not have.
    """
    if isinstance(heads, tuple) and heads and isinstance(heads[0], str):
        raise InterventionError(f"heads must be a list of (kind, layer, head) triples; got one triple {heads!r}: "
                                f"wrap it in a list, [{heads!r}]")
    blocks = attention_blocks(model)
    if not blocks:
        raise InterventionError(f"{type(model).__name__} has no multi-head attention blocks with a hook_z point: "
                                "head interventions need a workbench Transformer")
    n_layers: dict[str, int] = {}
    for kind, layer in blocks:
        n_layers[kind] = max(n_layers.get(kind, 0), layer + 1)
    chosen: dict[BlockKey, set[int]] = {}
    for item in heads:
        if not isinstance(item, tuple | list) or len(item) != 3:
            raise InterventionError(f"{item!r} is not a (kind, layer, head) triple: e.g. ('dec.cross', 0, 1), or "
                                    "('dec.cross', 0, None) for every head of a layer")
        kind, layer, head = item
        kind = kind_name(kind, HEAD_KINDS, what="attention kind")
        if kind not in n_layers:
            raise InterventionError(f"this model has no {kind!r} attention; it has {sorted(n_layers)}")
        layer = _index(layer, n_layers[kind], "layer", f"{tuple(item)!r} ({kind!r} layers)")
        block = blocks[(kind, layer)]
        picked = range(block.n_heads) if head is None else [_index(head, block.n_heads, "head", f"{tuple(item)!r} (heads)")]
        chosen.setdefault((kind, layer), set()).update(picked)
    return {key: sorted(hs) for key, hs in sorted(chosen.items())}


def _check_means(means: Mapping[BlockKey, Tensor] | None, grouped: dict[BlockKey, list[int]],
                 blocks: dict[BlockKey, nn.Module]) -> None:
    if means is None:
        raise InterventionError("mode='mean' needs the heads' mean outputs: pass means=head_means(model, batches)")
    for key in grouped:
        block = blocks[key]
        if key not in means:
            raise InterventionError(f"means has no entry for block {key}: compute it with head_means(model, batches) "
                                    f"over the same model (it has {sorted(means)})")
        shape = tuple(means[key].shape)
        if shape != (block.n_heads, block.d_v):
            raise InterventionError(f"means[{key}] has shape {shape}, expected (n_heads, d_v) = "
                                    f"{(block.n_heads, block.d_v)}: use head_means on this model")


@contextlib.contextmanager
def ablate_heads(
    model: nn.Module,
    heads: Iterable[tuple[str, int, int | None]],
    mode: str = "zero",
    means: Mapping[BlockKey, Tensor] | None = None,
) -> Iterator[list[Head]]:
    """Switch heads off while the block runs; the weights are never modified and every hook is removed on exit.

    Args:
        model: a workbench :class:`~workbench.model.Transformer`.
        heads: ``(kind, layer, head)`` triples; ``head=None`` switches off the whole layer of that kind.
        mode: ``"zero"`` replaces the heads' outputs by zeros, ``"mean"`` by their mean over a reference set.
        means: for ``mode="mean"``: (kind, layer) -> (H, d_v) mean per-head outputs, from :func:`head_means`.

    Yields:
        The ablated heads as a sorted list of ``(kind, layer, head)`` with whole layers expanded.

    Raises:
        InterventionError: an unknown mode, kind, layer or head, or missing/ill-shaped means.

    Shapes:
        the hooked per-head outputs z: (B, H, Tq, d_v); ``z[:, h]`` becomes 0 or ``means[kind, layer][h]``.
    """
    if mode not in ABLATION_MODES:
        raise InterventionError(f"unknown ablation mode {mode!r}: choose from {ABLATION_MODES}")
    grouped = resolve_heads(model, heads)
    blocks = attention_blocks(model)
    if mode == "mean":
        means = KindDict(means) if means is not None else None  # old kind spellings in the keys warn
        _check_means(means, grouped, blocks)
    handles = []
    try:
        for key, hs in grouped.items():
            block = blocks[key]
            device = block.in_proj_weight.device
            off = torch.zeros(block.n_heads, dtype=torch.bool, device=device)
            off[hs] = True
            off = off[None, :, None, None]  # (1, H, 1, 1)
            if mode == "zero":
                fill: Tensor | float = 0.0
            else:
                fill = means[key].detach().to(device=device, dtype=block.in_proj_weight.dtype)[None, :, None, :]  # (1, H, 1, d_v)

            def replace(_m: nn.Module, _inp: Any, z: Tensor, off: Tensor = off, fill: Tensor | float = fill) -> Tensor:
                f = fill.to(z.dtype) if isinstance(fill, Tensor) else fill
                return torch.where(off, f, z)  # (B, H, Tq, d_v)

            handles.append(block.hook_z.register_forward_hook(replace))
        with full_precision():  # interventions measure fp32 outputs, whatever precision a surrounding run uses
            yield [(kind, layer, h) for (kind, layer), hs in grouped.items() for h in hs]
    finally:
        for handle in handles:
            handle.remove()


def _src_tgt(batch: Any) -> tuple[Tensor, Tensor]:
    if hasattr(batch, "src") and hasattr(batch, "tgt_in"):
        return batch.src, batch.tgt_in
    if isinstance(batch, tuple | list) and len(batch) >= 2:
        return batch[0], batch[1]
    raise InterventionError(f"a batch must have .src and .tgt_in (workbench.translation.batching.Batch) or be (src, tgt_in); "
                            f"got {type(batch).__name__}")


@torch.no_grad()
def head_means(model: nn.Module, batches: Iterable[Any]) -> dict[BlockKey, Tensor]:
    """Mean output of every head over a reference set, for ``ablate_heads(..., mode="mean")``.

    The mean runs over real (non-padding) query positions of every sentence: source positions for encoder
    self-attention, target positions for decoder self- and cross-attention. The model runs in eval mode.

    Args:
        batches: :class:`~workbench.translation.batching.Batch` objects (``src``, ``tgt_in``) or ``(src, tgt_in)`` pairs.

    Returns:
        (kind, layer) -> (H, d_v) float32 tensor on the CPU.
    """
    blocks = attention_blocks(model)
    if not blocks:
        raise InterventionError(f"{type(model).__name__} has no multi-head attention blocks with a hook_z point")
    device = next(model.parameters()).device
    sums = {key: torch.zeros(b.n_heads, b.d_v, dtype=torch.float64) for key, b in blocks.items()}
    counts = dict.fromkeys(blocks, 0)
    query_mask: dict[str, Tensor] = {}
    handles = []
    was_training = model.training
    model.eval()
    try:
        for key, block in blocks.items():
            def record(_m: nn.Module, _inp: Any, z: Tensor, key: BlockKey = key) -> None:
                real = query_mask["src" if key[0] == "enc.self" else "tgt"]  # (B, Tq)
                weights = real[:, None, :, None].to(z.dtype)  # (B, 1, Tq, 1)
                sums[key] += (z * weights).sum((0, 2)).double().cpu()  # (H, d_v)
                counts[key] += int(real.sum())

            handles.append(block.hook_z.register_forward_hook(record))
        for batch in batches:
            src, tgt_in = (t.to(device) for t in _src_tgt(batch))
            query_mask["src"], query_mask["tgt"] = src != model.pad_id, tgt_in != model.pad_id
            model(src, tgt_in)
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    if not any(counts.values()):
        raise InterventionError("head_means saw no tokens: pass a non-empty list of batches")
    return KindDict({key: (sums[key] / max(1, counts[key])).float() for key in blocks})


# -- re-translating under an intervention (what the inspector runs on every toggle) --------------------------------
@dataclass
class InterventionOutcome:
    """What an intervention does to one sentence's greedy translation.

    Shapes:
        reference_logprob: (T,) log-probabilities of the reference tokens, one per decoder position
    """

    heads: list[Head]  # the ablated heads, whole layers expanded
    out_ids: list[int]  # the intervened model's greedy translation (y1 .. eos)
    reference_logprob: Tensor  # log p(reference token t | reference prefix) under the intervened model
    cache: AttentionCache | None  # attention of the teacher-forced pass over the reference (if captured)
    diverged_at: int | None  # first position where out_ids leaves the reference; None if they are the same


def _step_limit(model: nn.Module, n_src: int, max_extra: int) -> int:
    """Greedy decoding's output budget (eos included), as in :func:`workbench.translation.decode.greedy_decode`."""
    return max(1, min(n_src + max_extra, model.cfg.max_len - 1))


@torch.no_grad()
def intervened_greedy(
    model: nn.Module,
    src_ids: Sequence[int],
    reference_ids: Sequence[int],
    heads: Iterable[tuple[str, int, int | None]] = (),
    mode: str = "zero",
    means: Mapping[BlockKey, Tensor] | None = None,
    bos_id: int = 2,
    eos_id: int = 3,
    max_extra: int = 50,
    capture: bool = True,
) -> InterventionOutcome:
    """Greedy translation and reference log-probabilities of one sentence with heads switched off.

    One teacher-forced pass over the reference (the original translation) gives the log-probability of every
    reference token and, when ``capture``, the attention of the intervened model. Its argmaxes also tell where
    greedy decoding would first leave the reference: up to that position the two coincide, so decoding only
    continues from there (prefix fed at once, then step by step with the key/value cache). The result is the
    translation :func:`workbench.translation.decode.greedy_decode` gives under the same intervention (up to floating-point
    near-ties between the batched and the step-by-step pass), usually for a fraction of the decoding steps.

    Args:
        src_ids: source ids (eos included); reference_ids: a translation (y1 .. eos), e.g. the original one.
        heads, mode, means: as in :func:`ablate_heads`; no heads gives the unmodified model.
        max_extra: output budget beyond the source length, as in greedy decoding.

    The model runs in eval mode and is left in the mode it was in.
    """
    was_training = model.training
    try:
        return _intervened_greedy(model, src_ids, reference_ids, heads, mode, means, bos_id, eos_id, max_extra, capture)
    finally:
        model.train(was_training)


def _intervened_greedy(model: nn.Module, src_ids: Sequence[int], reference_ids: Sequence[int],
                       heads: Iterable[tuple[str, int, int | None]], mode: str, means: Mapping[BlockKey, Tensor] | None,
                       bos_id: int, eos_id: int, max_extra: int, capture: bool) -> InterventionOutcome:
    model.eval()
    device = next(model.parameters()).device
    ref = [int(i) for i in reference_ids]
    if not ref:
        raise InterventionError("reference_ids is empty: pass a translation ending in eos")
    src = torch.tensor([list(src_ids)], device=device)  # (1, S)
    tgt_in = torch.tensor([[bos_id, *ref[:-1]]], device=device)  # (1, T)
    limit = _step_limit(model, src.shape[1], max_extra)
    with ablate_heads(model, heads, mode=mode, means=means) as ablated:
        with capture_attention(model) if capture else contextlib.nullcontext() as cache:
            logits = model(src, tgt_in)[0]  # (T, V)
        logp = torch.log_softmax(logits.float(), dim=-1)
        reference_logprob = logp[torch.arange(len(ref), device=device), torch.tensor(ref, device=device)].cpu()
        predicted = logits.argmax(-1).tolist()
        out, diverged = [], None
        for t, token in enumerate(ref):
            choice = eos_id if t + 1 >= limit else predicted[t]  # budget spent: greedy decoding ends here
            out.append(choice)
            if choice != token:
                diverged = t
                break
            if choice == eos_id:
                break
        if out[-1] != eos_id:  # left the reference, or followed a reference that ends before its eos
            out = _continue_greedy(model, src, out, bos_id, eos_id, limit)
    return InterventionOutcome(heads=ablated, out_ids=out, reference_logprob=reference_logprob,
                               cache=cache if capture else None, diverged_at=diverged)


def _continue_greedy(model: nn.Module, src: Tensor, prefix: list[int], bos_id: int, eos_id: int, limit: int) -> list[int]:
    """Greedy decoding of one sentence that starts from a given output prefix (fed in one cached pass)."""
    src_mask = model.src_mask(src)
    memory = model.encode(src, src_mask)
    cache = model.init_cache(memory, src_mask)
    out = list(prefix)
    feed = torch.tensor([[bos_id, *out]], device=src.device)  # (1, t + 1): everything not fed yet
    while out[-1] != eos_id:
        logits = model.decode(feed, memory, src_mask, cache)[0, -1]  # (V,)
        token = eos_id if len(out) + 1 >= limit else int(logits.argmax())
        out.append(token)
        feed = torch.tensor([[token]], device=src.device)
    return out
