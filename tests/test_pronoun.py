"""Notebook 10's pronoun analysis as a package function: weights from a pronoun onto its antecedent, per head."""

from __future__ import annotations

import pytest
import torch

from workbench.errors import InputTextError
from workbench.inspect import pronoun
from workbench.inspect.capture import AttentionCache
from workbench.inspect.inspection import Inspection

SRC = ["▁Eine", "▁Fr", "au", "▁sieht", "▁sie", "."]  # "Frau" is two subwords; "sie" is word 3, token 4
OUT = ["▁A", "▁woman", "▁sees", "▁her", ".", "<eos>"]  # "her" is output position 3


def _weights(rows: dict[int, list[list[float]]], tq: int, tk: int) -> torch.Tensor:
    """(1, H, Tq, Tk) weights: uniform rows, except the given query rows (one list of Tk weights per head)."""
    heads = len(next(iter(rows.values())))
    w = torch.full((1, heads, tq, tk), 1.0 / tk)
    for q, per_head in rows.items():
        w[0, :, q] = torch.tensor(per_head)
    return w


@pytest.fixture
def reading_of(monkeypatch):
    def make(translation: str = "A woman sees her.", out_tokens: list[str] = OUT):
        cache = AttentionCache({"enc.self": 2, "dec.cross": 1})
        # encoder layer 0 from "sie" (token 4): head 0 reads "Frau" (0.3 + 0.4), head 1 reads "sieht"
        cache._record("enc.0.self.pattern", _weights({4: [[0.1, 0.3, 0.4, 0.1, 0.1, 0.0],
                                                              [0.0, 0.05, 0.05, 0.9, 0.0, 0.0]]}, 6, 6))
        cache._record("enc.1.self.pattern", _weights({4: [[1 / 6] * 6, [0.0, 0.1, 0.1, 0.1, 0.7, 0.0]]}, 6, 6))
        # cross from "her" (position 3): head 0 reads "sie" most but gives "Frau" 0.3; head 1 gives "Frau" 0.5
        cache._record("dec.0.cross.pattern", _weights({3: [[0.1, 0.1, 0.2, 0.1, 0.5, 0.0],
                                                           [0.0, 0.25, 0.25, 0.2, 0.3, 0.0]]}, 6, 6))
        ins = Inspection(source="Eine Frau sieht sie.", translation=translation, src_tokens=SRC,
                         tgt_tokens=["<bos>", *out_tokens[:-1]], out_tokens=out_tokens, cache=cache)
        monkeypatch.setattr(pronoun, "inspect_translation", lambda model, tok, sentence: ins)
        return ins

    return make


def test_words_of_joins_subwords_and_strips_punctuation():
    spans, words = pronoun.words_of(["▁Eine", "▁Fr", "au", "▁sie.", "<eos>"])
    assert spans == [0, 1, 1, 2, -1] and words == ["eine", "frau", "sie"]
    assert pronoun.english_pronouns("She gives him a ball, and they laugh.") == ["him", "she", "they"]


def test_weights_from_the_pronoun_onto_every_subword_of_the_antecedent(reading_of):
    reading_of()
    r = pronoun.pronoun_attention(None, None, "Eine Frau sieht sie.", "Frau", "sie")
    assert r.pronoun_emitted == "her" and r.de_query == 4 and r.en_query == 3 and r.antecedent_tokens == [1, 2]
    assert r.uniform == pytest.approx(2 / 6)
    torch.testing.assert_close(r.on_antecedent["enc.self"], torch.tensor([[0.7, 0.1], [2 / 6, 0.2]]))
    torch.testing.assert_close(r.on_antecedent["dec.cross"], torch.tensor([[0.3, 0.5]]))
    enc, cross = r.stats("enc.self"), r.stats("dec.cross")
    assert enc["best_head"] == [0, 0] and enc["max"] == pytest.approx(0.7)
    assert enc["heads_reading_antecedent_most"] == 2  # layer 0 head 0, and layer 1 head 0 (uniform: "frau" has 2 tokens)
    assert cross["best_head"] == [0, 1] and cross["heads_reading_antecedent_most"] == 1  # head 0 reads "sie" most
    assert r.most_read_word["dec.cross"].tolist() == [[3, 1]]
    torch.testing.assert_close(r.best_cross_row(), r.inspection.weights("dec.cross", 0)[1])
    # from the other output rows (uniform, 1/6 per token) that head gives "Frau" 2/6
    assert r.antecedent_weight_elsewhere() == pytest.approx(2 / 6)


def test_a_missing_word_or_a_translation_without_pronoun_is_refused(reading_of):
    reading_of()
    with pytest.raises(InputTextError, match="antecedent 'Mann'"):
        pronoun.pronoun_attention(None, None, "Eine Frau sieht sie.", "Mann", "sie")
    with pytest.raises(InputTextError, match="does not follow"):
        pronoun.pronoun_attention(None, None, "Eine Frau sieht sie.", "sieht", "Frau")
    reading_of("A woman sees a woman.", ["▁A", "▁woman", "▁sees", "▁a", ".", "<eos>"])
    with pytest.raises(InputTextError, match="no English pronoun"):
        pronoun.pronoun_attention(None, None, "Eine Frau sieht sie.", "Frau", "sie")
