"""Metrics come from sacreBLEU; the two BLEU flavours are labelled and differ as expected."""

from __future__ import annotations

import math

import pytest
import sacrebleu
import torch

from workbench import InputTextError
from workbench.translation.metrics import (
    BleuResult,
    bleu_by_length,
    chrf,
    corpus_bleu,
    exact_match,
    perplexity,
    token_accuracy,
    tokenized_bleu,
)

HYPS = ["A man rides a bike down the street.", "Two dogs play in the snow.", "A woman is cooking."]
REFS = ["A man is riding a bicycle down the street.", "Two dogs are playing in the snow.", "A woman cooks dinner."]


def test_corpus_bleu_equals_sacrebleu_with_signature():
    res = corpus_bleu(HYPS, REFS)
    ref = sacrebleu.corpus_bleu(HYPS, [REFS])
    assert isinstance(res, BleuResult) and 0 < res.score < 100
    assert res.score == pytest.approx(ref.score)
    assert res.precisions == pytest.approx(tuple(ref.precisions)) and len(res.precisions) == 4
    assert (res.bp, res.sys_len, res.ref_len) == (pytest.approx(ref.bp), ref.sys_len, ref.ref_len)
    assert res.sys_len < res.ref_len and res.bp < 1  # short hypotheses are penalised
    for part in ("nrefs:1", "case:mixed", "tok:13a", f"version:{sacrebleu.__version__}"):
        assert part in res.signature
    assert str(res).startswith("sacreBLEU = ") and res.signature in str(res)
    assert corpus_bleu(REFS, REFS).score == pytest.approx(100.0)


def test_tokenized_lowercased_bleu_is_labelled_and_at_least_as_high():
    hyps = ["a man rides a bike down the street.", "TWO DOGS play in the snow."]
    refs = ["A Man rides a Bike down the street.", "Two dogs play in the snow."]
    cased, lower = corpus_bleu(hyps, refs), tokenized_bleu(hyps, refs)
    assert lower.score >= cased.score and lower.score == pytest.approx(100.0) and cased.score < 60
    assert lower.score == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs], lowercase=True, tokenize="13a").score)
    assert "case:lc" in lower.signature and "tok:13a" in lower.signature
    assert "not sacreBLEU" in lower.label and "lower-cased" in str(lower)
    # on the mixed-case examples above too
    assert tokenized_bleu(HYPS, REFS).score >= corpus_bleu(HYPS, REFS).score


def test_chrf_equals_sacrebleu():
    res = chrf(HYPS, REFS)
    assert res.score == pytest.approx(sacrebleu.corpus_chrf(HYPS, [REFS]).score)
    assert 0 < res.score < 100 and "nc:6|nw:0" in res.signature and res.label == "chrF"


def test_misaligned_or_malformed_inputs_are_refused():
    for fn in (corpus_bleu, tokenized_bleu, chrf, exact_match):
        with pytest.raises(InputTextError, match="3 hypotheses but 1 references"):
            fn(HYPS, REFS[:1])
    with pytest.raises(InputTextError, match="no sentences"):
        corpus_bleu([], [])
    with pytest.raises(InputTextError, match="not single strings"):
        corpus_bleu("A man.", "A man.")
    with pytest.raises(InputTextError, match="hypothesis 1 is a list"):
        corpus_bleu(["a", ["b"]], ["a", "b"])


def test_perplexity():
    assert perplexity(math.log(7)) == pytest.approx(7)
    assert perplexity(0.0) == 1.0
    assert math.isfinite(perplexity(1e9)) and perplexity(1e9) == pytest.approx(math.exp(50))
    assert math.isnan(perplexity(float("nan")))


def test_exact_match_and_token_accuracy():
    assert exact_match(["a b", "c ", "x"], ["a b", "c", "y"]) == pytest.approx(2 / 3)
    logits = torch.tensor([[[0.0, 5.0, 0.0], [5.0, 0.0, 0.0], [0.0, 0.0, 5.0], [0.0, 5.0, 0.0]]])  # (1, 4, 3)
    # positions: right, wrong, padding (ignored even though "right"), right
    assert token_accuracy(logits, torch.tensor([[1, 2, 0, 1]]), pad_id=0) == pytest.approx(2 / 3)
    assert math.isnan(token_accuracy(logits, torch.zeros(1, 4, dtype=torch.long), pad_id=0))
    with pytest.raises(InputTextError, match="do not match"):
        token_accuracy(logits, torch.tensor([[1, 2]]), pad_id=0)


def test_bleu_by_length_buckets():
    sources = ["a b", "a b c d e", "a b c d e f"]
    rows = bleu_by_length(sources, HYPS, REFS, [0, 3, 10, 20])
    assert [(r[0], r[1]) for r in rows] == [("0-2", 1), ("3-9", 2)]
    assert rows[1][2] == pytest.approx(corpus_bleu(HYPS[1:], REFS[1:]).score)
