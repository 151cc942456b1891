"""The rivals ``workbench bench`` races ours against: ``nn.Transformer`` built like ours, and ours without hook points.

:class:`NNTransformer` has our embeddings, positions, tied generator, parameter count and dropout placement, so a
training-step ratio compares the layers and nothing else; :func:`without_hook_points` is our model with its inert
taps removed, the baseline that shows what the hook points cost a user who never captures.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
from torch import nn

import workbench as wb
from workbench.model.attention import MultiHeadAttention, scaled_dot_product_attention
from workbench.model.hook_points import HookPoint
from workbench.model.masks import causal_mask, to_nn_mask
from workbench.model.transformer import DecoderLayer, EncoderLayer


class NNTransformer(nn.Module):
    """torch.nn.Transformer with the same embeddings, positions, tied generator and dropout placement as ours.

    Like with like: ``nn.Transformer(dropout=p)`` also drops out the attention *weights* inside every
    ``nn.MultiheadAttention``; ours (as the paper) drops only sub-layer outputs, the feed-forward's inner
    activations and the embedding sums, and uses ``cfg.attn_dropout`` (0 by default) on the weights. The reference's
    attention-weight dropout is set to ``cfg.attn_dropout`` too, which also keeps it on the fused attention kernel.
    A post-LN ``nn.Transformer`` adds a final LayerNorm to each stack, which the paper's post-LN stack has not:
    those are removed, so both models have the same parameters and the same work.
    """

    def __init__(self, cfg: wb.ModelConfig, vocab: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, cfg.d_model, padding_idx=0)
        # a separate source embedding unless the config ties them, so both models have the same parameter count
        self.src_embed = self.embed if cfg.tie_src_tgt else nn.Embedding(vocab, cfg.d_model, padding_idx=0)
        self.register_buffer("pe", wb.sinusoidal_table(cfg.max_len, cfg.d_model), persistent=False)
        self.core = nn.Transformer(cfg.d_model, cfg.n_heads, cfg.n_enc_layers, cfg.n_dec_layers, cfg.d_ff, cfg.dropout,
                                   activation=cfg.activation, layer_norm_eps=cfg.layer_norm_eps, batch_first=True,
                                   norm_first=cfg.norm_first)
        for module in self.core.modules():
            if isinstance(module, nn.MultiheadAttention):
                module.dropout = cfg.attn_dropout  # dropout on attention weights: as ours, not as the sub-layers
        if not cfg.norm_first:
            self.core.encoder.norm = None
            self.core.decoder.norm = None
        self.generator = nn.Linear(cfg.d_model, vocab, bias=False)
        self.generator.weight = self.embed.weight
        self.scale = math.sqrt(cfg.d_model)
        self.src_drop, self.tgt_drop = nn.Dropout(cfg.dropout), nn.Dropout(cfg.dropout)  # one per embedding, as ours

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        """Shapes: src (B, S), tgt (B, T) -> logits (B, T, V)."""
        s = self.src_drop(self.src_embed(src) * self.scale + self.pe[: src.shape[1]])
        t = self.tgt_drop(self.embed(tgt) * self.scale + self.pe[: tgt.shape[1]])
        pad = to_nn_mask(src != 0)
        causal = to_nn_mask(causal_mask(tgt.shape[1], device=tgt.device))
        out = self.core(s, t, tgt_mask=causal, src_key_padding_mask=pad, memory_key_padding_mask=pad, tgt_is_causal=True)
        return self.generator(out)


def dropout_sites(model: nn.Module) -> dict[str, list[float]]:
    """Where a model applies dropout, by kind, with each site's probability (sorted).

    ``"activations"``: every ``nn.Dropout`` module (embedding sums, sub-layer outputs, feed-forward inner layer);
    ``"attention_weights"``: the probability each attention block applies to its weights.
    """
    sites: dict[str, list[float]] = {"activations": [], "attention_weights": []}
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            sites["activations"].append(float(module.p))
        elif isinstance(module, (nn.MultiheadAttention, MultiHeadAttention)):
            sites["attention_weights"].append(float(module.dropout))
    return {k: sorted(v) for k, v in sites.items()}


# -- our model without hook points (the baseline of the capture suite) -------------------------------------------
class _BareAttention(MultiHeadAttention):
    """Our attention block with every hook tap removed; teacher-forced forwards only (no cache, no weights)."""

    def forward(self, query: torch.Tensor, key: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                is_causal: bool = False, cache: Any = None, need_weights: bool = False) -> tuple[torch.Tensor, None]:
        if cache is not None or need_weights:
            raise NotImplementedError("the hook-free baseline runs teacher-forced forwards only")
        inner, inner_v = self.n_heads * self.d_head, self.n_heads * self.d_v
        if key is None:
            q, k, v = self._project(query, slice(None)).split([inner, inner, inner_v], dim=-1)  # (B, T, inner) ...
            q, k, v = self._split(q), self._split(k), self._split(v)  # (B, H, T, d_head), v: (B, H, T, d_v)
        else:
            q = self._split(self._project(query, slice(0, inner)))  # (B, H, Tq, d_head)
            k, v = self._project(key, slice(inner, None)).split([inner, inner_v], dim=-1)  # (B, Tk, inner), (B, Tk, inner_v)
            k, v = self._split(k), self._split(v)  # (B, H, Tk, d_head), v: (B, H, Tk, d_v)
        out, _ = scaled_dot_product_attention(q, k, v, mask=mask, is_causal=is_causal,
                                              dropout_p=self.dropout if self.training else 0.0)
        B, H, Tq, Dh = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(B, Tq, H * Dh)), None  # (B, Tq, d_model)


class _BareEncoderLayer(EncoderLayer):
    def forward(self, x: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        x = self.residual(1, x, lambda h: self.self_attn(h, mask=src_mask)[0])
        return self.residual(2, x, self.ff)


class _BareDecoderLayer(DecoderLayer):
    def forward(self, x: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor | None = None,
                tgt_mask: torch.Tensor | None = None, cache: Any = None) -> torch.Tensor:
        if cache is not None:
            raise NotImplementedError("the hook-free baseline runs teacher-forced forwards only")
        causal = tgt_mask is None
        x = self.residual(1, x, lambda h: self.self_attn(h, mask=tgt_mask, is_causal=causal)[0])
        x = self.residual(2, x, lambda h: self.cross_attn(h, memory, mask=src_mask)[0])
        return self.residual(3, x, self.ff)


_BARE: dict[type, type] = {MultiHeadAttention: _BareAttention, EncoderLayer: _BareEncoderLayer,
                           DecoderLayer: _BareDecoderLayer}


def without_hook_points(model: wb.Transformer) -> wb.Transformer:
    """A copy of ``model`` with the same weights and no hook points: the modules that tap them run forwards
    without the taps, and every :class:`~workbench.hook_points.HookPoint` is deleted (teacher-forced forwards only).

    The capture suite races it against ``model`` to show what the hook points cost a user who never captures.
    """
    bare = copy.deepcopy(model)
    for module in bare.modules():
        if type(module) in _BARE:
            module.__class__ = _BARE[type(module)]
        for name, child in list(module.named_children()):
            if isinstance(child, HookPoint):
                delattr(module, name)
    return bare
