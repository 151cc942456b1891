"""Per-head analysis: entropy, confidence, positional heads, gradient importance and head masking.

Importance follows Michel, Levy and Neubig (2019), "Are Sixteen Heads Really Better than One?": every head's
output is multiplied by a gate xi_h = 1 and the importance of head h is E |dL / dxi_h| over data, normalised
per layer by its L2 norm. Masking a head zeroes its output (it no longer reaches W^O): see
:mod:`workbench.inspect.intervene` for the interventions themselves.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import Tensor, nn

from workbench.inspect.intervene import attention_blocks
from workbench.model.sites import KindDict, kind_key

HeadKey = tuple[str, int]  # (kind, layer), kind in "enc.self", "dec.self", "dec.cross" (workbench.model.sites)


def _valid_rows(weights: Tensor) -> Tensor:
    return weights.sum(-1) > 0  # (B, H, Tq): rows that attended to something (not padding queries)


def head_entropy(weights: Tensor, query_mask: Tensor | None = None, normalise: bool = False) -> Tensor:
    """Mean entropy (nats) of each head's attention distributions.

    With ``normalise=True`` each row's entropy is divided by the largest it could have, ``log n`` for a row that may
    attend to ``n`` keys (those with a weight above zero: masked keys get exactly zero), so 0 means one key and 1
    means uniform whatever the sentence's length; rows with a single key are left out. Use it to compare heads
    across tokenizers that cut the same sentence into different numbers of pieces.

    Shapes:
        weights (B, H, Tq, Tk), query_mask (B, Tq) True at real queries -> (H,)
    """
    ent = -(weights * weights.clamp_min(1e-12).log()).sum(-1)  # (B, H, Tq)
    valid = _valid_rows(weights)
    if normalise:
        n_keys = (weights > 0).sum(-1)  # (B, H, Tq) keys each row may attend to
        valid = valid & (n_keys > 1)
        ent = ent / n_keys.clamp_min(2).to(ent.dtype).log()
    if query_mask is not None:
        valid = valid & query_mask[:, None, :]
    return (ent * valid).sum((0, 2)) / valid.sum((0, 2)).clamp_min(1)


def head_confidence(weights: Tensor, query_mask: Tensor | None = None) -> Tensor:
    """Mean maximum weight of each head (Voita et al., 2019): near 1 means the head looks at one token.

    Shapes:
        weights (B, H, Tq, Tk) -> (H,)
    """
    top = weights.max(-1).values  # (B, H, Tq)
    valid = _valid_rows(weights)
    if query_mask is not None:
        valid = valid & query_mask[:, None, :]
    return (top * valid).sum((0, 2)) / valid.sum((0, 2)).clamp_min(1)


def positional_score(weights: Tensor, offset: int, query_mask: Tensor | None = None) -> Tensor:
    """Mean weight a head puts on the key at position i + offset (offset -1: previous token, +1: next).

    Shapes:
        weights (B, H, T, T) self-attention -> (H,)
    """
    B, H, Tq, Tk = weights.shape
    q = torch.arange(Tq)
    k = q + offset
    ok = (k >= 0) & (k < Tk)
    picked = weights[:, :, q[ok], k[ok]]  # (B, H, n)
    valid = _valid_rows(weights)[:, :, q[ok]]
    if query_mask is not None:
        valid = valid & query_mask[:, None, q[ok]]
    return (picked * valid).sum((0, 2)) / valid.sum((0, 2)).clamp_min(1)


@contextlib.contextmanager
def gate_heads(model: nn.Module, gates: dict[HeadKey, Tensor]) -> Iterator[dict[HeadKey, Tensor]]:
    """Multiply each head's output by a gate while the block runs; hooks are removed on exit.

    Args:
        gates: (kind, layer) -> (H,) tensor (may require grad, for importance).
    """
    blocks = attention_blocks(model)
    handles = []
    try:
        for key, gate in gates.items():
            key = kind_key(key)  # an old kind spelling ("cross") warns
            if key not in blocks:
                raise KeyError(f"no attention block {key}; the model has {sorted(blocks)}")

            def scale(_m: nn.Module, _inp: Any, out: Tensor, gate: Tensor = gate) -> Tensor:
                return out * gate.to(out.dtype)[None, :, None, None]  # (B, H, Tq, d_v)

            handles.append(blocks[key].hook_z.register_forward_hook(scale))
        yield gates
    finally:
        for handle in handles:
            handle.remove()


def head_importance(model: nn.Module, batches: Iterable[Any], pad_id: int, normalise: bool = True) -> dict[HeadKey, Tensor]:
    """Gradient-based head importance |dL/dxi_h| summed over batches (Michel et al., 2019).

    Args:
        batches: objects with ``src``, ``tgt_in``, ``tgt_out`` tensors (e.g. :class:`workbench.batching.Batch`).

    Returns:
        (kind, layer) -> (H,) importance, L2-normalised per layer when ``normalise``.
    """
    blocks = attention_blocks(model)
    device = next(model.parameters()).device
    gates = {key: torch.ones(b.n_heads, device=device, requires_grad=True) for key, b in blocks.items()}
    total = {key: torch.zeros(b.n_heads) for key, b in blocks.items()}
    was_training = model.training
    model.eval()
    try:
        with gate_heads(model, gates):
            for batch in batches:
                logits = model(batch.src.to(device), batch.tgt_in.to(device))
                loss = nn.functional.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), batch.tgt_out.to(device).reshape(-1), ignore_index=pad_id
                )
                grads = torch.autograd.grad(loss, list(gates.values()))
                for key, g in zip(gates, grads, strict=True):
                    total[key] += g.detach().abs().cpu()
    finally:
        model.train(was_training)
    if normalise:
        total = {k: v / v.norm().clamp_min(1e-12) for k, v in total.items()}
    return KindDict(total)


def prune_order(importance: dict[HeadKey, Tensor]) -> list[tuple[str, int, int]]:
    """All heads as (kind, layer, head), least important first."""
    flat = [(float(v[h]), kind, layer, h) for (kind, layer), v in importance.items() for h in range(len(v))]
    return [(kind, layer, h) for _, kind, layer, h in sorted(flat)]
