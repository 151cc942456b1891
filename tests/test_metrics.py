"""Metrics come from sacreBLEU; the two BLEU flavours are labelled and differ as expected."""

from __future__ import annotations

import math

import pytest
import sacrebleu
import torch

from workbench import InputTextError
from workbench.metrics import (
    bleu_by_length,
    chrf,
    corpus_bleu,
    exact_match,
    perplexity,
    token_accuracy,
    tokenized_bleu,
)

HYPS = ["A man rides a bike down the street .", "Two dogs play in the snow."]
REFS = ["A man is riding a bicycle down the street.", "Two dogs are playing in the snow."]


def test_corpus_bleu_equals_sacrebleu_with_signature():
    res = corpus_bleu(HYPS, REFS)
    assert res.score == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS]).score)
    assert "case:mixed" in res.signature and "tok:13a" in res.signature
    assert len(res.precisions) == 4


def test_lowercased_bleu_is_a_different_higher_number():
    hyps = ["a man rides a bike ."]
    refs = ["A Man rides a Bike ."]
    assert tokenized_bleu(hyps, refs).score > corpus_bleu(hyps, refs).score
    assert "case:lc" in tokenized_bleu(hyps, refs).signature
    assert 0 < chrf(HYPS, REFS).score < 100


def test_misaligned_inputs_are_refused():
    with pytest.raises(InputTextError, match="aligned"):
        corpus_bleu(HYPS, REFS[:1])


def test_simple_metrics():
    assert exact_match(["a b", "c"], ["a b", "d"]) == 0.5
    assert perplexity(math.log(7)) == pytest.approx(7)
    logits = torch.tensor([[[0.0, 5.0, 0.0], [5.0, 0.0, 0.0], [0.0, 0.0, 5.0]]])
    assert token_accuracy(logits, torch.tensor([[1, 2, 0]]), pad_id=0) == 0.5
    rows = bleu_by_length(["a b", "a b c d e"], HYPS, REFS, [0, 3, 10])
    assert [r[1] for r in rows] == [1, 1]
