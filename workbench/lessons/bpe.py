"""Byte-pair encoding by hand, for lesson 08: learn merges the way the ``tokenizers`` library's BPE trainer does,
apply them to a word, and measure what a vocabulary size does to sequence lengths and padding.

:func:`learn_merges` follows Sennrich et al. (2016): start from characters, count every adjacent pair of symbols
(weighted by word frequency), merge the most frequent pair everywhere, repeat. Words come from the workbench
tokenizer's pre-processing (:class:`~workbench.translation.tokenizer.SubwordTokenizer`): NFKC, whitespace runs
collapsed, and a ``▁`` before every word (the Metaspace pre-tokenizer). Ties go as in ``tokenizers``' trainer:
to the pair whose symbols have the smaller ids, the specials first, then the characters in code-point order, then
merged symbols in the order they were made. So the merge list equals the library's for the same text and size.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from workbench.translation.tokenizer import SPECIALS

__all__ = ["BPEMerges", "apply_merges", "library_merges", "learn_merges", "padding_stats", "pre_tokenize"]

METASPACE = "▁"


def pre_tokenize(text: str) -> list[str]:
    """The words BPE sees: NFKC-normalised, split on whitespace, each starting with ``▁``."""
    text = re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text)).strip()
    return [METASPACE + w for w in text.split(" ")] if text else []


@dataclass(frozen=True)
class BPEMerges:
    """What :func:`learn_merges` learned: the merges in order and the vocabulary (specials, alphabet, merged symbols)."""

    merges: tuple[tuple[str, str], ...]
    vocab: tuple[str, ...]
    counts: tuple[int, ...]  # how often each merge's pair occurred when it was chosen


def learn_merges(texts: Iterable[str], vocab_size: int, min_frequency: int = 2,
                 specials: Sequence[str] = SPECIALS) -> BPEMerges:
    """Learn BPE merges until the vocabulary has ``vocab_size`` symbols or no pair occurs ``min_frequency`` times.

    Plain Python, written to be read: every round recounts all pairs (the library updates counts incrementally,
    which gives the same merges much faster).
    """
    if vocab_size < 1 or min_frequency < 1:
        raise ValueError(f"vocab_size={vocab_size} and min_frequency={min_frequency} must be at least 1")
    words = Counter(w for text in texts for w in pre_tokenize(text))
    alphabet = sorted({c for w in words for c in w}, key=ord)
    ids = {s: i for i, s in enumerate([*specials, *alphabet])}
    splits = {w: list(w) for w in words}
    merges: list[tuple[str, str]] = []
    counts: list[int] = []
    while len(ids) < vocab_size:
        pairs: Counter[tuple[str, str]] = Counter()
        for w, freq in words.items():
            symbols = splits[w]
            for a, b in pairwise(symbols):
                pairs[(a, b)] += freq
        if not pairs:
            break
        best = max(pairs, key=lambda p: (pairs[p], -ids[p[0]], -ids[p[1]]))  # most frequent; ties: smaller ids
        if pairs[best] < min_frequency:
            break
        merged = best[0] + best[1]
        ids.setdefault(merged, len(ids))
        merges.append(best)
        counts.append(pairs[best])
        for w, symbols in splits.items():
            if len(symbols) < 2:
                continue
            out, i = [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == best:
                    out.append(merged)
                    i += 2
                else:
                    out.append(symbols[i])
                    i += 1
            splits[w] = out
    return BPEMerges(tuple(merges), tuple(sorted(ids, key=ids.get)), tuple(counts))


def apply_merges(word: str, merges: Sequence[tuple[str, str]]) -> list[str]:
    """Split one pre-tokenized word (``▁`` included) into pieces by applying the merges in the order learned:
    at each round the adjacent pair that was learned earliest is merged."""
    rank = {pair: r for r, pair in enumerate(merges)}
    symbols = list(word)
    while len(symbols) > 1:
        ranked = [(rank.get((a, b), len(rank)), i) for i, (a, b) in enumerate(pairwise(symbols))]
        best, i = min(ranked)
        if best == len(rank):
            break
        symbols[i: i + 2] = [symbols[i] + symbols[i + 1]]
    return symbols


def library_merges(tokenizer: object) -> list[tuple[str, str]]:
    """The merges of a ``tokenizers`` BPE model (a ``tokenizers.Tokenizer``), in order."""
    import json

    merges = json.loads(tokenizer.to_str())["model"]["merges"]  # type: ignore[attr-defined]
    return [tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)) for m in merges]


def padding_stats(batches: Sequence[Sequence[int]], *lengths: Sequence[int]) -> dict[str, float]:
    """Padding of a batching: on each side (source, target, ...) a batch is padded to its longest member.

    Args:
        batches: example indices per batch.
        lengths: one sequence of per-example lengths per side.

    Returns ``{"real", "slots", "padding_fraction", "batches"}``: real tokens, padded slots (batch size x longest
    length, summed over batches and sides), the share of slots that are padding, and the number of batches.
    """
    if not lengths:
        raise ValueError("give the lengths of at least one side (source lengths, target lengths, ...)")
    real = sum(side[i] for side in lengths for b in batches for i in b)
    slots = sum(len(b) * max(side[i] for i in b) for side in lengths for b in batches if b)
    return {"real": float(real), "slots": float(slots), "padding_fraction": 1 - real / slots if slots else 0.0,
            "batches": float(len(batches))}
