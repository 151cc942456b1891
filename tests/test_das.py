"""Distributed alignment search: at full rank it is activation patching (1e-6), the subspace stays orthonormal
while it trains, a random rank-1 rotation leaves the base answers (IIA near the no-intervention floor) while a
trained one moves them, hooks go and the model stays frozen, bad input gets one line."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from tests.conftest import tiny_inspection_model
from workbench.errors import PatchingError
from workbench.inspect.capture import hooks_remaining
from workbench.inspect.das import (
    RotatedSubspace,
    das_examples,
    das_intervention,
    das_sweep,
    interchange_accuracy,
    train_das,
)
from workbench.inspect.patching import Site, cache_activations, patch


@dataclass(frozen=True)
class Pair:  # the fields of workbench.lessons.pronoun_pairs.PronounPair that DAS reads
    clean_text: str
    clean_src: tuple
    corrupt_src: tuple
    tgt: tuple
    corrupt_tgt: tuple
    pos: int
    good: int
    bad: int


@pytest.fixture(scope="module")
def model_and_pairs():
    """Minimal pairs of the tiny model: a one-token source edit that changes its top token at the last position."""
    model = tiny_inspection_model()
    g = torch.Generator().manual_seed(3)
    pairs = []
    while len(pairs) < 48:
        S = int(torch.randint(5, 9, (1,), generator=g))
        clean = torch.randint(4, 40, (1, S), generator=g)
        corrupt = clean.clone()
        corrupt[0, 1] = int(torch.randint(4, 40, (1,), generator=g))
        tgt = torch.randint(4, 40, (1, 5), generator=g)
        tgt[0, 0] = 2
        with torch.no_grad():
            good, bad = int(model(clean, tgt)[0, -1].argmax()), int(model(corrupt, tgt)[0, -1].argmax())
        if good != bad:
            pairs.append(Pair(str(len(pairs)), tuple(clean[0].tolist()), tuple(corrupt[0].tolist()),
                              tuple(tgt[0].tolist()), tuple(tgt[0].tolist()), 4, good, bad))
    return model, pairs


@pytest.mark.parametrize("site", ["enc.1.resid", "enc.embed", "dec.1.resid"])
def test_full_rank_das_is_activation_patching(model_and_pairs, site):
    model, pairs = model_and_pairs
    p = pairs[0]
    base_src, base_tgt = torch.tensor([p.corrupt_src]), torch.tensor([p.corrupt_tgt])
    donor = cache_activations(model, torch.tensor([p.clean_src]), torch.tensor([p.tgt]))
    full = RotatedSubspace(48, 48, seed=7)
    assert torch.allclose(full.weight @ full.weight.T, torch.eye(48, dtype=torch.float64), atol=1e-12)
    rows = torch.tensor([p.pos]) if site.startswith("dec") else None
    with torch.no_grad():
        with das_intervention(model, site, full, donor[site], rows):
            das = model(base_src, base_tgt)
        with patch(model, donor, Site(site, pos=p.pos) if rows is not None else site):
            patched = model(base_src, base_tgt)
        plain = model(base_src, base_tgt)
    assert (das - patched).abs().max() < 1e-6
    assert (plain - patched).abs().max() > 1e-3  # the patch does something
    assert hooks_remaining(model) == 0


def test_random_rotation_stays_near_the_floor_and_training_moves_the_answer(model_and_pairs):
    model, pairs = model_and_pairs
    train, test = das_examples(pairs[:32]), das_examples(pairs[32:])
    assert len(train) == 64 and len(test) == 32
    site = "enc.1.resid"
    assert interchange_accuracy(model, site, RotatedSubspace(48, 48), test).mean() == 1.0  # full rank: patching
    random_iia = interchange_accuracy(model, site, RotatedSubspace(48, 1, seed=11), test).mean()
    assert random_iia <= 0.25  # 0 would be no effect at all: every base run prefers the other word
    learnt, losses = train_das(model, site, 8, train, epochs=8, lr=2e-2)
    assert torch.allclose(learnt.weight @ learnt.weight.T, torch.eye(8, dtype=torch.float64), atol=1e-8)
    assert sum(losses[-4:]) < sum(losses[:4])
    assert interchange_accuracy(model, site, learnt, train).mean() > \
        interchange_accuracy(model, site, RotatedSubspace(48, 8, seed=0), train).mean()
    assert all(p.grad is None and p.requires_grad for p in model.parameters())
    assert hooks_remaining(model) == 0


def test_sweep_reports_learnt_and_random_with_intervals(model_and_pairs):
    model, pairs = model_and_pairs
    table = das_sweep(model, das_examples(pairs[:16]), das_examples(pairs[16:24]), ["enc.1.resid"], [1, 48],
                      epochs=1, n_bootstrap=100)
    assert list(table["rank"]) == [1, 48]
    assert table.loc[table["rank"] == 48, "iia"].item() == 1.0
    assert ((table["iia_lo"] <= table["iia"]) & (table["iia"] <= table["iia_hi"])).all()


def test_bad_input_is_refused_in_one_line(model_and_pairs):
    model, pairs = model_and_pairs
    ex = das_examples(pairs[:4])
    with pytest.raises(PatchingError, match="unknown site 'dec.0.cross.z'"):
        train_das(model, "dec.0.cross.z", 1, ex)
    with pytest.raises(PatchingError, match="unknown site 'enc.7.resid'"):
        interchange_accuracy(model, "enc.7.resid", RotatedSubspace(48, 1), ex)
    for rank in (0, 49):
        with pytest.raises(PatchingError, match=f"rank {rank} out of range"):
            train_das(model, "enc.0.resid", rank, ex)
    bad = Pair("x", (5, 6, 7), (5, 6), (2, 4), (2, 4), 1, 5, 6)
    with pytest.raises(PatchingError, match="unequal length"):
        das_examples([bad])
    with pytest.raises(PatchingError, match="at least one"):
        das_examples([])
