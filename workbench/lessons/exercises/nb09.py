"""Exercises of notebook 09 (translation and BLEU): clipped n-gram matches and the brevity penalty, written by hand,
checked against sacreBLEU's own n-gram counter (``sacrebleu.metrics.helpers.extract_word_ngrams``) and its
brevity-penalty rule; the notebook then rebuilds the corpus score from them and compares with
:func:`workbench.translation.metrics.corpus_bleu`."""

from __future__ import annotations

import math
from collections import Counter

from sacrebleu.metrics.helpers import extract_word_ngrams

from workbench.lessons.exercises.core import Case, Exercise, Mistake, register
from workbench.lessons.exercises.predictions import Prediction, register_prediction


def ngram_matches(hyp: list[str], ref: list[str], n: int) -> tuple[int, int]:
    """Clipped n-gram matches of one sentence: (Σ over the hypothesis' n-grams of min(count in hyp, count in ref),
    number of n-grams in the hypothesis), as sacreBLEU counts them.

    Shapes: token lists -> two ints
    """
    h, r = extract_word_ngrams(hyp, n), extract_word_ngrams(ref, n)
    return sum(min(c, r[g]) for g, c in h.items()), sum(h.values())


def brevity_penalty(hyp_len: int, ref_len: int) -> float:
    """BP = 1 if c >= r, else exp(1 - r / c) (0 for an empty hypothesis), with c, r the corpus lengths."""
    if hyp_len >= ref_len:
        return 1.0
    return math.exp(1 - ref_len / hyp_len) if hyp_len > 0 else 0.0


PAIRS = [("the the the the the the the", "the cat is on the mat"),
         ("a man is riding a bike on a road", "a man rides a bike down the road"),
         ("two dogs play", "two dogs are playing in the snow"),
         ("hello", "hello world")]


def over_pairs(fn, pairs: list[tuple[str, str]], n_max: int) -> list[list[tuple[int, int]]]:
    """``fn(hyp, ref, n)`` for every (hypothesis, reference) of ``pairs`` and every n from 1 to ``n_max``."""
    return [[_pair(fn(h.split(), r.split(), n)) for n in range(1, n_max + 1)] for h, r in pairs]


def _pair(v: object) -> object:
    """A returned pair as a tuple, its items as they are (a float or a tensor count is for the comparison to name)."""
    return tuple(v) if isinstance(v, list) else v


WORDS = "a the man dog dogs runs run on in snow grass red ball . ,".split()


def _ngram_draw(rng) -> Case:
    """Sentence pairs over a small vocabulary (so n-grams repeat and match), lengths from 0 to 12."""
    pairs = []
    for _ in range(rng.randint(1, 4)):
        ref = [rng.choice(WORDS) for _ in range(rng.randint(1, 12))]
        hyp = [rng.choice(ref + WORDS[:4]) for _ in range(rng.randint(0, 12))]
        pairs.append((" ".join(hyp), " ".join(ref)))
    return Case(f"{len(pairs)} random sentence pairs", (pairs, rng.randint(1, 5)))


def _unclipped(hyp, ref, n):
    h, r = Counter(zip(*[hyp[i:] for i in range(n)], strict=False)), Counter(zip(*[ref[i:] for i in range(n)], strict=False))
    return sum(c for g, c in h.items() if g in r), sum(h.values())


def _over_ref(hyp, ref, n):
    h, r = extract_word_ngrams(hyp, n), extract_word_ngrams(ref, n)
    return sum(min(c, r[g]) for g, c in h.items()), sum(r.values())


def _as_set(hyp, ref, n):
    h, r = set(extract_word_ngrams(hyp, n)), set(extract_word_ngrams(ref, n))
    return len(h & r), len(h)


def _unigrams(hyp, ref, n):
    return ngram_matches(hyp, ref, 1)


register(Exercise(
    "09.ngram_matches", "clipped n-gram matches of one sentence", ngram_matches,
    lambda: [Case("n = 1..4 on four sentence pairs", (PAIRS, 4)),
             Case("repeated words, n = 1..3", ([("the the cat the", "the cat the cat"), ("a a a", "a")], 3)),
             Case("n-grams that run together the same", ([("ab c", "a bc"), ("a b c", "ab c"), ("x yz", "xy z")], 2)),
             Case("words that differ only in case (sacreBLEU is case-sensitive)",
                  ([("The cat sat", "the cat sat"), ("A Dog runs", "a dog runs")], 2))],
    driver=over_pairs, draw=_ngram_draw,
    package=("sacrebleu.metrics.helpers.extract_word_ngrams", "sacrebleu.metrics.helpers.extract_all_word_ngrams"),
    mistakes=(
        Mistake("counts not clipped", "a hypothesis n-gram counts at most as often as it occurs in the reference: "
                "min(count in hyp, count in ref)", _unclipped),
        Mistake("divided by the reference's n-grams", "precision counts the hypothesis' n-grams in the "
                "denominator; the reference length enters through the brevity penalty", _over_ref),
        Mistake("n-grams as a set (repeats ignored)", "count every occurrence (a Counter), clipped, not the "
                "distinct n-grams", _as_set),
        Mistake("n ignored (always unigrams)", "build n-grams of length n: tuples of n consecutive tokens",
                _unigrams),
    )))


def lengths(fn, pairs) -> list[float]:
    """``fn(c, r)`` on every (hypothesis length, reference length) pair."""
    return [float(v) if type(v) is int else v for v in (fn(c, r) for c, r in pairs)]  # a tensor stays one


register(Exercise(
    "09.brevity_penalty", "the brevity penalty exp(1 - r/c) for short outputs", brevity_penalty,
    lambda: [Case("short, equal and long outputs", ([(9, 10), (10, 10), (12, 10), (3, 10), (1, 2)],)),
             Case("an empty output", ([(0, 5)],))],
    driver=lengths, atol=1e-6, rtol=1e-6,  # float32 arithmetic is right too (about 3e-8 off); a mistake is % off
    draw=lambda rng: Case("random lengths", ([(rng.randint(0, 40), rng.randint(1, 40)) for _ in range(6)],)),
    mistakes=(
        Mistake("ratio inverted", "BP = exp(1 - r / c) with c the hypothesis length: short outputs get BP < 1",
                lambda c, r: 1.0 if c >= r else math.exp(1 - c / r)),
        Mistake("long outputs penalised too", "BP is 1 when the hypothesis is at least as long as the reference "
                "(long outputs are already punished by precision)", lambda c, r: math.exp(1 - r / c) if c > 0 else 0.0),
        Mistake("ratio without the exponential", "BP = exp(1 - r / c), not c / r",
                lambda c, r: 1.0 if c >= r else c / r),
    )))


# -- the prediction ------------------------------------------------------------------------------------------------
register_prediction(Prediction(
    "09.better_decoder", "which decoder gets the higher sacreBLEU, greedy or beam 4?", "PREDICT_BETTER_DECODER",
    "choice", choices=("greedy", "beam 4"),
    expected=None))  # only the lesson's own training run can tell
