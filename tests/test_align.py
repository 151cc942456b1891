"""Word alignment: IBM Model 1 on a toy corpus, subword-to-word pooling, agreement counting."""

from __future__ import annotations

import math

import torch

from workbench.inspect.align import alignment_agreement, ibm1, ibm1_align, word_attention, word_spans


def test_ibm1_learns_the_toy_corpus_alignment():
    pairs = [("das haus", "the house"), ("das buch", "the book"), ("ein buch", "a book")]
    t = ibm1(pairs, iterations=10)
    assert t[("das", "the")] > t[("das", "house")] and t[("buch", "book")] > t[("buch", "a")]
    assert ibm1_align(t, "das haus", "the house") == [0, 1]
    assert ibm1_align(t, "ein buch", "a book") == [0, 1]
    assert ibm1_align(t, "", "the") == [None]  # no source words: NULL


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
