"""Word alignment: IBM Model 1 on a toy corpus, subword-to-word pooling, agreement counting."""

from __future__ import annotations

import math
import random
from collections import defaultdict

import torch

from workbench.inspect.align import alignment_agreement, ibm1, ibm1_align, word_attention, word_spans


def test_ibm1_learns_the_toy_corpus_alignment():
    pairs = [("das haus", "the house"), ("das buch", "the book"), ("ein buch", "a book")]
    t = ibm1(pairs, iterations=10)
    assert t[("das", "the")] > t[("das", "house")] and t[("buch", "book")] > t[("buch", "a")]
    assert ibm1_align(t, "das haus", "the house") == [0, 1]
    assert ibm1_align(t, "ein buch", "a book") == [0, 1]
    assert ibm1_align(t, "", "the") == [None]  # no source words: NULL


def _ibm1_by_the_book(pairs, iterations):
    """EM for IBM Model 1 written as the textbook loops (Koehn, Statistical Machine Translation, fig. 4.3)."""
    corpus = [(["<null>", *s.lower().split()], t.lower().split()) for s, t in pairs]
    t_prob = defaultdict(lambda: 1.0)
    for _ in range(iterations):
        count, total = defaultdict(float), defaultdict(float)
        for src, tgt in corpus:
            for e in tgt:
                z = sum(t_prob[(f, e)] for f in src)
                for f in src:
                    count[(f, e)] += t_prob[(f, e)] / z
                    total[f] += t_prob[(f, e)] / z
        t_prob = defaultdict(float, {(f, e): c / total[f] for (f, e), c in count.items()})
    return dict(t_prob)


def test_ibm1_equals_the_textbook_loops():
    """The array form computes the same EM: repeated words, empty sides, case, unequal lengths."""
    rng = random.Random(0)
    words_de, words_en = "der die das Haus haus ein Buch buch und".split(), "the a house book and The".split()
    pairs = [(" ".join(rng.choices(words_de, k=rng.randint(0, 6))), " ".join(rng.choices(words_en, k=rng.randint(0, 6))))
             for _ in range(60)]
    for iterations in (0, 1, 4):
        ours, reference = ibm1(pairs, iterations), _ibm1_by_the_book(pairs, iterations)
        assert set(ours) == set(reference)
        assert all(math.isclose(ours[k], reference[k], rel_tol=1e-12) for k in reference)
        assert all(ibm1_align(ours, s, t) == ibm1_align(reference, s, t) for s, t in pairs)


def test_word_spans_and_pooling():
    tokens = ["▁ein", "▁mann", "s", "<eos>"]
    assert word_spans(tokens) == [0, 1, 1, -1]
    weights = torch.tensor([[0.1, 0.2, 0.3, 0.4],
                            [0.5, 0.1, 0.1, 0.3],
                            [0.2, 0.2, 0.2, 0.4],
                            [0.0, 0.0, 0.0, 1.0]])  # (Tq, Tk) with the same tokens on both axes
    pooled = word_attention(weights, word_spans(tokens), word_spans(tokens))
    # query word 0 = row 0; query word 1 = mean of rows 1 and 2; key word 1 = sum of columns 1 and 2
    expected = torch.tensor([[0.1, 0.5], [(0.5 + 0.2) / 2, (0.2 + 0.4) / 2]])
    assert torch.allclose(pooled, expected)


def test_alignment_agreement_ignores_null_links():
    assert alignment_agreement([0, 1, 2], [0, None, 1]) == 0.5
    assert math.isnan(alignment_agreement([0], [None]))
