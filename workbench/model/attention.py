"""Scaled dot-product attention (paper section 3.2.1) and multi-head attention (3.2.2).

Two paths, chosen per call:

* fused: :func:`torch.nn.functional.scaled_dot_product_attention` (flash / memory-efficient kernels where
  available). Used whenever nobody needs the weights, which includes all of training.
* explicit: ``softmax(Q K^T / sqrt(d_k)) V`` written out, returning per-head weights. Used when
  ``need_weights=True``.

Hook points (:mod:`workbench.model.hook_points`) do not change the path: when a hook listens on ``hook_scores`` or
``hook_pattern`` (as :func:`workbench.inspect.capture.capture_attention`'s do), the output still comes from the fused
kernel, so it is bit-identical with and without capture, and the weights are computed beside it.

Masks are boolean with ``True`` = may attend. A query row whose every key is masked gets zero weights and a
zero output on both paths (never NaN).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from workbench.model.hook_points import HookPoint, tap
from workbench.model.masks import causal_mask, check_mask


def _probe_fused_zeroes_empty_rows(device: torch.device) -> bool:
    """Run SDPA once on a query whose only key is masked: does this torch return zeros there (not NaN)?"""
    q = torch.ones(1, 1, 1, 2, device=device)
    mask = torch.zeros(1, 1, 1, 1, dtype=torch.bool, device=device)
    out = F.scaled_dot_product_attention(q, q, q, attn_mask=mask)
    return bool((out == 0).all())


# probed eagerly, once per device type: the CPU at import (a 1x2 tensor, microseconds), accelerators at their first
# eager call; a traced (torch.compile) forward only reads this table, so it has no data-dependent branch
_FUSED_ZEROES_EMPTY_ROWS: dict[str, bool] = {"cpu": _probe_fused_zeroes_empty_rows(torch.device("cpu"))}


def _fused_zeroes_empty_rows(device: torch.device) -> bool:
    """Does this torch's SDPA already return zeros for fully masked rows on this device type?

    Unknown while tracing (the first call on a new device type is inside ``torch.compile``): answer False, so the
    rows are zeroed explicitly, which is correct whatever the kernel does.
    """
    known = _FUSED_ZEROES_EMPTY_ROWS.get(device.type)
    if known is None:
        if torch.compiler.is_compiling():
            return False
        known = _FUSED_ZEROES_EMPTY_ROWS[device.type] = _probe_fused_zeroes_empty_rows(device)
    return known


class FusedAttention(Protocol):
    """The kernel of the fused path: the signature of :func:`torch.nn.functional.scaled_dot_product_attention`
    (boolean ``attn_mask``, True = may attend). The paper's attention uses torch's; a caller that has measured a
    faster kernel for its processor passes its own (:mod:`workbench.translation.kernels`)."""

    def __call__(self, query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                 dropout_p: float = 0.0, is_causal: bool = False) -> Tensor: ...


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    need_weights: bool = False,
    scores_hook: HookPoint | None = None,
    pattern_hook: HookPoint | None = None,
    fused: FusedAttention | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V.

    Args:
        q, k, v: queries, keys, values.
        mask: boolean, True = may attend, broadcastable to (B, H, Tq, Tk).
        is_causal: query i sees keys j <= i (top-left aligned); may be combined with ``mask``.
        dropout_p: dropout on the weights (pass 0.0 in eval mode).
        need_weights: take the explicit path and return the weights.
        scores_hook, pattern_hook: hook points that see the scaled scores and the weights (explicit path).
        fused: the kernel of the fused path (None: :func:`torch.nn.functional.scaled_dot_product_attention`).

    Shapes:
        q: (B, H, Tq, d_k), k: (B, H, Tk, d_k), v: (B, H, Tk, d_v) -> out (B, H, Tq, d_v),
        weights (B, H, Tq, Tk) or None.
    """
    check_mask(mask)
    if is_causal and mask is not None:
        mask = mask & causal_mask(q.shape[-2], k.shape[-2], device=q.device)  # (B|1, 1, Tq, Tk)
        is_causal = False
    if need_weights:
        weights = attention_weights(q, k, mask, is_causal, scores_hook, pattern_hook)
        attn = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
        return attn @ v, weights  # (B, H, Tq, d_v)

    kernel = F.scaled_dot_product_attention if fused is None else fused
    out = kernel(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal)
    if mask is not None and not _fused_zeroes_empty_rows(q.device):
        out = out.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    if (scores_hook is not None and scores_hook.active()) or (pattern_hook is not None and pattern_hook.active()):
        # someone listens: compute the weights on the side, so the output stays the fused kernel's, bit for bit
        attention_weights(q, k, mask, is_causal, scores_hook, pattern_hook)
    return out, None


def attention_weights(
    q: Tensor,
    k: Tensor,
    mask: Tensor | None = None,
    is_causal: bool = False,
    scores_hook: HookPoint | None = None,
    pattern_hook: HookPoint | None = None,
) -> Tensor:
    """softmax(Q K^T / sqrt(d_k)) with masking; rows with no allowed key are all zeros.

    Shapes:
        q: (B, H, Tq, d_k), k: (B, H, Tk, d_k) -> (B, H, Tq, Tk)
    """
    check_mask(mask)
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))  # (B, H, Tq, Tk)
    if scores_hook is not None:
        scores = tap(scores_hook, scores)
    if is_causal:
        mask = causal_mask(q.shape[-2], k.shape[-2], device=q.device)  # (Tq, Tk)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # (B, H, Tq, Tk)
    if mask is not None:
        # a row with no allowed key is all -inf, hence NaN after the softmax: define it as zero weights
        weights = weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    if pattern_hook is not None:
        weights = tap(pattern_hook, weights)
    return weights


@dataclass
class KVCache:
    """Keys and values of one attention block, kept across decoding steps.

    ``static=True`` (cross-attention): computed once from the encoder memory, then reused.
    ``static=False`` (decoder self-attention): each step appends its new keys and values.

    Shapes:
        k: (B, H, T, d_head), v: (B, H, T, d_v)
    """

    static: bool = False
    k: Tensor | None = None
    v: Tensor | None = None

    @property
    def length(self) -> int:
        return 0 if self.k is None else self.k.shape[-2]

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k = torch.cat([self.k, k], dim=-2)  # (B, H, T+t, d_head)
            self.v = torch.cat([self.v, v], dim=-2)
        return self.k, self.v

    def reorder(self, index: Tensor) -> None:
        """Select batch rows (beam search): index (B',) into dim 0."""
        if self.k is not None:
            self.k = self.k.index_select(0, index)
            self.v = self.v.index_select(0, index)


def _causal_from(offset: int, q: Tensor, k: Tensor, mask: Tensor | None) -> Tensor | None:
    """The causal mask of queries that start ``offset`` positions after the first key, combined with ``mask``
    (a single new query may see every cached key: no mask needed).

    Shapes:
        q: (B, H, Tq, d_head), k: (B, H, offset + Tq, d_head) -> (Tq, offset + Tq) or ``mask``'s broadcast
    """
    if q.shape[-2] == 1:
        return mask
    extra = causal_mask(q.shape[-2], k.shape[-2], offset=offset, device=q.device)  # (Tq, Tk)
    return extra if mask is None else mask & extra


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O with head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).

    The three input projections are packed in one ``in_proj_weight`` (as in :class:`torch.nn.MultiheadAttention`),
    so self-attention needs one matrix product; cross-attention uses views of it.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_head: int | None = None,
        dropout: float = 0.0,
        bias: bool = True,
        d_v: int | None = None,
    ) -> None:
        super().__init__()
        self.d_model, self.n_heads = d_model, n_heads
        self.d_head = d_head if d_head is not None else d_model // n_heads  # d_k: query and key width per head
        self.d_v = d_v if d_v is not None else self.d_head  # value width per head (paper: d_v = d_k = 64)
        inner, inner_v = n_heads * self.d_head, n_heads * self.d_v
        # rows: W^Q (inner), W^K (inner), W^V (inner_v)
        self.in_proj_weight = nn.Parameter(torch.empty(2 * inner + inner_v, d_model))
        self.in_proj_bias = nn.Parameter(torch.zeros(2 * inner + inner_v)) if bias else None
        self.out_proj = nn.Linear(inner_v, d_model, bias=bias)
        self.dropout = dropout
        self.hook_q, self.hook_k, self.hook_v = HookPoint(), HookPoint(), HookPoint()
        self.hook_scores, self.hook_pattern = HookPoint(), HookPoint()
        self.hook_z = HookPoint()  # per-head outputs (B, H, Tq, d_v) before W^O
        # the fused path's kernel: None is torch's SDPA; a caller's own choice is set here from outside the model
        # (workbench.translation.kernels.use_kernels), never chosen by the model itself
        self.fused: FusedAttention | None = None
        nn.init.xavier_uniform_(self.in_proj_weight)
        if bias:
            nn.init.zeros_(self.out_proj.bias)

    def _split(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.n_heads, -1).transpose(1, 2)  # (B, H, T, d_head or d_v)

    def _project(self, x: Tensor, part: slice) -> Tensor:
        bias = self.in_proj_bias[part] if self.in_proj_bias is not None else None
        return F.linear(x, self.in_proj_weight[part], bias)

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        mask: Tensor | None = None,
        is_causal: bool = False,
        cache: KVCache | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from ``query`` to ``key`` (``key=None`` means self-attention; values are the keys' inputs).

        Args:
            query: (B, Tq, d_model).
            key: (B, Tk, d_model) source of keys and values, or None for self-attention.
            mask: boolean, True = may attend, broadcastable to (B, H, Tq, Tk).
            is_causal: causal self-attention (use instead of a dense mask: the fused kernel is faster).
            cache: a :class:`KVCache` for incremental decoding.
            need_weights: also return the per-head weights (explicit path).

        Shapes:
            -> out (B, Tq, d_model), weights (B, H, Tq, Tk) or None
        """
        inner, inner_v = self.n_heads * self.d_head, self.n_heads * self.d_v
        if key is None and cache is None:  # self-attention: Q, K and V in one matrix product
            q, k, v = self._project(query, slice(None)).split([inner, inner, inner_v], dim=-1)  # (B, T, inner) x 2, (B, T, inner_v)
            q, k, v = self._split(q), self._split(k), self._split(v)  # (B, H, T, d_head), v: (B, H, T, d_v)
        elif cache is not None and cache.static and cache.k is not None:  # cross-attention, later steps: reuse
            q, k, v = self._split(self._project(query, slice(0, inner))), cache.k, cache.v  # (B, H, Tq, d_head)
        else:  # cross-attention, or a decoding step of self-attention: queries and keys from different inputs
            q = self._split(self._project(query, slice(0, inner)))  # (B, H, Tq, d_head)
            k, v = self._project(query if key is None else key, slice(inner, None)).split([inner, inner_v], dim=-1)
            k, v = self._split(k), self._split(v)  # (B, H, Tk, d_head), v: (B, H, Tk, d_v)
        if cache is not None and cache.static:  # cross-attention: the memory's keys, kept for the next steps
            cache.k, cache.v = k, v
        elif cache is not None:  # self-attention step by step: the new keys join the cached ones
            offset = cache.length
            k, v = cache.append(k, v)  # (B, H, offset + Tq, d_head)
            if is_causal and offset > 0:  # the queries start after the cached keys
                mask = _causal_from(offset, q, k, mask)
                is_causal = False
        # each point tapped on its own: a hook on hook_k or hook_v alone must fire too
        q, k, v = tap(self.hook_q, q), tap(self.hook_k, k), tap(self.hook_v, v)
        out, weights = scaled_dot_product_attention(
            q,
            k,
            v,
            mask=mask,
            is_causal=is_causal,
            dropout_p=self.dropout if self.training else 0.0,
            need_weights=need_weights,
            scores_hook=self.hook_scores,
            pattern_hook=self.hook_pattern,
            fused=self.fused,
        )
        out = tap(self.hook_z, out)  # per-head outputs: head gating and ablation hook in here
        B, H, Tq, Dh = out.shape
        out = out.transpose(1, 2).reshape(B, Tq, H * Dh)  # (B, Tq, H * d_v)
        return self.out_proj(out), weights
