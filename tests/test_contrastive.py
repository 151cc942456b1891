"""Contrastive attribution at patching sites: integrated gradients is complete within 5 % at the default step count,
its baseline value is the fully patched run, gradient x input matches patching where the model is linear in the site,
bad input gets one line."""

from __future__ import annotations

import pytest
import torch

from workbench.errors import AttributionError, PatchingError
from workbench.inspect.capture import hooks_remaining
from workbench.inspect.contrastive import contrastive_attribution, patching_effects
from workbench.inspect.patching import cache_activations, patch


@pytest.mark.parametrize("site", ["enc.embed", "enc.1.resid", "dec.0.cross.v", "dec.1.resid"])
def test_integrated_gradients_is_complete_within_5_percent(minimal_pair, site):
    model, clean, corrupt, tgt = minimal_pair
    before = model(clean, tgt)
    result = contrastive_attribution(model, clean, corrupt, tgt, position=5, good=7, bad=9, site=site)
    assert result.completeness_error < 0.05, result
    assert abs(result.value - result.baseline_value) > 1e-4  # the pair moves the logit difference at this site
    n_pos = 7 if site.startswith("enc") or site.endswith(".v") else 6
    assert result.scores.shape == (n_pos,)
    # f(x') is the clean run with the whole site patched from the corrupted run
    donor = cache_activations(model, corrupt, tgt, sites=[site])
    with patch(model, donor, site), torch.no_grad():
        patched = model(clean, tgt)[0, 5]
    assert result.baseline_value == pytest.approx(float(patched[7] - patched[9]), abs=1e-5)
    assert torch.equal(model(clean, tgt), before) and hooks_remaining(model) == 0
    assert all(p.grad is None for p in model.parameters())


def test_more_steps_do_not_break_completeness_and_one_step_is_not_complete(minimal_pair):
    model, clean, corrupt, tgt = minimal_pair
    gxi = contrastive_attribution(model, clean, corrupt, tgt, 5, 7, 9, site="enc.embed", method="gradient_x_input")
    ig = contrastive_attribution(model, clean, corrupt, tgt, 5, 7, 9, site="enc.embed", n_steps=128)
    assert ig.completeness_error < 0.05
    assert gxi.completeness_error > ig.completeness_error  # the first-order estimate is only an estimate
    assert gxi.n_steps == 1


def test_scores_sit_where_patching_acts(minimal_pair):
    """Only the edited source position differs between the pair's embeddings: both methods and patching agree that
    every other position of enc.embed contributes nothing, and the edited one carries the whole difference."""
    model, clean, corrupt, tgt = minimal_pair
    effects = patching_effects(model, clean, corrupt, tgt, 5, 7, 9, site="enc.embed")
    ig = contrastive_attribution(model, clean, corrupt, tgt, 5, 7, 9, site="enc.embed")
    others = [p for p in range(7) if p != 2]
    assert effects[others].abs().max() < 1e-6 and ig.scores[others].abs().max() < 1e-6
    assert ig.scores[2] == pytest.approx(effects[2], rel=0.05)  # one position: IG's sum is the patching effect


def test_bad_input_is_refused_in_one_line(minimal_pair):
    model, clean, corrupt, tgt = minimal_pair
    with pytest.raises(PatchingError, match="unknown site 'enc.9.resid'"):
        contrastive_attribution(model, clean, corrupt, tgt, 5, 7, 9, site="enc.9.resid")
    with pytest.raises(PatchingError, match="unequal length"):
        contrastive_attribution(model, clean, corrupt[:, :-1], tgt, 5, 7, 9)
    with pytest.raises(AttributionError, match="unknown method"):
        contrastive_attribution(model, clean, corrupt, tgt, 5, 7, 9, method="lime")
    with pytest.raises(AttributionError, match="same token"):
        contrastive_attribution(model, clean, corrupt, tgt, 5, 7, 7)
    with pytest.raises(AttributionError, match="position 6"):
        patching_effects(model, clean, corrupt, tgt, 6, 7, 9)
    with pytest.raises(AttributionError, match="bad=40"):
        contrastive_attribution(model, clean, corrupt, tgt, 5, 7, 40)
    assert hooks_remaining(model) == 0
