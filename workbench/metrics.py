"""Translation metrics through sacreBLEU (never hand-rolled), plus perplexity and accuracies.

* :func:`corpus_bleu`: sacreBLEU on detokenized, cased text — the number to report, with its signature.
* :func:`tokenized_bleu`: lower-cased BLEU with 13a tokenization, as older tutorials report it. It is a different,
  usually higher, number: label it as such when comparing.
* :func:`chrf`: character n-gram F-score.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import sacrebleu
from torch import Tensor

from .errors import InputTextError


@dataclass(frozen=True)
class BleuResult:
    """A corpus-level score with everything needed to report it honestly."""

    score: float  # corpus score, 0..100
    signature: str  # sacreBLEU's signature: how the number was computed
    precisions: tuple[float, ...] = ()  # n-gram precisions (BLEU only)
    bp: float = 1.0  # brevity penalty (BLEU only)
    sys_len: int = 0  # hypothesis length in tokens (BLEU only)
    ref_len: int = 0  # reference length in tokens (BLEU only)


def _check(hyps: Sequence[str], refs: Sequence[str]) -> None:
    if isinstance(hyps, str) or isinstance(refs, str):
        raise InputTextError("pass lists of sentences, not single strings")
    if len(hyps) != len(refs):
        raise InputTextError(f"{len(hyps)} hypotheses but {len(refs)} references: they must be aligned one to one")
    if not hyps:
        raise InputTextError("no sentences to score: pass at least one hypothesis and reference")


def _bleu(hyps: Sequence[str], refs: Sequence[str], **kwargs: object) -> BleuResult:
    _check(hyps, refs)
    metric = sacrebleu.metrics.BLEU(**kwargs)
    res = metric.corpus_score(list(hyps), [list(refs)])
    return BleuResult(
        score=res.score,
        signature=str(metric.get_signature()),
        precisions=tuple(res.precisions),
        bp=res.bp,
        sys_len=res.sys_len,
        ref_len=res.ref_len,
    )


def corpus_bleu(hyps: Sequence[str], refs: Sequence[str]) -> BleuResult:
    """sacreBLEU (13a tokenization inside, cased) on detokenized text: the standard, comparable number."""
    return _bleu(hyps, refs)


def tokenized_bleu(hyps: Sequence[str], refs: Sequence[str]) -> BleuResult:
    """Lower-cased BLEU, as many tutorials report it (not comparable with :func:`corpus_bleu`)."""
    return _bleu(hyps, refs, lowercase=True)


def chrf(hyps: Sequence[str], refs: Sequence[str]) -> BleuResult:
    """chrF (character n-gram F-score) via sacreBLEU."""
    _check(hyps, refs)
    metric = sacrebleu.metrics.CHRF()
    res = metric.corpus_score(list(hyps), [list(refs)])
    return BleuResult(score=res.score, signature=str(metric.get_signature()))


def sentence_bleu(hyp: str, ref: str) -> float:
    """Smoothed sentence-level BLEU (for per-sentence plots only; report corpus BLEU)."""
    return sacrebleu.sentence_bleu(hyp, [ref]).score


def perplexity(mean_nll: float) -> float:
    """exp(mean negative log-likelihood per token), capped to stay finite."""
    return math.exp(min(mean_nll, 50.0))


def exact_match(hyps: Sequence[str], refs: Sequence[str]) -> float:
    """Fraction of hypotheses identical to their reference (after stripping)."""
    _check(hyps, refs)
    return sum(h.strip() == r.strip() for h, r in zip(hyps, refs, strict=True)) / len(hyps)


def token_accuracy(logits: Tensor, targets: Tensor, pad_id: int) -> float:
    """Share of non-padding positions where the arg-max prediction is the target.

    Shapes:
        logits (B, T, V), targets (B, T)
    """
    keep = targets != pad_id
    if not bool(keep.any()):
        return float("nan")
    correct = (logits.argmax(-1) == targets) & keep
    return float(correct.sum() / keep.sum())


def bleu_by_length(
    sources: Sequence[str], hyps: Sequence[str], refs: Sequence[str], bins: Sequence[int]
) -> list[tuple[str, int, float]]:
    """Corpus BLEU per source-length bucket (words): [(label, n_sentences, bleu)], empty buckets skipped."""
    _check(hyps, refs)
    out = []
    edges = list(bins)
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        idx = [i for i, s in enumerate(sources) if lo <= len(s.split()) < hi]
        if idx:
            out.append((f"{lo}-{hi - 1}", len(idx), corpus_bleu([hyps[i] for i in idx], [refs[i] for i in idx]).score))
    return out


__all__ = [
    "BleuResult",
    "bleu_by_length",
    "chrf",
    "corpus_bleu",
    "exact_match",
    "perplexity",
    "sentence_bleu",
    "token_accuracy",
    "tokenized_bleu",
]
