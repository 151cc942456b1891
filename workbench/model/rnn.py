"""The recurrent seq2seq baseline the study notes start from: a GRU encoder-decoder with dot-product attention.

At decoder step t with state s_t and encoder states h_1..h_S:

    e_i     = s_t . h_i                     (dot-product score)
    alpha   = softmax(e)                     (attention distribution over source positions)
    a_t     = sum_i alpha_i h_i              (context vector)
    o_t     = tanh(W_c [a_t; s_t])           (concatenate context and state)
    P(y_t)  = softmax(W_o o_t)

With ``attention=False`` the context is the encoder's last state for every step: the fixed-size bottleneck
that attention was invented to remove. The interface matches :class:`~workbench.model.Transformer`
(``encode`` / ``decode`` / ``init_cache`` / ``src_mask``), so decoding, training and capture work on both.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from workbench.errors import ConfigError
from workbench.model.config import check_field_types
from workbench.model.hook_points import HookPoint, tap
from workbench.model.masks import padding_mask


@dataclass(frozen=True)
class RNNConfig:
    """Sizes of the recurrent baseline."""

    d_model: int = 256  # embedding width and GRU hidden size (encoder and decoder states share it)
    n_layers: int = 1  # stacked GRU layers in encoder and decoder
    dropout: float = 0.1  # dropout on embeddings and on the combined output
    attention: bool = True  # dot-product attention (True) or the fixed last-state context (False)
    max_len: int = 256  # longest sequence accepted (kept for parity with ModelConfig)

    def __post_init__(self) -> None:
        check_field_types(self)
        for name in ("d_model", "n_layers", "max_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ConfigError(f"invalid {name}={value!r}: use a positive integer")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"invalid dropout={self.dropout!r}: use a probability in [0, 1)")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class DotProductAttention(nn.Module):
    """Luong's dot-product attention of decoder states over encoder states (one head)."""

    def __init__(self) -> None:
        super().__init__()
        self.hook_pattern = HookPoint()
        self.hook_scores = HookPoint()
        self.hook_q, self.hook_k, self.hook_v = HookPoint(), HookPoint(), HookPoint()

    def forward(self, states: Tensor, memory: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """Shapes: states (B, T, D), memory (B, S, D), mask (B, S) -> context (B, T, D), weights (B, T, S)."""
        # one "head": queries are the decoder states, keys and values the encoder states
        if self.hook_q.active():
            states = tap(self.hook_q, states.unsqueeze(1)).squeeze(1)  # (B, 1, T, D) -> (B, T, D)
        keys, values = memory, memory
        if self.hook_k.active():
            keys = tap(self.hook_k, memory.unsqueeze(1)).squeeze(1)  # (B, 1, S, D) -> (B, S, D)
        if self.hook_v.active():
            values = tap(self.hook_v, memory.unsqueeze(1)).squeeze(1)  # (B, 1, S, D) -> (B, S, D)
        scores = states @ keys.transpose(1, 2)  # (B, T, S): e_i = s_t . h_i
        if self.hook_scores.active():
            scores = tap(self.hook_scores, scores.unsqueeze(1)).squeeze(1)
        scores = scores.masked_fill(~mask[:, None, :], float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        weights = weights.masked_fill(~mask.any(-1)[:, None, None], 0.0)  # empty source: zeros, not NaN
        if self.hook_pattern.active():
            tap(self.hook_pattern, weights.unsqueeze(1))  # (B, 1, T, S): one "head"
        return weights @ values, weights  # (B, T, D)


@dataclass
class RNNCache:
    """Decoder hidden state between steps."""

    hidden: Tensor | None = None  # (n_layers, B, D)
    length: int = 0

    def reorder(self, index: Tensor) -> None:
        if self.hidden is not None:
            self.hidden = self.hidden.index_select(1, index)


class RNNSeq2Seq(nn.Module):
    """GRU encoder-decoder with optional dot-product attention. Build it with :func:`build_rnn`."""

    def __init__(self, cfg: RNNConfig, src_vocab_size: int, tgt_vocab_size: int, pad_id: int = 0) -> None:
        super().__init__()
        self.cfg, self.pad_id = cfg, pad_id
        self.src_vocab_size, self.tgt_vocab_size = src_vocab_size, tgt_vocab_size
        D = cfg.d_model
        self.src_embed = nn.Embedding(src_vocab_size, D, padding_idx=pad_id)
        self.tgt_embed = nn.Embedding(tgt_vocab_size, D, padding_idx=pad_id)
        gru_dropout = cfg.dropout if cfg.n_layers > 1 else 0.0
        self.encoder = nn.GRU(D, D, cfg.n_layers, batch_first=True, dropout=gru_dropout)
        self.decoder = nn.GRU(D, D, cfg.n_layers, batch_first=True, dropout=gru_dropout)
        self.bridge = nn.Linear(D, D)  # initial decoder state from the encoder's last state
        self.attention = DotProductAttention()
        self.combine = nn.Linear(2 * D, D)  # W_c [a_t; s_t]
        self.generator = nn.Linear(D, tgt_vocab_size)
        self.dropout = nn.Dropout(cfg.dropout)

    def src_mask(self, src: Tensor) -> Tensor:
        """Shapes: (B, S) -> (B, 1, 1, S) bool (same layout as the Transformer's)."""
        return padding_mask(src, self.pad_id)[:, None, None, :]

    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """Shapes: src (B, S) -> memory (B, S, D), zeros at padding."""
        mask = (self.src_mask(src) if src_mask is None else src_mask).reshape(src.shape)  # (B, S)
        lengths = mask.sum(-1).clamp(min=1).cpu()
        x = self.dropout(self.src_embed(src))
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.encoder(packed)
        memory, _ = pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])
        return memory

    def _last_state(self, memory: Tensor, mask: Tensor) -> Tensor:
        last = (mask.sum(-1) - 1).clamp(min=0)  # (B,)
        return memory[torch.arange(memory.shape[0], device=memory.device), last]  # (B, D)

    def init_cache(self, memory: Tensor | None = None, src_mask: Tensor | None = None) -> RNNCache:
        return RNNCache()

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor | None, cache: RNNCache | None = None) -> Tensor:
        """Shapes: tgt (B, T), memory (B, S, D), src_mask (B, 1, 1, S) -> logits (B, T, V)."""
        B, S = memory.shape[0], memory.shape[1]
        mask = src_mask.reshape(B, S) if src_mask is not None else torch.ones(B, S, dtype=torch.bool, device=memory.device)
        hidden = cache.hidden if cache is not None else None
        if hidden is None:
            h0 = torch.tanh(self.bridge(self._last_state(memory, mask)))  # (B, D)
            hidden = h0.unsqueeze(0).repeat(self.cfg.n_layers, 1, 1).contiguous()  # (n_layers, B, D)
        states, hidden = self.decoder(self.dropout(self.tgt_embed(tgt)), hidden)  # (B, T, D)
        if cache is not None:
            cache.hidden = hidden
            cache.length += tgt.shape[1]
        if self.cfg.attention:
            context, _ = self.attention(states, memory, mask)  # (B, T, D)
        else:
            context = self._last_state(memory, mask).unsqueeze(1).expand_as(states)  # (B, T, D)
        combined = torch.tanh(self.combine(torch.cat([context, states], dim=-1)))  # (B, T, D)
        return self.generator(self.dropout(combined))

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        src_mask = self.src_mask(src)
        return self.decode(tgt, self.encode(src, src_mask), src_mask)


def build_rnn(cfg: RNNConfig, src_vocab_size: int, tgt_vocab_size: int, pad_id: int = 0) -> RNNSeq2Seq:
    """The recurrent baseline's factory."""
    return RNNSeq2Seq(cfg, src_vocab_size, tgt_vocab_size, pad_id)
