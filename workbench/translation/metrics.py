"""Translation metrics through sacreBLEU (never hand-rolled), plus perplexity and accuracies.

* :func:`corpus_bleu`: sacreBLEU on detokenized, cased text — the number to report, with its signature.
* :func:`tokenized_bleu`: lower-cased BLEU with 13a tokenization, as older tutorials report it. It is a different,
  usually higher, number: its ``label`` says so; never put it in the same column as :func:`corpus_bleu`.
* :func:`chrf`: character n-gram F-score.

Every score is a :class:`BleuResult` carrying its sacreBLEU signature; ``str(result)`` prints both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import sacrebleu
from torch import Tensor

from workbench.errors import InputTextError


@dataclass(frozen=True)
class BleuResult:
    """A corpus-level score with everything needed to report it honestly."""

    score: float  # corpus score, 0..100
    signature: str  # sacreBLEU's signature: how the number was computed
    precisions: tuple[float, ...] = ()  # n-gram precisions (BLEU only)
    bp: float = 1.0  # brevity penalty (BLEU only)
    sys_len: int = 0  # hypothesis length in tokens (BLEU only)
    ref_len: int = 0  # reference length in tokens (BLEU only)
    label: str = "sacreBLEU"  # what the number is, for tables and plots

    def __str__(self) -> str:
        return f"{self.label} = {self.score:.2f} ({self.signature})"


def _check(hyps: Sequence[str], refs: Sequence[str]) -> tuple[list[str], list[str]]:
    if isinstance(hyps, str) or isinstance(refs, str):
        raise InputTextError("pass lists of sentences, not single strings: wrap each in a list")
    hyps, refs = list(hyps), list(refs)
    if len(hyps) != len(refs):
        raise InputTextError(
            f"{len(hyps)} hypotheses but {len(refs)} references: they must be aligned one to one "
            "(one hypothesis per reference, in the same order)"
        )
    if not hyps:
        raise InputTextError("no sentences to score: pass at least one hypothesis and reference")
    for name, texts in (("hypothesis", hyps), ("reference", refs)):
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise InputTextError(f"{name} {i} is a {type(t).__name__} ({t!r:.40}), not a str: pass detokenized text")
    return hyps, refs


def _bleu(hyps: Sequence[str], refs: Sequence[str], label: str, **kwargs: object) -> BleuResult:
    hyps, refs = _check(hyps, refs)
    metric = sacrebleu.metrics.BLEU(**kwargs)
    res = metric.corpus_score(hyps, [refs])
    return BleuResult(
        score=res.score,
        signature=str(metric.get_signature()),
        precisions=tuple(res.precisions),
        bp=res.bp,
        sys_len=res.sys_len,
        ref_len=res.ref_len,
        label=label,
    )


def corpus_bleu(hyps: Sequence[str], refs: Sequence[str]) -> BleuResult:
    """sacreBLEU on detokenized, cased text (13a tokenization inside): the standard, comparable number.

    Args:
        hyps: detokenized hypotheses, e.g. the output of ``tokenizer.decode_tgt``.
        refs: the raw reference sentences, aligned with ``hyps``.

    Raises:
        InputTextError: different lengths, no sentences, or non-string items.
    """
    return _bleu(hyps, refs, "sacreBLEU")


def tokenized_bleu(hyps: Sequence[str], refs: Sequence[str]) -> BleuResult:
    """Lower-cased, 13a-tokenized BLEU, as many tutorials report it.

    A different, usually higher number than :func:`corpus_bleu` (case errors are forgiven): its label says
    "tokenized lower-cased BLEU" and its signature ``case:lc``. Do not compare it with published sacreBLEU.
    """
    return _bleu(hyps, refs, "tokenized lower-cased BLEU (not sacreBLEU)", tokenize="13a", lowercase=True)


def chrf(hyps: Sequence[str], refs: Sequence[str]) -> BleuResult:
    """chrF (character n-gram F-score, sacreBLEU defaults) on detokenized text; only ``score`` and ``signature``."""
    hyps, refs = _check(hyps, refs)
    metric = sacrebleu.metrics.CHRF()
    res = metric.corpus_score(hyps, [refs])
    return BleuResult(score=res.score, signature=str(metric.get_signature()), label="chrF")


def sentence_bleu(hyp: str, ref: str) -> float:
    """Smoothed sentence-level BLEU (for per-sentence plots only; report corpus BLEU)."""
    return sacrebleu.sentence_bleu(hyp, [ref]).score


def perplexity(mean_nll: float) -> float:
    """exp(mean negative log-likelihood per token, in nats).

    Capped at exp(50) so that a diverged run still gives a finite, JSON-friendly number; NaN stays NaN.
    """
    mean_nll = float(mean_nll)
    if math.isnan(mean_nll):
        return float("nan")
    return math.exp(min(mean_nll, 50.0))


def exact_match(hyps: Sequence[str], refs: Sequence[str]) -> float:
    """Fraction of hypotheses identical to their reference (after stripping), in [0, 1]."""
    hyps, refs = _check(hyps, refs)
    return sum(h.strip() == r.strip() for h, r in zip(hyps, refs, strict=True)) / len(hyps)


def token_accuracy(logits: Tensor, targets: Tensor, pad_id: int) -> float:
    """Share of non-padding positions where the arg-max prediction is the target (NaN if all are padding).

    Shapes:
        logits: (B, T, V); targets: (B, T)

    Raises:
        InputTextError: the shapes do not match.
    """
    if logits.dim() != targets.dim() + 1 or logits.shape[:-1] != targets.shape:
        raise InputTextError(
            f"logits {tuple(logits.shape)} and targets {tuple(targets.shape)} do not match: "
            "pass logits (B, T, V) and targets (B, T)"
        )
    keep = targets != pad_id
    if not bool(keep.any()):
        return float("nan")
    correct = (logits.float().argmax(-1) == targets) & keep  # float: the same argmax, faster than on bf16
    return float(correct.sum() / keep.sum())


def bleu_by_length(
    sources: Sequence[str], hyps: Sequence[str], refs: Sequence[str], bins: Sequence[int]
) -> list[tuple[str, int, float]]:
    """Corpus BLEU per source-length bucket (words): [(label, n_sentences, bleu)], empty buckets skipped.

    ``bins`` are bucket edges: ``[0, 10, 20]`` gives the buckets 0-9 and 10-19 words.
    """
    hyps, refs = _check(hyps, refs)
    if len(sources) != len(hyps):
        raise InputTextError(f"{len(sources)} sources but {len(hyps)} hypotheses: pass one source per hypothesis")
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
