"""Patching sweeps: batched cells equal one-at-a-time patching, exact ends of the scale, causal-tracing noise,
path patching against a two-step computation with the public API, bad input."""

from __future__ import annotations

import pytest
import torch

from workbench.errors import PatchingError
from workbench.inspect import patching_sweeps as sweeps
from workbench.inspect.patching import Site, cache_activations, patch, site_names


@pytest.fixture(scope="module")
def setup(minimal_pair):
    """The minimal pair and a logit difference at target position 4 between the clean run's two likeliest tokens."""
    model, clean, corrupt, tgt = minimal_pair
    logits = model(clean, tgt)[0, 4]
    good, bad = logits.topk(2).indices.tolist()
    return model, clean, corrupt, tgt, sweeps.LogitDiff(4, good, bad)


@torch.no_grad()
def _score(model, src, tgt, metric, clean_m, corrupt_m):
    return (float(metric(model(src, tgt))[0]) - corrupt_m) / (clean_m - corrupt_m)


@pytest.mark.parametrize("direction", ["clean->corrupted", "corrupted->clean"])
def test_position_sweep_cells_equal_single_patches(setup, direction):
    model, clean, corrupt, tgt, metric = setup
    res = sweeps.sweep_positions(model, clean, corrupt, tgt, metric, family="enc.resid", direction=direction, batch_size=5)
    assert res.values.shape == (3, 7) and res.axes == ("layer", "src_pos")
    donor = cache_activations(model, clean if direction == "clean->corrupted" else corrupt, tgt)
    base = corrupt if direction == "clean->corrupted" else clean
    for (row, site), pos in [((0, "enc.embed"), 2), ((1, "enc.0.resid"), 4), ((2, "enc.1.resid"), 2)]:
        with patch(model, donor, [Site(site, pos=pos)]):
            single = _score(model, base, tgt, metric, res.clean_metric, res.corrupted_metric)
        assert res.values[row, pos].item() == pytest.approx(single, abs=1e-4)
    # the embedding differs only at the edited position: there the patch gives the donor run, elsewhere nothing
    end = 1.0 if direction == "clean->corrupted" else 0.0
    assert res.values[0, 2].item() == pytest.approx(end, abs=1e-5)
    others = torch.cat([res.values[0, :2], res.values[0, 3:]])
    assert torch.allclose(others, torch.full_like(others, 1.0 - end), atol=1e-5)


@pytest.mark.parametrize("family", ["dec.memory", "dec.resid"])
def test_other_position_families(setup, family):
    model, clean, corrupt, tgt, metric = setup
    res = sweeps.sweep_positions(model, clean, corrupt, tgt, metric, family=family)
    n_pos = 7 if family == "dec.memory" else 6
    assert res.values.shape == (3 if family == "dec.memory" else 4, n_pos)
    donor = cache_activations(model, clean, tgt)
    sites = ["dec.1.cross.k", "dec.1.cross.v"] if family == "dec.memory" else ["dec.1.resid"]
    row = 1 if family == "dec.memory" else 2
    with patch(model, donor, [Site(s, pos=3) for s in sites]):
        single = _score(model, corrupt, tgt, metric, res.clean_metric, res.corrupted_metric)
    assert res.values[row, 3].item() == pytest.approx(single, abs=1e-4)
    if family == "dec.resid":
        # the metric reads position 4: later decoder positions cannot reach it (causal mask)
        assert torch.allclose(res.values[:, 5], torch.zeros(4), atol=1e-5)
        # the last decoder layer at the metric's own position is the whole answer
        assert res.values[-1, 4].item() == pytest.approx(1.0, abs=1e-5)


def test_head_sweep_cells_equal_single_patches(setup):
    model, clean, corrupt, tgt, metric = setup
    pair = sweeps.prepare_pair(model, clean, corrupt, tgt, metric)
    donor = cache_activations(model, clean, tgt)
    for family, site in [("enc.self", "enc.{l}.self.z"), ("dec.cross", "dec.{l}.cross.z"), ("dec.self", "dec.{l}.self.z")]:
        res = sweeps.sweep_heads(model, clean, corrupt, tgt, metric, family=family, prepared=pair, batch_size=3)
        assert res.axes == ("layer", "head") and res.values.shape[1] == 4
        layer, head = res.values.shape[0] - 1, 2
        with patch(model, donor, [Site(site.format(l=layer), head=head)]):
            single = _score(model, corrupt, tgt, metric, res.clean_metric, res.corrupted_metric)
        assert res.values[layer, head].item() == pytest.approx(single, abs=1e-4)
    assert not torch.allclose(res.values, torch.zeros_like(res.values))


def test_gaussian_noise_is_causal_tracing(setup):
    model, clean, _, tgt, metric = setup
    noise = sweeps.GaussianNoise(positions=(1, 2), scale=3.0, seed=0)
    res = sweeps.sweep_positions(model, clean, noise, tgt, metric, family="enc.resid")
    assert res.corrupted_metric != pytest.approx(res.clean_metric)
    # restoring the clean embedding at one noised position removes that position's noise only
    assert torch.allclose(res.values[0, [0, 3, 4, 5, 6]], torch.zeros(5), atol=1e-5)
    both = sweeps.prepare_pair(model, clean, noise, tgt, metric)
    with noise.applied(model, 7), patch(model, both.clean, [Site("enc.embed", pos=(1, 2))]):
        assert torch.allclose(model(clean, tgt), both.clean.logits, atol=1e-6)
    with pytest.raises(PatchingError, match="outside the 7 source tokens"):
        sweeps.GaussianNoise(positions=(9,)).noise(model, 7)
    # decoder-only sites share one encoder run across the batch: it must be the noised one
    mem = sweeps.sweep_positions(model, clean, noise, tgt, metric, family="dec.memory", batch_size=4)
    with noise.applied(model, 7), patch(model, both.clean, [Site(s, pos=2) for s in ("dec.2.cross.k", "dec.2.cross.v")]):
        single = _score(model, clean, tgt, metric, mem.clean_metric, mem.corrupted_metric)
    assert mem.values[2, 2].item() == pytest.approx(single, abs=1e-4)
    assert mem.values[2, 2].item() != pytest.approx(0.0, abs=1e-3)


def test_path_patching_matches_a_two_step_computation(setup):
    model, clean, corrupt, tgt, metric = setup
    res = sweeps.path_patching(model, clean, corrupt, tgt, metric, batch_size=50)
    assert res.values.shape == (2, 4, 3, 4)
    donor, base = cache_activations(model, clean, tgt), cache_activations(model, corrupt, tgt)
    enc_z = [s for s in site_names(model) if s.startswith("enc.") and s.endswith(".z")]
    for (sl, sh, rl, rh) in [(0, 1, 2, 3), (1, 3, 0, 0)]:
        with patch(model, base, enc_z), patch(model, donor, [Site(f"enc.{sl}.self.z", head=sh)]):
            step1 = cache_activations(model, corrupt, tgt)
        with patch(model, step1, [Site(f"dec.{rl}.cross.k", head=rh), Site(f"dec.{rl}.cross.v", head=rh)]):
            single = _score(model, corrupt, tgt, metric, res.clean_metric, res.corrupted_metric)
        assert res.values[sl, sh, rl, rh].item() == pytest.approx(single, abs=1e-4)
    assert res.values.abs().max() > 1e-3  # some path carries something, so the comparison above is not 0 = 0
    last = sweeps.path_patching(model, clean, corrupt, tgt, metric, receiver_layers=[2])
    assert last.values.shape == (2, 4, 1, 4) and last.labels["receiver_layer"] == ("2",)
    assert torch.allclose(last.values[:, :, 0], res.values[:, :, 2], atol=1e-5)
    with pytest.raises(PatchingError, match="receiver_layers"):
        sweeps.path_patching(model, clean, corrupt, tgt, metric, receiver_layers=[3])


def test_bad_sweep_input(setup):
    model, clean, corrupt, tgt, metric = setup
    with pytest.raises(PatchingError, match="7 tokens and the corrupted one 8"):
        sweeps.sweep_positions(model, clean, torch.randint(4, 40, (1, 8)), tgt, metric)
    with pytest.raises(PatchingError, match="unknown layer x position family"):
        sweeps.sweep_positions(model, clean, corrupt, tgt, metric, family="resid")
    with pytest.raises(PatchingError, match="unknown direction"):
        sweeps.sweep_positions(model, clean, corrupt, tgt, metric, direction="both")
    with pytest.raises(PatchingError, match="does not change the metric"):
        sweeps.sweep_positions(model, clean, clean, tgt, metric)
    with pytest.raises(PatchingError, match="two different tokens"):
        sweeps.LogitDiff(3, 5, 5)
    with pytest.raises(PatchingError, match="labels"):
        sweeps.PatchingResult(torch.zeros(2, 3), torch.zeros(2, 3), ("a", "b"), {"a": ("x", "y"), "b": ("1",)}, "f",
                       "clean->corrupted", 1.0, 0.0)


def test_position_groups_patch_every_position_of_a_group_at_once(setup):
    model, clean, corrupt, tgt, metric = setup
    res = sweeps.sweep_position_groups(model, clean, corrupt, tgt, metric, {"edit": [2], "pair": [1, 4], "all": list(range(7))})
    assert res.axes == ("layer", "group") and res.values.shape == (3, 3)
    assert res.values[0, 0].item() == pytest.approx(1.0, abs=1e-5)  # the embedding at the edit: the clean run
    assert torch.allclose(res.values[:, 2], torch.ones(3), atol=1e-5)  # every position of a layer: the clean run
    donor = cache_activations(model, clean, tgt)
    with patch(model, donor, [Site("enc.0.resid", pos=(1, 4))]):
        single = _score(model, corrupt, tgt, metric, res.clean_metric, res.corrupted_metric)
    assert res.values[1, 1].item() == pytest.approx(single, abs=1e-4)
    with pytest.raises(PatchingError, match="within 0..6"):
        sweeps.sweep_position_groups(model, clean, corrupt, tgt, metric, {"bad": [9]})
