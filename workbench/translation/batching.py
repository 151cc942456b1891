"""Batches: shifted targets, masks, token counts, and length-bucketed token-budget batching."""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

log = logging.getLogger(__name__)


@dataclass
class Batch:
    """One training batch. ``tgt_in`` is the target shifted right (starts with bos), ``tgt_out`` the next tokens.

    Shapes:
        src (B, S), tgt_in (B, T), tgt_out (B, T)
    """

    src: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    pad_id: int = 0

    @property
    def src_mask(self) -> Tensor:
        """(B, 1, 1, S) True at real source tokens."""
        return (self.src != self.pad_id)[:, None, None, :]

    @property
    def n_src_tokens(self) -> int:
        return int((self.src != self.pad_id).sum())

    @property
    def n_tgt_tokens(self) -> int:
        """Tokens the loss is computed on (non-padding targets)."""
        return int((self.tgt_out != self.pad_id).sum())

    def __len__(self) -> int:
        return self.src.shape[0]

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        return Batch(
            self.src.to(device, non_blocking=non_blocking),
            self.tgt_in.to(device, non_blocking=non_blocking),
            self.tgt_out.to(device, non_blocking=non_blocking),
            self.pad_id,
        )

    def pin_memory(self) -> Batch:
        return Batch(self.src.pin_memory(), self.tgt_in.pin_memory(), self.tgt_out.pin_memory(), self.pad_id)


def padded_length(n: int, multiple: int = 1, limit: int | None = None) -> int:
    """``n`` rounded up to a multiple of ``multiple`` (not beyond ``limit``, never below ``n``).

    Rounding the padded batch lengths up (e.g. to a multiple of 8) leaves a compiled model a few distinct shapes
    to specialise for, instead of one per batch; masks keep the extra padding out of attention and the loss.
    """
    if multiple < 1:
        raise ValueError(f"invalid multiple={multiple!r}: use 1 (no rounding) or more, e.g. 8")
    rounded = -(-n // multiple) * multiple
    return max(n, rounded if limit is None else min(rounded, limit))


def pad_to_tensor(seqs: Sequence[Sequence[int]], pad_id: int, width: int | None = None) -> Tensor:
    """Right-pad id lists into a (B, width) long tensor (``width`` defaults to the longest list)."""
    longest = max((len(s) for s in seqs), default=0)
    width = max(longest if width is None else max(width, longest), 1)
    out = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        if s:
            out[i, : len(s)] = torch.as_tensor(s, dtype=torch.long)
    return out


def make_batch(
    src_ids: Sequence[Sequence[int]],
    tgt_ids: Sequence[Sequence[int]],
    pad_id: int = 0,
    pad_multiple: int = 1,
    max_len: int | None = None,
) -> Batch:
    """Build a :class:`Batch` from id lists; targets are ``[bos, y1 .. yn, eos]`` as the tokenizer encodes them.

    ``pad_multiple > 1`` pads the source length S and the shifted target length T up to a multiple of it (not
    beyond ``max_len``), so batches fall into a few shape buckets.
    """
    S = padded_length(max((len(s) for s in src_ids), default=0), pad_multiple, max_len)
    T = padded_length(max((len(t) for t in tgt_ids), default=1) - 1, pad_multiple, max_len)
    tgt = pad_to_tensor(tgt_ids, pad_id, T + 1)  # (B, T + 1)
    return Batch(pad_to_tensor(src_ids, pad_id, S), tgt[:, :-1], tgt[:, 1:], pad_id)


def token_batches(
    src_lens: Sequence[int],
    tgt_lens: Sequence[int],
    max_tokens: int,
    shuffle: bool = True,
    seed: int = 0,
    epoch: int = 0,
    world_size: int = 1,
    rank: int = 0,
    pad_multiple: int = 1,
) -> list[list[int]]:
    """Group example indices into batches of similar length under a token budget.

    The cost of a batch is its padded size, ``B * (max src len + max tgt len)``. Examples are sorted by length
    (ties broken at random), packed greedily, then the batch order is shuffled with a generator seeded from
    ``(seed, epoch)``, so every epoch differs but runs repeat exactly. With ``world_size > 1``, batches are dealt
    round-robin and trimmed so every rank gets the same number of batches and no batch goes to two ranks.
    ``pad_multiple`` counts the cost on lengths rounded up as :func:`make_batch` will pad them.
    """
    n = len(src_lens)
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    noise = torch.rand(n, generator=g) if shuffle else torch.zeros(n)
    order = sorted(range(n), key=lambda i: (src_lens[i] + tgt_lens[i], tgt_lens[i], float(noise[i])))
    batches: list[list[int]] = []
    current: list[int] = []
    max_s = max_t = 0
    for i in order:
        s, t = max(max_s, src_lens[i]), max(max_t, tgt_lens[i])
        if current and (len(current) + 1) * (padded_length(s, pad_multiple) + padded_length(t, pad_multiple)) > max_tokens:
            batches.append(current)
            current, s, t = [], src_lens[i], tgt_lens[i]
        current.append(i)
        max_s, max_t = s, t
    if current:
        batches.append(current)
    if shuffle:
        perm = torch.randperm(len(batches), generator=g).tolist()
        batches = [batches[j] for j in perm]
    if world_size > 1:
        usable = len(batches) - len(batches) % world_size
        if usable == 0:
            raise ValueError(f"{len(batches)} batches cannot be shared by {world_size} ranks: use more data or a smaller max_tokens")
        batches = batches[rank:usable:world_size]
    return batches


_ENCODED: weakref.WeakKeyDictionary[Any, list[tuple[Any, ...]]] = weakref.WeakKeyDictionary()
ENCODED_PER_TOKENIZER = 4  # encoded datasets remembered per tokenizer (a lesson's train and val splits, and a few more)


def encode_pairs(tokenizer: Any, pairs: Sequence[tuple[str, str]], max_len: int
                 ) -> tuple[list[list[int]], list[list[int]]]:
    """Source and target ids of ``pairs`` (``encode_src`` / ``encode_tgt``), without the pairs of which either side
    is longer than ``max_len`` tokens (logged).

    The last few datasets each tokenizer encoded are remembered, so fitting several models on the same data (a
    lesson's table of variants) encodes it once. A remembered result is reused only for equal pairs, the same
    ``max_len`` and the same vocabulary sizes; every call returns new lists, so a caller that edits them changes
    nothing remembered.
    """
    vocab = (getattr(tokenizer, "src_vocab_size", None), getattr(tokenizer, "tgt_vocab_size", None))  # tokens added
    key = (tuple(map(tuple, pairs)), max_len, vocab)
    try:
        remembered = _ENCODED.setdefault(tokenizer, [])
    except TypeError:  # a tokenizer that cannot be weakly referenced or hashed: encode every time
        remembered = []
    found = [(src, tgt) for old_key, src, tgt in remembered if old_key == key]
    if found:
        src_kept, tgt_kept = found[0]
    else:
        src = tokenizer.encode_src([p[0] for p in pairs])
        tgt = tokenizer.encode_tgt([p[1] for p in pairs])
        keep = [i for i in range(len(pairs)) if len(src[i]) <= max_len and len(tgt[i]) - 1 <= max_len]
        src_kept, tgt_kept = tuple(tuple(src[i]) for i in keep), tuple(tuple(tgt[i]) for i in keep)
        remembered.append((key, src_kept, tgt_kept))
    if len(src_kept) < len(pairs):
        log.info("skipping %d of %d pairs longer than max_len=%d tokens", len(pairs) - len(src_kept), len(pairs), max_len)
    del remembered[:-ENCODED_PER_TOKENIZER]
    return [list(ids) for ids in src_kept], [list(ids) for ids in tgt_kept]
