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
    assert kinds == {"possessive", "subject"}
    for p in pairs:
        assert len(p.clean_src) == len(p.corrupt_src) and len(p.tgt) == len(p.corrupt_tgt) == p.pos + 1
        assert p.edit and all(p.clean_src[i] != p.corrupt_src[i] for i in p.edit)
        assert tok.id_to_token(p.good).lstrip("▁").lower() in ("his", "he")
        assert tok.id_to_token(p.bad).lstrip("▁").lower() in ("her", "she")
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
