"""The decoder lens: the last layer reads exactly the model's logits (post-LN and pre-LN), a fresh tuned lens is the
logit lens, training it brings every layer closer to the final distribution on held-out inputs, saved lenses
refuse other models, hooks always go, bad input gets one line."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tests.conftest import tiny_inspection_model
from workbench import build_model, build_rnn, preset
from workbench.errors import CheckpointError, PatchingError
from workbench.inspect.capture import hooks_remaining
from workbench.inspect.lens import (
    TunedLens,
    decision_layer,
    kl_by_layer,
    lens_kl,
    logit_lens,
    train_tuned_lens,
)
from workbench.model.rnn import RNNConfig


def inputs(seed: int, B: int = 3, S: int = 7, T: int = 6, pad_rows: bool = True):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 40, (B, S), generator=g)
    tgt = torch.randint(4, 40, (B, T), generator=g)
    tgt[:, 0] = 2
    if pad_rows:  # ragged batch: padding in the last row of each
        src[-1, -2:] = 0
        tgt[-1, -2:] = 0
    return src, tgt


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_last_layer_lens_is_bit_identical_to_the_logits(norm_first):
    torch.manual_seed(1)
    model = build_model(preset("tiny", d_model=48, n_heads=4, n_enc_layers=2, n_dec_layers=3, norm_first=norm_first),
                        40, 40).eval()
    if norm_first:  # a final LayerNorm that is not the identity, so that forgetting it shows
        with torch.no_grad():
            model.decoder_norm.weight.uniform_(0.5, 2.0)
            model.decoder_norm.bias.uniform_(-1, 1)
    src, tgt = inputs(0)
    logits = model(src, tgt)
    lens = logit_lens(model, src, tgt)
    assert lens.shape == (3, *logits.shape)
    assert lens.dtype == torch.float32
    assert torch.equal(lens[-1], logits)
    assert not torch.allclose(lens[0], logits, atol=1e-3)  # an earlier layer reads something else
    assert torch.equal(model(src, tgt), logits) and hooks_remaining(model) == 0
    # the lens of a chosen layer is the same wherever it is read from
    assert torch.equal(logit_lens(model, src, tgt, layers=[-2])[0], lens[1])


def test_pre_ln_lens_applies_the_final_layernorm():
    """Without the final LayerNorm, the pre-LN last layer would not give the logits: the lens must apply it."""
    torch.manual_seed(1)
    model = build_model(preset("tiny", d_model=48, n_heads=4, n_enc_layers=2, n_dec_layers=2, norm_first=True),
                        40, 40).eval()
    src, tgt = inputs(2)
    from workbench.inspect.lens import decoder_states

    states, logits = decoder_states(model, src, tgt)
    assert not torch.allclose(model.generator(states[-1]), logits, atol=1e-3)
    assert torch.equal(logit_lens(model, src, tgt)[-1], logits)


def test_tuned_lens_at_initialisation_is_the_logit_lens():
    model = tiny_inspection_model()
    src, tgt = inputs(3)
    fresh = TunedLens.for_model(model)
    assert torch.equal(logit_lens(model, src, tgt, lens=fresh), logit_lens(model, src, tgt))


def test_training_brings_every_layer_closer_on_held_out_inputs():
    model = tiny_inspection_model()
    train = [inputs(10 + i, B=16, S=8, T=7) for i in range(6)]
    held_out = [inputs(100, B=32, S=8, T=7)]
    before = kl_by_layer(model, held_out).mean(0)  # (L,)
    lens, record = train_tuned_lens(model, train, steps=40, tokens_per_step=128, lr=3e-3)
    after = kl_by_layer(model, held_out, lens).mean(0)
    assert record.n_tokens == sum(int((t != 0).sum()) for _, t in train)
    assert after[-1] == before[-1] == 0.0  # the last layer is the model's output in both
    assert (after[:-1] < 0.8 * before[:-1]).all(), (before, after)
    assert all(p.grad is None for p in model.parameters())  # the model was frozen
    assert all(p.requires_grad for p in model.parameters())  # and given back as it was
    # lens_kl is the token-weighted mean of KL(final || lens), as torch computes it
    src, tgt = held_out[0]
    real = tgt != 0
    lens_logits, final = logit_lens(model, src, tgt), model(src, tgt)
    expected = torch.nn.functional.kl_div(torch.log_softmax(lens_logits[0][real], -1),
                                          torch.log_softmax(final[real], -1), log_target=True, reduction="batchmean")
    assert torch.allclose(lens_kl(lens_logits, final, real)[0], expected, rtol=1e-5)


def test_saved_lens_round_trips_and_refuses_another_model(tmp_path):
    model = tiny_inspection_model()
    lens, _ = train_tuned_lens(model, [inputs(5, B=8)], steps=3, tokens_per_step=32)
    path = lens.save(tmp_path)
    assert path.name == "tuned_lens.safetensors" and (tmp_path / "tuned_lens.json").is_file()
    loaded = TunedLens.load(tmp_path, model)
    src, tgt = inputs(6)
    assert torch.equal(logit_lens(model, src, tgt, lens=loaded), logit_lens(model, src, tgt, lens=lens))
    other = tiny_inspection_model()
    with torch.no_grad():
        other.generator.weight.add_(0.01)  # same architecture, other weights
    with pytest.raises(CheckpointError, match="another model"):
        TunedLens.load(tmp_path, other)
    with pytest.raises(CheckpointError, match="no tuned lens"):
        TunedLens.load(tmp_path / "nowhere")


def test_decision_layer_is_one_past_the_last_disagreement():
    # 3 layers, 1 row, 4 positions, vocabulary 2; final choices: token 1 everywhere
    top = torch.tensor([[1, 0, 0, 1],   # layer 0
                        [1, 1, 0, 0],   # layer 1
                        [1, 1, 1, 1]])  # layer 2 (final)
    logits = torch.nn.functional.one_hot(top, 2).float()[:, None]  # (L, 1, T, V)
    assert decision_layer(logits).tolist() == [[0, 1, 2, 2]]


def test_bad_input_is_refused_in_one_line():
    model = tiny_inspection_model()
    src, tgt = inputs(0)
    with pytest.raises(PatchingError, match=r"unknown site 'dec\.3\.resid'.*3 layers"):
        logit_lens(model, src, tgt, layers=[3])
    with pytest.raises(PatchingError, match="rows"):
        logit_lens(model, src, tgt[:2])
    with pytest.raises(PatchingError, match="token ids"):
        logit_lens(model, src.float(), tgt)
    rnn = build_rnn(RNNConfig(d_model=16), 40, 40).eval()
    with pytest.raises(PatchingError, match="recurrent baseline"):
        logit_lens(rnn, src, tgt)
    other = build_model(dataclasses.replace(preset("tiny", d_model=48, n_heads=4, n_enc_layers=2, n_dec_layers=2)),
                        40, 40)
    with pytest.raises(CheckpointError, match="another model"):
        logit_lens(other, src, tgt, lens=TunedLens.for_model(model))
    assert hooks_remaining(model) == 0
