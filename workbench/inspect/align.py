"""Word alignment: IBM Model 1 (Brown et al., 1993) as the reference, and how well attention agrees with it.

Cross-attention is often read as a soft word alignment. To check that reading, this module trains the classic
IBM Model 1 aligner by EM, pools subword attention to words, and counts how often a head's strongest source word
is the aligner's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor


def ibm1(pairs: Sequence[tuple[str, str]], iterations: int = 5) -> dict[tuple[str, str], float]:
    """Translation probabilities t(target word | source word) by EM (Brown et al., 1993), with a NULL source word.

    A small, classic word aligner: used as the reference alignment that cross-attention is compared against. Every
    (source position, target position) link of the corpus is one entry of flat arrays, so an EM iteration is three
    weighted counts (``numpy.bincount``) instead of a Python loop over the links.
    """
    src_ids: dict[str, int] = {}
    tgt_ids: dict[str, int] = {}
    f_links: list[int] = []  # source word of each link
    e_links: list[int] = []  # target word of each link
    groups: list[int] = []  # which target position of the corpus each link belongs to
    n_groups = 0
    for s, t in pairs:
        fs = [src_ids.setdefault(f, len(src_ids)) for f in ("<null>", *s.lower().split())]
        for e in t.lower().split():
            f_links += fs
            e_links += [tgt_ids.setdefault(e, len(tgt_ids))] * len(fs)
            groups += [n_groups] * len(fs)
            n_groups += 1
    if iterations < 1 or not f_links:
        return {}
    n_tgt = len(tgt_ids)
    word_pair, link_pair = np.unique(np.asarray(f_links, dtype=np.int64) * n_tgt + np.asarray(e_links), return_inverse=True)
    pair_f = word_pair // n_tgt  # source word of each distinct (f, e)
    group = np.asarray(groups)
    t_prob = np.ones(len(word_pair))  # uniform start: every t(e | f) equal
    for _ in range(iterations):
        t_link = t_prob[link_pair]
        z = np.bincount(group, weights=t_link, minlength=n_groups)  # per target position: sum over its source words
        count = np.bincount(link_pair, weights=t_link / z[group], minlength=len(word_pair))  # expected counts c(f, e)
        total = np.bincount(pair_f, weights=count, minlength=len(src_ids))  # per source word
        t_prob = count / total[pair_f]
    src_words, tgt_words = list(src_ids), list(tgt_ids)
    return {(src_words[f], tgt_words[e]): float(p)
            for f, e, p in zip(pair_f.tolist(), (word_pair % n_tgt).tolist(), t_prob.tolist(), strict=True)}


def ibm1_align(t_prob: dict[tuple[str, str], float], source: str, target: str) -> list[int | None]:
    """For each target word, the index of its most probable source word (None for NULL)."""
    src = source.lower().split()
    out: list[int | None] = []
    for e in target.lower().split():
        scores = [t_prob.get((f, e), 0.0) for f in src]
        null = t_prob.get(("<null>", e), 0.0)
        best = max(range(len(src)), key=lambda i: scores[i]) if src else None
        out.append(None if best is None or null > scores[best] else best)
    return out


def word_spans(tokens: Sequence[str]) -> list[int]:
    """Word index of each Metaspace subword token (``▁`` starts a word); specials get -1."""
    words, current = [], -1
    for t in tokens:
        if t.startswith("<") and t.endswith(">"):
            words.append(-1)
            continue
        if t.startswith("▁") or current < 0:
            current += 1
        words.append(current)
    return words


def word_attention(weights: Tensor, q_words: Sequence[int], k_words: Sequence[int]) -> Tensor:
    """Pool subword attention to words: sum over key subwords, mean over query subwords.

    Shapes:
        weights (Tq, Tk) -> (n_query_words, n_key_words)
    """
    nq, nk = max(q_words) + 1, max(k_words) + 1
    out = torch.zeros(nq, nk)
    hits = torch.zeros(nq, 1)
    for i, qw in enumerate(q_words):
        if qw < 0:
            continue
        hits[qw] += 1
        for j, kw in enumerate(k_words):
            if kw >= 0:
                out[qw, kw] += float(weights[i, j])
    return out / hits.clamp_min(1)


def alignment_agreement(predicted: Sequence[int | None], reference: Sequence[int | None]) -> float:
    """Share of target words (with a non-NULL reference link) whose predicted source word matches."""
    pairs = [(p, r) for p, r in zip(predicted, reference, strict=False) if r is not None]
    return sum(p == r for p, r in pairs) / len(pairs) if pairs else math.nan
