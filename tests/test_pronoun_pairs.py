"""Pronoun minimal pairs: the swaps, the kept pairs' invariants with the shipped model, bootstrap intervals."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from workbench.errors import DataError
from workbench.lessons.pronoun_pairs import bootstrap_ci, build_pronoun_pairs, candidate_swaps


def test_candidate_swaps():
    got = candidate_swaps("Ein junger Mann hält seinen Hund, während er lacht.")
    assert ("possessive", "Ein junger Mann hält seinen Hund, während er lacht.",
            "Ein junger Mann hält ihren Hund, während er lacht.") in got
    assert ("subject", "Ein junger Mann hält seinen Hund, während er lacht.",
            "Eine junge Frau hält ihren Hund, während sie lacht.") in got
    # a feminine original gives the masculine side by the reverse swap, articles and endings included
    assert ("subject", "Der kleine Junge fährt mit seinem Rad.", "Das kleine Mädchen fährt mit ihrem Rad.") in \
        candidate_swaps("Das kleine Mädchen fährt mit ihrem Rad.")
    # two people, or a "sie" that may be someone else: no subject pair
    assert [k for k, _, _ in candidate_swaps("Ein Mann und eine Frau mit ihrem Hund.")] == ["possessive"]
    assert [k for k, _, _ in candidate_swaps("Sie gibt einem Mann sein Buch.")] == ["possessive"]
    assert candidate_swaps("Zwei Hunde spielen im Schnee.") == []


def test_number_swaps():
    verbs = frozenset({"rennen", "lächeln", "arbeiten", "klettern"})
    number = [(a, b) for k, a, b in candidate_swaps("Ein kleiner Hund rennt durch das Gras.", verbs) if k == "number"]
    assert number == [("Ein kleiner Hund rennt durch das Gras.", "Zwei kleine Hunde rennen durch das Gras.")]
    # definite articles, weak adjective endings, a verb joined by "und", a strong verb from the table
    assert ("number", "Die junge Frau sitzt und lächelt.", "Die jungen Frauen sitzen und lächeln.") in \
        candidate_swaps("Die junge Frau sitzt und lächelt.", verbs)
    assert ("number", "Der Mann arbeitet.", "Die Männer arbeiten.") in candidate_swaps("Der Mann arbeitet.", verbs)
    assert ("number", "Das kleine Mädchen klettert.", "Die kleinen Mädchen klettern.") in \
        candidate_swaps("Das kleine Mädchen klettert.", verbs)
    # a regular verb whose plural is not among the known words: no pair (strong verbs need no corpus)
    assert not [k for k, _, _ in candidate_swaps("Ein Hund rennt.") if k == "number"]
    assert ("number", "Ein Mann liest.", "Zwei Männer lesen.") in candidate_swaps("Ein Mann liest.")
    # "und" + a verb that cannot be made plural, a comma, a pronoun, an article that does not fit: no number pair
    for sentence in ("Ein Hund rennt und bellt.", "Ein Hund rennt, weil es regnet.", "Ein Mann liest sein Buch.",
                     "Eine Mann rennt.", "Eine Gruppe rennt."):
        assert "number" not in [k for k, _, _ in candidate_swaps(sentence, verbs)], sentence


@pytest.fixture(scope="module")
def shipped():
    import workbench as wb

    model, tok, _ = wb.pretrained("small-de-en")
    return model, tok


def test_kept_pairs_are_minimal_and_translated_both_ways(shipped, multi30k_dir):
    from workbench.translation.data import load_multi30k

    model, tok = shipped
    sentences = [("val", s) for s, _ in load_multi30k("val", data_dir=multi30k_dir)[:300]]
    pairs = build_pronoun_pairs(model, tok, sentences)
    assert len(pairs) >= 3
    kinds = {p.kind for p in pairs}
    assert kinds == {"possessive", "subject", "number"}
    for p in pairs:
        assert len(p.clean_src) == len(p.corrupt_src) and len(p.tgt) == len(p.corrupt_tgt) == p.pos + 1
        assert p.edit and all(p.clean_src[i] != p.corrupt_src[i] for i in p.edit)
        good, bad = (tok.id_to_token(i).lstrip("▁").lower() for i in (p.good, p.bad))
        if p.kind == "number":
            assert (good, bad) in {("is", "are"), ("was", "were"), ("has", "have"), ("his", "their"),
                                   ("he", "they"), ("her", "their"), ("she", "they"), ("its", "their"),
                                   ("him", "them")}, (good, bad)
            assert p.clean_text.split()[0] in ("Ein", "Eine", "Der", "Die", "Das")
            assert p.corrupt_text.split()[0] in ("Zwei", "Die") and p.tgt != p.corrupt_tgt
        else:
            assert good in ("his", "he") and bad in ("her", "she")
        if p.kind == "possessive":
            assert p.tgt == p.corrupt_tgt and len(p.edit) == 1
        with torch.no_grad():
            clean = model(torch.tensor([p.clean_src]), torch.tensor([p.tgt]))[0]
            corrupt = model(torch.tensor([p.corrupt_src]), torch.tensor([p.corrupt_tgt]))[0]
        # the model's own argmaxes: the prefix (teacher forcing = greedy while they agree), then the pronoun
        assert clean.argmax(-1).tolist() == [*p.tgt[1:], p.good]
        assert corrupt.argmax(-1).tolist() == [*p.corrupt_tgt[1:], p.bad]
    with pytest.raises(DataError, match="unknown pair kind"):
        build_pronoun_pairs(model, tok, sentences[:3], kinds=("plural",))
    with pytest.raises(DataError, match="unknown pair kind"):
        build_pronoun_pairs(model, tok, sentences[:3], limit_per_kind={"plural": 2})
    # a quota per kind, met in rounds: the first two number pairs, every pair of the other kinds
    few = build_pronoun_pairs(model, tok, sentences, limit_per_kind={"number": 2}, round_size=50)
    assert [p for p in few if p.kind == "number"] == [p for p in pairs if p.kind == "number"][:2]
    assert [p for p in few if p.kind != "number"] == [p for p in pairs if p.kind != "number"]


def test_bootstrap_ci():
    rng = np.random.default_rng(1)
    x = rng.normal(0.5, 1.0, size=400)
    mean, lo, hi = bootstrap_ci(x, seed=0)
    assert mean == pytest.approx(x.mean())
    assert lo < mean < hi
    assert hi - lo == pytest.approx(2 * 1.96 / 20, rel=0.2)  # about 2 x 1.96 standard errors
    m2, lo2, hi2 = bootstrap_ci(np.stack([x, -x], 1), seed=0)
    assert m2.shape == (2,) and lo2[1] == pytest.approx(-hi2[0])
    with pytest.raises(DataError, match="at least 2"):
        bootstrap_ci([1.0])
