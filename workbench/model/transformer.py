"""The encoder-decoder Transformer of the paper (Figure 1), readable top to bottom.

``Transformer.encode`` maps source tokens to ``memory``; ``Transformer.decode`` maps target tokens and memory
to next-token logits, optionally step by step with a key/value cache; ``forward`` does both (teacher forcing).

Each layer's output and each attention block's intermediates pass through hook points (:mod:`workbench.model.hook_points`),
skipped while nobody listens. Inspection listens from outside (:mod:`workbench.inspect.capture`, :mod:`workbench.inspect.intervene`)
and finds them by name in ``named_modules()``; capture does not change the computation (the attention output still
comes from the fused kernel), so outputs are bit-identical with and without it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from workbench.errors import ConfigError, InputTextError
from workbench.model.attention import KVCache, MultiHeadAttention
from workbench.model.config import ModelConfig
from workbench.model.hook_points import HookPoint, tap
from workbench.model.masks import padding_mask
from workbench.model.positional import LearnedPositionalEncoding, SinusoidalPositionalEncoding


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2, applied to each position separately (paper 3.3); GELU or swish
    (x * sigmoid(x)) in place of max(0, .) when the config asks."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu") -> None:
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)
        self.activation = {"relu": F.relu, "gelu": F.gelu, "swish": F.silu}[activation]

    def forward(self, x: Tensor) -> Tensor:
        """Shapes: (B, T, d_model) -> (B, T, d_model)."""
        return self.linear2(self.dropout(self.activation(self.linear1(x))))


def sublayer_connection(
    x: Tensor, sublayer: Callable[[Tensor], Tensor], norm: nn.Module, dropout: nn.Module, norm_first: bool = False
) -> Tensor:
    """One residual sub-layer, written once for every layer (the Annotated Transformer's ``SublayerConnection``).

    post-LN, the paper's default (sections 3.1 and 5.4): ``LayerNorm(x + Dropout(Sublayer(x)))``;
    pre-LN (``norm_first=True``): ``x + Dropout(Sublayer(LayerNorm(x)))``, which needs a final LayerNorm after the
    stack (:class:`Transformer` adds it).

    Shapes: x (B, T, d_model) -> (B, T, d_model); ``sublayer`` maps (B, T, d_model) to (B, T, d_model).
    """
    if norm_first:
        return x + dropout(sublayer(norm(x)))
    return norm(x + dropout(sublayer(x)))


class ResidualLayer(nn.Module):
    """What encoder and decoder layers share: their sub-layers, each wrapped by :func:`sublayer_connection`, and the
    hook point ``hook_resid`` on the layer's output.

    Sub-layer ``i`` (counted from 1, in the order given) has its own ``norm{i}`` and ``dropout{i}``: the names of
    :class:`torch.nn.TransformerEncoderLayer`, which the state dicts of the shipped weights and checkpoints keep.
    """

    def __init__(self, cfg: ModelConfig, **sublayers: nn.Module) -> None:
        super().__init__()
        self.norm_first = cfg.norm_first
        for name, module in sublayers.items():
            self.add_module(name, module)
        for i in range(1, len(sublayers) + 1):
            self.add_module(f"norm{i}", nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps))
        for i in range(1, len(sublayers) + 1):
            self.add_module(f"dropout{i}", nn.Dropout(cfg.dropout))
        self.hook_resid = HookPoint()

    def residual(self, i: int, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        """``x`` through sub-layer ``i`` and its residual connection (post-LN or pre-LN, as configured)."""
        return sublayer_connection(x, sublayer, getattr(self, f"norm{i}"), getattr(self, f"dropout{i}"), self.norm_first)


def _attention(cfg: ModelConfig) -> MultiHeadAttention:
    return MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.d_head, cfg.attn_dropout, d_v=cfg.d_v)


def _feed_forward(cfg: ModelConfig) -> FeedForward:
    return FeedForward(cfg.d_model, cfg.d_ff, cfg.dropout, cfg.activation)


class EncoderLayer(ResidualLayer):
    """Self-attention then feed-forward, each a residual sub-layer (post-LN, or pre-LN)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg, self_attn=_attention(cfg), ff=_feed_forward(cfg))

    def forward(self, x: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """Shapes: x (B, S, d_model), src_mask (B, 1, 1, S) bool -> (B, S, d_model)."""
        x = self.residual(1, x, lambda h: self.self_attn(h, mask=src_mask)[0])
        x = self.residual(2, x, self.ff)
        return tap(self.hook_resid, x)


@dataclass
class LayerCache:
    """Key/value caches of one decoder layer."""

    self_attn: KVCache = field(default_factory=lambda: KVCache(static=False))
    cross_attn: KVCache = field(default_factory=lambda: KVCache(static=True))


class DecoderLayer(ResidualLayer):
    """Masked self-attention, encoder-decoder (cross) attention, feed-forward; each a residual sub-layer."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg, self_attn=_attention(cfg), cross_attn=_attention(cfg), ff=_feed_forward(cfg))

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        cache: LayerCache | None = None,
    ) -> Tensor:
        """Shapes: x (B, T, d_model), memory (B, S, d_model), src_mask (B, 1, 1, S) -> (B, T, d_model).

        ``tgt_mask`` None means causal (the fused kernel's ``is_causal``); pass a boolean (.., T, T) mask to
        override it (e.g. to compare with a reference implementation).
        """
        causal = tgt_mask is None
        sa_cache = cache.self_attn if cache is not None else None
        ca_cache = cache.cross_attn if cache is not None else None
        x = self.residual(1, x, lambda h: self.self_attn(h, mask=tgt_mask, is_causal=causal, cache=sa_cache)[0])
        x = self.residual(2, x, lambda h: self.cross_attn(h, memory, mask=src_mask, cache=ca_cache)[0])
        x = self.residual(3, x, self.ff)
        return tap(self.hook_resid, x)


@dataclass
class DecoderCache:
    """Everything the decoder keeps between steps: per-layer K/V caches and the number of tokens fed."""

    layers: list[LayerCache]
    length: int = 0

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (B',) in every cache (beam search)."""
        for layer in self.layers:
            layer.self_attn.reorder(index)
            layer.cross_attn.reorder(index)


def _check_ids(tokens: Tensor) -> None:
    """Refuse anything but a non-empty (batch, length) integer tensor, in one line. A static check (no host sync):
    the ids' values are checked by :meth:`Embedding.forward` only when the lookup fails."""
    if not isinstance(tokens, Tensor) or tokens.dim() != 2 or tokens.dtype not in (torch.long, torch.int32):
        got = f"{tokens.dtype} of shape {tuple(tokens.shape)}" if isinstance(tokens, Tensor) else type(tokens).__name__
        raise InputTextError(f"token ids must be a (batch, length) tensor of integers, got {got}: encode text with "
                             "the tokenizer (one row per sentence; add a batch axis with ids[None])")
    if tokens.numel() == 0:
        raise InputTextError(f"token ids of shape {tuple(tokens.shape)} hold no token: every row needs at least one "
                             "(the tokenizer ends each sentence with eos; the decoder starts from bos)")


def _out_of_range(tokens: Tensor, vocab_size: int) -> InputTextError:
    """The error for ids outside 0..vocab_size-1 (built only once the embedding lookup has failed)."""
    bad = tokens[(tokens < 0) | (tokens >= vocab_size)]
    shown = ", ".join(str(int(i)) for i in bad.unique()[:5].tolist())
    return InputTextError(f"token id(s) {shown} outside this vocabulary of {vocab_size} (ids 0..{vocab_size - 1}): "
                          "encode the text with this model's own tokenizer (the source and target sides may have "
                          "vocabularies of different sizes)")


class Embedding(nn.Module):
    """Token embedding (times sqrt(d_model)) plus positional encoding, then dropout (paper 3.4, 3.5)."""

    def __init__(self, vocab_size: int, cfg: ModelConfig, pad_id: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, cfg.d_model, padding_idx=pad_id)
        nn.init.normal_(self.tokens.weight, std=cfg.d_model**-0.5)
        with torch.no_grad():
            self.tokens.weight[pad_id].zero_()
        if cfg.positional == "sinusoidal":
            self.positional = SinusoidalPositionalEncoding(cfg.d_model, cfg.max_len, layout=cfg.sinusoidal_layout)
        else:
            self.positional = LearnedPositionalEncoding(cfg.d_model, cfg.max_len)
        self.scale = math.sqrt(cfg.d_model) if cfg.scale_embedding else 1.0
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, tokens: Tensor, offset: int = 0) -> Tensor:
        """Shapes: (B, T) ids -> (B, T, d_model)."""
        _check_ids(tokens)
        try:
            e = self.tokens(tokens)  # (B, T, d_model)
        except IndexError as error:  # CPU lookups raise here; a CUDA one fails in a device assert instead
            raise _out_of_range(tokens, self.tokens.num_embeddings) from error
        x = self.positional(e * self.scale, offset=offset)  # (B, T, d_model)
        if x.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
            # CPU bf16: the whole residual stream in bf16 (LayerNorm keeps its input's dtype there), not fp32 with
            # a cast before every matrix product; CUDA autocast keeps its own policy
            x = x.to(torch.get_autocast_dtype("cpu"))
        return self.dropout(x)


class Transformer(nn.Module):
    """Encoder-decoder Transformer. Build it with :func:`build_model`."""

    def __init__(self, cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int, pad_id: int = 0) -> None:
        super().__init__()
        self.cfg, self.pad_id = cfg, pad_id
        self.src_vocab_size, self.tgt_vocab_size = src_vocab_size, tgt_vocab_size
        self.tgt_embed = Embedding(tgt_vocab_size, cfg, pad_id)
        if cfg.tie_src_tgt:
            if src_vocab_size != tgt_vocab_size:
                raise ConfigError(
                    f"tie_src_tgt=True (as in the paper presets base and big) needs one joint vocabulary, got "
                    f"src_vocab_size={src_vocab_size} and tgt_vocab_size={tgt_vocab_size}: train a joint tokenizer "
                    "or set tie_src_tgt=False"
                )
            self.src_embed = Embedding(src_vocab_size, cfg, pad_id)
            self.src_embed.tokens = self.tgt_embed.tokens
        else:
            self.src_embed = Embedding(src_vocab_size, cfg, pad_id)
        self.encoder_layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_enc_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_dec_layers))
        # pre-LN stacks need a final LayerNorm (post-LN layers already end in one)
        self.encoder_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps) if cfg.norm_first else nn.Identity()
        self.decoder_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps) if cfg.norm_first else nn.Identity()
        # the pre-softmax projection; a bias only where a converted model has one (Marian's final_logits_bias)
        self.generator = nn.Linear(cfg.d_model, tgt_vocab_size, bias=cfg.output_bias)
        if cfg.output_bias:
            nn.init.zeros_(self.generator.bias)
        if cfg.tie_output:
            self.generator.weight = self.tgt_embed.tokens.weight
        else:
            nn.init.normal_(self.generator.weight, std=cfg.d_model**-0.5)

    # -- the two halves ------------------------------------------------------------------------------------------
    def src_mask(self, src: Tensor) -> Tensor:
        """Shapes: (B, S) -> (B, 1, 1, S) bool, True at real source tokens."""
        _check_ids(src)
        return padding_mask(src, self.pad_id)[:, None, None, :]

    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """Shapes: src (B, S) ids -> memory (B, S, d_model)."""
        src_mask = self.src_mask(src) if src_mask is None else src_mask
        x = self.src_embed(src)
        for layer in self.encoder_layers:
            x = layer(x, src_mask)
        return self.encoder_norm(x)

    def init_cache(self, memory: Tensor | None = None, src_mask: Tensor | None = None) -> DecoderCache:
        """An empty cache for step-by-step decoding (cross-attention K/V fill in at the first step)."""
        return DecoderCache([LayerCache() for _ in self.decoder_layers])

    def decode_hidden(self, tgt: Tensor, memory: Tensor, src_mask: Tensor | None,
                      cache: DecoderCache | None = None) -> Tensor:
        """The decoder's final states, before the pre-softmax projection (:attr:`generator`).

        Same arguments as :meth:`decode`; ``self.generator(decode_hidden(...))`` is ``decode(...)``. Training
        projects only the rows of real (non-padding) targets: see :func:`workbench.translation.objective.step_loss`.

        Shapes:
            tgt (B, T) ids, memory (B, S, d_model), src_mask (B, 1, 1, S) -> (B, T, d_model)
        """
        offset = cache.length if cache is not None else 0
        x = self.tgt_embed(tgt, offset=offset)
        for i, layer in enumerate(self.decoder_layers):
            x = layer(x, memory, src_mask, cache=cache.layers[i] if cache is not None else None)
        if cache is not None:
            cache.length += tgt.shape[1]
        return self.decoder_norm(x)

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor | None,
               cache: DecoderCache | None = None) -> Tensor:
        """Next-token logits for every target position.

        Without a cache, ``tgt`` is the whole prefix (causal masking inside). With a cache, ``tgt`` holds only
        the tokens not fed yet and positions continue from ``cache.length``.

        Shapes:
            tgt (B, T) ids, memory (B, S, d_model), src_mask (B, 1, 1, S) -> logits (B, T, V)
        """
        return self.generator(self.decode_hidden(tgt, memory, src_mask, cache))

    def forward(self, src: Tensor, tgt: Tensor, project: bool = True) -> Tensor:
        """Teacher forcing: logits, or (``project=False``) the decoder states before the projection.

        ``project=False`` lets the loss project only the real target rows (a compiled or DDP-wrapped model is
        called through ``forward``, so the option lives here rather than in a separate method).

        Shapes:
            src (B, S), tgt (B, T) shifted-right target -> logits (B, T, V), or (B, T, d_model) states
        """
        _check_ids(src), _check_ids(tgt)  # before their batch sizes are compared
        if src.shape[0] != tgt.shape[0] and 1 not in (src.shape[0], tgt.shape[0]):
            raise InputTextError(f"src holds {src.shape[0]} sentences and tgt {tgt.shape[0]}: give one target row per "
                                 "source row (a batch of 1 on either side is broadcast)")
        src_mask = self.src_mask(src)
        hidden = self.decode_hidden(tgt, self.encode(src, src_mask), src_mask)
        return self.generator(hidden) if project else hidden


def check_tied_vocabulary(cfg: ModelConfig, tokenizer: Any) -> None:
    """Refuse to tie the source and target embeddings (``cfg.tie_src_tgt``) over two vocabularies that are not one.

    Equal sizes are not enough: two vocabularies learned separately can both hold 8,000 pieces while id *i* is
    "▁Hund" on one side and "▁dog" on the other. Every id must name the same piece on both sides.

    Args:
        cfg: the model's config (nothing is checked when it does not tie source and target).
        tokenizer: anything with ``src_vocab_size``, ``tgt_vocab_size`` and ``id_to_token(i, side)``.

    Raises:
        ConfigError: the sizes differ, or an id names different pieces on the two sides (the first one is named).
    """
    if not cfg.tie_src_tgt:
        return
    src_size, tgt_size = tokenizer.src_vocab_size, tokenizer.tgt_vocab_size
    if src_size != tgt_size:
        raise ConfigError(f"tie_src_tgt=True needs one joint vocabulary, but the tokenizer has {src_size} source and "
                          f"{tgt_size} target ids: train a joint tokenizer or set tie_src_tgt=False")
    for i in range(src_size):
        src_piece, tgt_piece = tokenizer.id_to_token(i, "src"), tokenizer.id_to_token(i, "tgt")
        if src_piece != tgt_piece:
            raise ConfigError(f"tie_src_tgt=True needs one joint vocabulary, but id {i} is {src_piece!r} in the source "
                              f"vocabulary and {tgt_piece!r} in the target one (same size, different vocabularies): "
                              "train a joint tokenizer (joint=True) or set tie_src_tgt=False")


def build_model(cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int, pad_id: int = 0,
                tokenizer: Any = None) -> Transformer:
    """The model factory: a :class:`Transformer` with Xavier-initialised projections.

    Args:
        tokenizer: the tokenizer the model will read (optional): its sizes must be the ones given, and a model that
            ties source and target embeddings is refused unless its two sides are one vocabulary
            (:func:`check_tied_vocabulary`). Without it only the sizes can be checked.
    """
    for name, value in (("src_vocab_size", src_vocab_size), ("tgt_vocab_size", tgt_vocab_size)):
        if not isinstance(value, int) or value <= pad_id:
            raise ValueError(f"invalid {name}={value!r}: use the tokenizer's vocabulary size (> pad_id={pad_id})")
    if tokenizer is not None:
        sizes = (tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
        if sizes != (src_vocab_size, tgt_vocab_size):
            raise ConfigError(f"the tokenizer has {sizes[0]} source and {sizes[1]} target ids, but the model was asked "
                              f"for {src_vocab_size} and {tgt_vocab_size}: pass the tokenizer's sizes")
        check_tied_vocabulary(cfg, tokenizer)
    model = Transformer(cfg, src_vocab_size, tgt_vocab_size, pad_id)
    for name, p in model.named_parameters():
        if p.dim() > 1 and "tokens" not in name and "embedding" not in name and "generator" not in name:
            nn.init.xavier_uniform_(p)
    return model
