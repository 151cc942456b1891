"""Head interventions: ablate_heads against independently edited copies of the model, restoration, errors."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import tiny_inspection_model

from workbench import hooks_remaining
from workbench.errors import InterventionError
from workbench.inspect.capture import capture_attention
from workbench.inspect.intervene import (
    ablate_heads,
    attention_blocks,
    head_means,
    intervened_greedy,
    resolve_heads,
)
from workbench.translation.decode import greedy_decode


@pytest.fixture(scope="module")
def setup():
    model = tiny_inspection_model()
    src = torch.randint(4, 40, (3, 7))
    src[1, 5:] = 0  # padding, so the padding-aware paths run too
    tgt_in = torch.randint(4, 40, (3, 6))
    tgt_in[:, 0] = 2
    tgt_in[2, 4:] = 0
    return model, src, tgt_in


def _block(model, kind, layer):
    layers = model.encoder_layers if kind == "enc.self" else model.decoder_layers
    return layers[layer].cross_attn if kind == "dec.cross" else layers[layer].self_attn


def _cols(block, head):
    return slice(head * block.d_head, (head + 1) * block.d_head)


def _without_head_columns(model, heads, means=None):
    """The reference: a deep copy whose W^O ignores the given heads (their input columns zeroed), and, for
    mean-ablation, whose output bias adds what the mean output of those heads would contribute."""
    ref = copy.deepcopy(model)
    with torch.no_grad():
        for kind, layer, head in heads:
            block = _block(ref, kind, layer)
            w = block.out_proj.weight  # (d_model, H * d_head)
            if means is not None:
                block.out_proj.bias += w[:, _cols(block, head)] @ means[(kind, layer)][head]
            w[:, _cols(block, head)] = 0.0
    return ref


@pytest.mark.parametrize("heads", [
    [("enc.self", 1, 2)],
    [("dec.self", 0, 0)],
    [("dec.cross", 2, 3)],
    [("dec.cross", 0, 1), ("enc.self", 0, 3), ("dec.self", 2, 1)],
])
def test_zero_ablation_equals_removing_the_heads_columns_of_w_o(setup, heads):
    model, src, tgt_in = setup
    plain = model(src, tgt_in)
    expected = _without_head_columns(model, heads)(src, tgt_in)
    with ablate_heads(model, heads) as ablated:
        got = model(src, tgt_in)
    assert ablated == sorted(heads)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert (got - plain).abs().max() > 1e-3  # the head mattered: the comparison above is not vacuous


def test_whole_layer_and_negative_indices(setup):
    model, src, tgt_in = setup
    ref = copy.deepcopy(model)
    with torch.no_grad():
        ref.decoder_layers[2].cross_attn.out_proj.weight.zero_()  # only the bias of W^O is left
    with ablate_heads(model, [("dec.cross", -1, None)]) as ablated:
        got = model(src, tgt_in)
    assert ablated == [("dec.cross", 2, h) for h in range(4)]
    torch.testing.assert_close(got, ref(src, tgt_in), rtol=1e-5, atol=1e-6)
    assert resolve_heads(model, [("enc.self", -2, -1)]) == {("enc.self", 0): [3]}


def test_ablation_also_acts_on_cached_greedy_decoding(setup):
    model, src, _ = setup
    heads = [("dec.cross", 1, 0), ("dec.self", 1, 2), ("enc.self", 0, 0)]
    ref = _without_head_columns(model, heads)
    with ablate_heads(model, heads):
        cached = greedy_decode(model, src, max_extra=6, use_cache=True)
        uncached = greedy_decode(model, src, max_extra=6, use_cache=False)
    expected = greedy_decode(ref, src, max_extra=6)
    assert torch.equal(cached, expected) and torch.equal(uncached, expected)


def test_head_means_average_the_real_query_positions(setup):
    model, src, tgt_in = setup
    means = head_means(model, [(src, tgt_in), (src[:2, :4], tgt_in[:2, :3])])
    assert set(means) == set(attention_blocks(model)) and means[("dec.cross", 0)].shape == (4, 12)
    # independent: z = pattern @ v from the captured weights and values, averaged over non-padding queries
    for kind, layer in [("enc.self", 1), ("dec.cross", 2), ("dec.self", 0)]:
        total, count = torch.zeros(4, 12, dtype=torch.float64), 0
        for s, t in [(src, tgt_in), (src[:2, :4], tgt_in[:2, :3])]:
            with torch.no_grad(), capture_attention(model, kinds=[kind], layers=layer, qkv=True) as cache:
                model(s, t)
            z = cache[kind, layer] @ cache[kind, layer, "v"]  # (B, H, Tq, d_head)
            real = (s if kind == "enc.self" else t) != 0  # (B, Tq)
            total += z.permute(1, 0, 2, 3)[:, real].sum(1).double()
            count += int(real.sum())
        torch.testing.assert_close(means[(kind, layer)], (total / count).float(), rtol=1e-5, atol=1e-6)


def test_mean_ablation_equals_w_o_columns_replaced_by_the_mean_contribution(setup):
    model, src, tgt_in = setup
    means = head_means(model, [(src, tgt_in)])
    heads = [("dec.cross", 1, 2), ("enc.self", 1, 0)]
    expected = _without_head_columns(model, heads, means=means)(src, tgt_in)
    with ablate_heads(model, heads, mode="mean", means=means):
        got = model(src, tgt_in)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    with ablate_heads(model, heads):
        zeroed = model(src, tgt_in)
    assert (got - zeroed).abs().max() > 1e-3  # mean- and zero-ablation differ


def test_outputs_restored_bit_for_bit_weights_untouched_no_hook_left(setup):
    model, src, tgt_in = setup
    state = {k: v.clone() for k, v in model.state_dict().items()}
    before = model(src, tgt_in)
    with ablate_heads(model, [("dec.cross", 0, None), ("enc.self", 1, 1)]):
        assert hooks_remaining(model) == 2
        assert not torch.equal(model(src, tgt_in), before)
    assert hooks_remaining(model) == 0 and torch.equal(model(src, tgt_in), before)
    with pytest.raises(RuntimeError, match="inside"), ablate_heads(model, [("dec.self", 0, 0)]):
        raise RuntimeError("error inside the block")
    assert hooks_remaining(model) == 0 and torch.equal(model(src, tgt_in), before)
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())


@pytest.mark.parametrize("heads, match", [
    ([("decoder", 0, 1)], "unknown attention kind .decoder.*enc.self"),
    ([("dec.cross", 3, 1)], "layer 3 out of range.*0..2"),
    ([("enc.self", -3, 0)], "layer -3 out of range"),
    ([("dec.cross", 0, 4)], "head 4 out of range.*0..3"),
    ([("dec.cross", 0, 1.0)], "head 1.0 .*not an integer"),
    ([("dec.cross", 0)], "not a \\(kind, layer, head\\) triple"),
    (("dec.cross", 0, 1), "wrap it in a list"),
])
def test_bad_heads_raise_clear_errors(setup, heads, match):
    model, *_ = setup
    with pytest.raises(InterventionError, match=match):
        with ablate_heads(model, heads):
            pass
    assert hooks_remaining(model) == 0


def test_bad_mode_and_means_raise_clear_errors(setup):
    model, src, tgt_in = setup
    with pytest.raises(InterventionError, match="unknown ablation mode 'drop'"):
        with ablate_heads(model, [("dec.cross", 0, 0)], mode="drop"):
            pass
    with pytest.raises(InterventionError, match="needs the heads' mean outputs"):
        with ablate_heads(model, [("dec.cross", 0, 0)], mode="mean"):
            pass
    with pytest.raises(InterventionError, match="shape \\(4, 3\\), expected"):
        with ablate_heads(model, [("dec.cross", 0, 0)], mode="mean", means={("dec.cross", 0): torch.zeros(4, 3)}):
            pass
    with pytest.raises(InterventionError, match="no entry for block \\(.dec.cross., 1\\)"):
        with ablate_heads(model, [("dec.cross", 1, 0)], mode="mean", means={("dec.cross", 0): torch.zeros(4, 12)}):
            pass
    assert hooks_remaining(model) == 0


def test_intervened_greedy_equals_greedy_decoding_under_the_same_ablation(setup):
    model, src, _ = setup
    row = src[0].tolist()
    reference = greedy_decode(model, src[:1], max_extra=8)[0].tolist()
    reference = reference[: reference.index(3) + 1] if 3 in reference else reference
    same = intervened_greedy(model, row, reference, heads=[], max_extra=8)
    assert same.out_ids == reference and same.diverged_at is None and same.cache is not None
    changed = 0
    for heads in ([("dec.cross", 0, None)], [("enc.self", 1, 2)], [("dec.self", 0, 1), ("dec.cross", 2, None)],
                  [("enc.self", 0, None), ("enc.self", 1, None)]):
        got = intervened_greedy(model, row, reference, heads=heads, max_extra=8, capture=False)
        with ablate_heads(model, heads):
            expected = greedy_decode(model, src[:1], max_extra=8)[0].tolist()
            logp = torch.log_softmax(model(src[:1], torch.tensor([[2, *reference[:-1]]]))[0], -1)
        assert got.out_ids == expected[: len(got.out_ids)] and set(expected[len(got.out_ids):]) <= {0}
        torch.testing.assert_close(got.reference_logprob, logp[torch.arange(len(reference)), reference])
        changed += got.out_ids != reference
    assert changed >= 2  # the continuation path (divergence, then cached steps) ran, not only the shortcut
    assert hooks_remaining(model) == 0


def test_a_reference_cut_before_its_eos_is_decoded_to_the_end_and_the_mode_is_kept():
    """The probe's finding: a reference without eos, matched token for token, came back as the truncated reference
    with diverged_at None, and the model was left in eval mode."""
    import workbench as wb
    from workbench.translation.decode import greedy_decode

    model, tok, _ = wb.pretrained("small-de-en")
    src = tok.encode_src(["Ein kleiner Junge spielt im Park ."])[0]
    full = [t for t in greedy_decode(model.eval(), torch.tensor([src]), bos_id=tok.bos_id, eos_id=tok.eos_id)[0].tolist()
            if t != tok.pad_id]
    model.train()
    outcome = wb.intervened_greedy(model, src, full[:4], heads=[], bos_id=tok.bos_id, eos_id=tok.eos_id)
    assert outcome.out_ids == full and outcome.out_ids[-1] == tok.eos_id
    assert model.training
