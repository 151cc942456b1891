"""Activation patching: own cache is a no-op, all sites reproduce the donor run, KV-cache patching equals full
recomputation, single sites move the output, hooks always go, bad input is refused with a useful message."""

from __future__ import annotations

import pytest
import torch

from workbench import build_model, preset
from workbench.errors import PatchingError
from workbench.inspect.patching import (
    Site,
    cache_activations,
    patch,
    patched_greedy,
    positions_differing,
    site_names,
)


def all_hooks(model) -> int:
    """Forward hooks and pre-hooks on every module (hook points and the embeddings alike)."""
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_site_names_cover_every_family(minimal_pair):
    model = minimal_pair[0]
    names = site_names(model)
    assert len(names) == 2 + 2 * 2 + 3 * 5
    for expected in ("enc.embed", "enc.1.resid", "enc.0.self.z", "dec.embed", "dec.2.self.z", "dec.0.cross.k",
                     "dec.0.cross.v", "dec.1.cross.z", "dec.2.resid"):
        assert expected in names


def test_cache_shapes(minimal_pair):
    model, clean, _, tgt = minimal_pair
    cache = cache_activations(model, clean, tgt)
    assert list(cache) == site_names(model)
    assert cache["enc.1.resid"].shape == (1, 7, 48)
    assert cache["enc.0.self.z"].shape == (1, 4, 7, 12)
    assert cache["dec.0.cross.k"].shape == (1, 4, 7, 12)
    assert cache["dec.1.cross.z"].shape == (1, 4, 6, 12)
    assert cache["dec.2.resid"].shape == (1, 6, 48)
    assert torch.equal(cache.logits, model(clean, tgt))


def test_own_cache_is_bit_identical(minimal_pair):
    model, clean, _, tgt = minimal_pair
    plain = model(clean, tgt)
    cache = cache_activations(model, clean, tgt)
    with patch(model, cache, site_names(model)):
        patched = model(clean, tgt)
    assert torch.equal(plain, patched)


def test_all_sites_from_corrupted_reproduce_corrupted_logits(minimal_pair):
    model, clean, corrupt, tgt = minimal_pair
    corrupted = cache_activations(model, corrupt, tgt)
    assert not torch.allclose(model(clean, tgt), corrupted.logits)  # the edit matters, so the check can fail
    with patch(model, corrupted, site_names(model)):
        assert torch.equal(model(clean, tgt), corrupted.logits)


@pytest.mark.parametrize("site", ["enc.embed", "enc.0.resid", "enc.1.self.z", "dec.0.cross.k", "dec.2.cross.v"])
def test_one_source_site_at_every_position_reproduces_the_part_of_the_run_it_feeds(minimal_pair, site):
    model, clean, corrupt, tgt = minimal_pair
    corrupted = cache_activations(model, corrupt, tgt)
    with patch(model, corrupted, [site]):
        patched = cache_activations(model, clean, tgt)
    assert torch.equal(patched[site], corrupted[site])
    # last decoder layer's cross-attention reads only the memory: patching both its K and V gives the donor's z
    with patch(model, corrupted, ["dec.2.cross.k", "dec.2.cross.v", "dec.1.resid"]):
        assert torch.equal(cache_activations(model, clean, tgt)["dec.2.cross.z"], corrupted["dec.2.cross.z"])


def test_position_and_head_selection_touch_only_what_they_name(minimal_pair):
    model, clean, corrupt, tgt = minimal_pair
    clean_cache = cache_activations(model, clean, tgt)
    corrupted = cache_activations(model, corrupt, tgt)
    with patch(model, corrupted, [Site("enc.1.self.z", pos=2, head=1)]):
        run = cache_activations(model, clean, tgt)
    z = run["enc.1.self.z"]
    assert torch.equal(z[:, 1, 2], corrupted["enc.1.self.z"][:, 1, 2])
    keep = torch.ones_like(z, dtype=torch.bool)
    keep[:, 1, 2] = False
    assert torch.equal(z[keep], clean_cache["enc.1.self.z"][keep])
    assert not torch.equal(z, clean_cache["enc.1.self.z"])


def test_patching_the_edited_position_in_the_embedding_restores_the_run(minimal_pair):
    model, clean, corrupt, tgt = minimal_pair
    edit = positions_differing(clean[0].tolist(), corrupt[0].tolist())
    assert edit == [2]
    clean_cache = cache_activations(model, clean, tgt)
    with patch(model, clean_cache, [Site("enc.embed", pos=edit[0])]):
        restored = model(corrupt, tgt)
    # the embedding differs only at the edit (positions are added per position), so this is the clean run
    assert torch.equal(restored, clean_cache.logits)
    with patch(model, clean_cache, [Site("enc.embed", pos=0)]):  # an unedited position changes nothing
        assert torch.equal(model(corrupt, tgt), model(corrupt, tgt))
        assert not torch.allclose(model(corrupt, tgt), clean_cache.logits)


def _step_logits(model, src, tokens, use_cache):
    """Last-position logits of every decoding step over a fixed token sequence, with or without the KV cache."""
    src_mask = model.src_mask(src)
    memory = model.encode(src, src_mask)
    cache = model.init_cache(memory, src_mask) if use_cache else None
    out = []
    for t in range(tokens.shape[1]):
        feed = tokens[:, t:t + 1] if use_cache else tokens[:, :t + 1]
        out.append(model.decode(feed, memory, src_mask, cache)[:, -1])
    return torch.stack(out, 1)  # (B, T, V)


@pytest.mark.parametrize("sites", [
    ["dec.1.resid"],
    [Site("dec.1.self.z", pos=(1, 3), head=2)],  # layer 0 sees only the shared target: layer 1
    ["dec.embed", Site("dec.2.cross.z", pos=4)],
    [Site("enc.0.resid", pos=2), Site("dec.1.cross.k", pos=(0, 2)), "dec.1.cross.v"],
])
def test_kv_cache_patching_equals_full_recomputation(minimal_pair, sites):
    model, clean, corrupt, tgt = minimal_pair
    clean_cache = cache_activations(model, clean, tgt)
    with torch.no_grad(), patch(model, clean_cache, sites):
        stepped = _step_logits(model, corrupt, tgt, use_cache=True)
        full = _step_logits(model, corrupt, tgt, use_cache=False)
        teacher = model(corrupt, tgt)
    plain = model(corrupt, tgt)
    assert not torch.allclose(teacher, plain, atol=1e-4)  # the patch does something
    torch.testing.assert_close(stepped, full, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(stepped, teacher, atol=1e-5, rtol=1e-5)


def test_patched_greedy_with_and_without_cache(minimal_pair):
    model, clean, corrupt, tgt = minimal_pair
    clean_cache = cache_activations(model, clean, tgt)
    sites = ["dec.0.resid", Site("enc.1.resid", pos=2)]
    fast = patched_greedy(model, corrupt, clean_cache, sites, use_cache=True, max_extra=5)
    slow = patched_greedy(model, corrupt, clean_cache, sites, use_cache=False, max_extra=5)
    assert torch.equal(fast, slow)
    assert all_hooks(model) == 0


def test_no_hook_remains_after_the_block_or_an_exception(minimal_pair):
    model, clean, corrupt, tgt = minimal_pair
    assert all_hooks(model) == 0
    cache = cache_activations(model, clean, tgt)
    assert all_hooks(model) == 0
    with patch(model, cache, site_names(model)):
        assert all_hooks(model) > len(site_names(model)) - 1
        model(corrupt, tgt)
    assert all_hooks(model) == 0
    with pytest.raises(RuntimeError, match="boom"), patch(model, cache, ["enc.0.resid", "dec.1.resid"]):
        raise RuntimeError("boom")
    assert all_hooks(model) == 0
    longer = torch.randint(4, 40, (1, 9))
    with pytest.raises(PatchingError, match="equal token length"), patch(model, cache, ["enc.0.resid"]):
        model(longer, tgt)  # the error is raised inside the forward pass, by the hook
    assert all_hooks(model) == 0


def test_unknown_site_lists_the_valid_ones(minimal_pair):
    model, clean, _, tgt = minimal_pair
    cache = cache_activations(model, clean, tgt)
    with pytest.raises(PatchingError, match=r"enc\.embed.*dec\.2\.resid"), patch(model, cache, ["enc.9.resid"]):
        pass
    with pytest.raises(PatchingError, match="unknown site 'enc.resid'"):
        cache_activations(model, clean, tgt, sites=["enc.resid"])
    assert list(cache_activations(model, clean, tgt, sites="enc.embed").keys()) == ["enc.embed"]  # a name, not letters
    with pytest.raises(PatchingError, match="no heads"):
        Site("enc.0.resid", head=1)
    with pytest.raises(PatchingError, match="position 7 out of range"), patch(model, cache, [("enc.0.resid", 7)]):
        pass
    for not_sites in (None, 3, 2.5):
        with pytest.raises(PatchingError, match="sites must be a site name, a Site, or a list of them"), \
                patch(model, cache, not_sites):
            pass
    with pytest.raises(PatchingError, match="is not a site"), patch(model, cache, [None]):
        pass
    assert all_hooks(model) == 0


def test_unequal_pair_lengths_are_refused():
    with pytest.raises(PatchingError, match="7 and 8 tokens"):
        positions_differing(list(range(7)), list(range(8)))


def test_cache_from_another_model_is_refused(minimal_pair):
    model, clean, _, tgt = minimal_pair
    other = build_model(preset("tiny", d_model=32, n_heads=4, n_enc_layers=2, n_dec_layers=3), 40, 40).eval()
    cache = cache_activations(other, clean, tgt)
    with pytest.raises(PatchingError, match="another model"), patch(model, cache, ["enc.0.resid"]):
        pass
    assert all_hooks(model) == 0


def test_rnn_is_refused_with_a_reason():
    from workbench import RNNConfig, build_rnn

    rnn = build_rnn(RNNConfig(), 40, 40)
    with pytest.raises(PatchingError, match="not a workbench encoder-decoder Transformer"):
        site_names(rnn)


@pytest.mark.parametrize("name", ["opus-mt-like", "separate-vocabularies"])
def test_an_imported_marian_model_is_patched_like_ours(name):
    """Issue 34 item 4: any model the workbench loads, here a random Marian converted by the Hugging Face bridge."""
    from tests.conftest import require_module

    require_module("transformers", 'pip install -e ".[hf]"')
    from tests.test_bridges import PAD, marian
    from workbench.bridges.huggingface import from_huggingface

    model, _ = from_huggingface(marian(name))
    model.eval()
    g = torch.Generator().manual_seed(0)
    clean = torch.randint(1, PAD, (1, 8), generator=g)
    corrupt = clean.clone()
    corrupt[0, 3] = (clean[0, 3] % (PAD - 2)) + 1
    tgt = torch.randint(1, model.tgt_vocab_size - 1, (1, 6), generator=g)
    tgt[0, 0] = PAD  # Marian's decoder start token
    corrupted = cache_activations(model, corrupt, tgt)
    with torch.no_grad():
        assert not torch.allclose(model(clean, tgt), corrupted.logits)
        with patch(model, corrupted, site_names(model)):
            assert torch.equal(model(clean, tgt), corrupted.logits)
        with patch(model, corrupted, [Site("enc.1.resid", pos=3), "dec.0.cross.k"]):
            torch.testing.assert_close(_step_logits(model, clean, tgt, True), model(clean, tgt), atol=1e-5, rtol=1e-5)
    assert all_hooks(model) == 0


def test_beam_search_under_a_patch_is_the_same_with_and_without_the_kv_cache(minimal_pair):
    """Beam search expands the batch to the beams and reorders the cache: a one-sentence cache is broadcast."""
    from workbench.translation.decode import beam_search

    model, clean, corrupt, tgt = minimal_pair
    clean_cache = cache_activations(model, clean, tgt)
    sites = [Site("enc.1.resid", pos=2), "dec.1.resid", Site("dec.2.cross.z", head=1)]
    with patch(model, clean_cache, sites):
        fast, fast_scores = beam_search(model, corrupt, beam=3, max_extra=4, use_cache=True, return_scores=True)
        slow, slow_scores = beam_search(model, corrupt, beam=3, max_extra=4, use_cache=False, return_scores=True)
    plain_scores = beam_search(model, corrupt, beam=3, max_extra=4, return_scores=True)[1]
    assert torch.equal(fast, slow)
    torch.testing.assert_close(fast_scores, slow_scores, atol=1e-4, rtol=1e-4)
    assert not torch.allclose(fast_scores, plain_scores)  # the patch reaches the beams
    assert all_hooks(model) == 0


def test_cache_from_a_model_with_other_weights_is_refused_unless_allowed(minimal_pair):
    """Same architecture and vocabulary, other weights (another seed): refused by default, naming both fingerprints
    and the way out; with allow_other_model=True the other model's activations are patched in and change the run."""
    from workbench.inspect.patching import weights_fingerprint

    model, clean, _, tgt = minimal_pair
    torch.manual_seed(1)
    other = build_model(preset("tiny", d_model=48, n_heads=4, n_enc_layers=2, n_dec_layers=3), 40, 40).eval()
    foreign = cache_activations(other, clean, tgt)
    assert foreign.fingerprint == weights_fingerprint(other) != weights_fingerprint(model)
    with pytest.raises(PatchingError, match=r"other weights .*allow_other_model=True"), patch(model, foreign, "enc.1.resid"):
        pass
    assert all_hooks(model) == 0
    plain = model(clean, tgt)
    with patch(model, foreign, ["enc.1.resid"], allow_other_model=True):
        crossed = model(clean, tgt)
    assert not torch.allclose(plain, crossed)  # the foreign memory reached the decoder
    with pytest.raises(PatchingError, match="other weights"):
        patched_greedy(model, clean, foreign, ["enc.1.resid"], bos_id=2, eos_id=3)
    own = cache_activations(model, clean, tgt)
    with patch(model, own, ["enc.1.resid"]):  # its own cache still patches
        assert torch.equal(model(clean, tgt), plain)


def test_weights_fingerprint_follows_in_place_changes(minimal_pair):
    """The fingerprint is remembered per model, yet an in-place change of one weight (an optimizer step,
    load_state_dict) gives a new one, and restoring the weights gives the old one back."""
    import copy

    from workbench.inspect.patching import weights_fingerprint

    model = copy.deepcopy(minimal_pair[0])
    before = weights_fingerprint(model)
    assert weights_fingerprint(model) == before == weights_fingerprint(copy.deepcopy(model))
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        model.decoder_layers[2].ff.linear2.weight[0, 0] += 1e-3
    changed = weights_fingerprint(model)
    assert changed != before
    model.load_state_dict(saved)
    assert weights_fingerprint(model) == before


def test_patched_greedy_with_a_batched_cache_at_a_decoder_site(monkeypatch):
    """The probe's finding: once one sentence of the batch finished, greedy decoding dropped its row and the cache of
    the batch no longer matched (a PatchingError naming batch sizes). Self-patching must give the plain translation."""
    import workbench as wb
    import workbench.translation.decode as decode
    from workbench.translation.decode import greedy_decode

    monkeypatch.setattr(decode, "_fewer_rows_alike", lambda *_: True)  # the CPU drops every finished row

    model, tok, _ = wb.pretrained("small-de-en")
    ids = tok.encode_src(["Ein Hund .", "Ein Mann fährt Fahrrad auf einer Straße in der Stadt .", "Zwei Kinder spielen .",
                          "Eine Frau liest ein Buch im Park und trinkt Kaffee .", "Ein Mann .",
                          "Leute stehen vor einem Gebäude ."])
    width = max(map(len, ids))
    src = torch.tensor([row + [tok.pad_id] * (width - len(row)) for row in ids])
    plain = greedy_decode(model, src, bos_id=tok.bos_id, eos_id=tok.eos_id)
    tgt_in = torch.cat([torch.full((len(ids), 1), tok.bos_id), plain[:, :-1]], dim=1)
    cache = wb.cache_activations(model, src, tgt_in)
    patched = wb.patched_greedy(model, src, cache, ["dec.0.resid"], bos_id=tok.bos_id, eos_id=tok.eos_id)
    assert tok.decode_tgt(patched) == tok.decode_tgt(plain)
