"""Word alignment: IBM Model 1 (Brown et al., 1993) as the reference, and how well attention agrees with it.

Cross-attention is often read as a soft word alignment. To check that reading, this module trains the classic
IBM Model 1 aligner by EM, pools subword attention to words, and counts how often a head's strongest source word
is the aligner's.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

import torch
from torch import Tensor


def ibm1(pairs: Sequence[tuple[str, str]], iterations: int = 5) -> dict[tuple[str, str], float]:
    """Translation probabilities t(target word | source word) by EM (Brown et al., 1993), with a NULL source word.

    A small, classic word aligner: used as the reference alignment that cross-attention is compared against.
    """
    corpus = [(["<null>", *s.lower().split()], t.lower().split()) for s, t in pairs]
    t_prob: dict[tuple[str, str], float] = defaultdict(lambda: 1.0)
    for _ in range(iterations):
        count: dict[tuple[str, str], float] = defaultdict(float)
        total: dict[str, float] = defaultdict(float)
        for src, tgt in corpus:
            for e in tgt:
                z = sum(t_prob[(f, e)] for f in src)
                for f in src:
                    c = t_prob[(f, e)] / z
                    count[(f, e)] += c
                    total[f] += c
        t_prob = defaultdict(float, {(f, e): c / total[f] for (f, e), c in count.items()})
    return dict(t_prob)


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
