"""Head statistics, gating and gradient importance."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from workbench import ablate_heads, build_model, hooks_remaining, preset
from workbench.inspect.heads import (
    gate_heads,
    head_confidence,
    head_entropy,
    head_importance,
    positional_score,
    prune_order,
)


def test_entropy_and_confidence_on_known_patterns():
    T = 4
    uniform = torch.full((1, 1, T, T), 1 / T)
    onehot = torch.eye(T)[None, None]
    w = torch.cat([uniform, onehot], dim=1)  # (1, 2, T, T)
    ent = head_entropy(w)
    assert ent[0].item() == pytest.approx(math.log(T)) and ent[1].item() == pytest.approx(0.0, abs=1e-6)
    conf = head_confidence(w)
    assert conf.tolist() == pytest.approx([1 / T, 1.0])


def test_normalised_entropy_does_not_depend_on_the_number_of_keys():
    short, long = torch.full((1, 1, 3, 4), 1 / 4), torch.full((1, 1, 3, 9), 1 / 9)  # uniform over 4 and over 9 keys
    assert head_entropy(short).item() != pytest.approx(head_entropy(long).item())  # raw entropy grows with log n
    assert head_entropy(short, normalise=True).item() == pytest.approx(1.0)
    assert head_entropy(long, normalise=True).item() == pytest.approx(1.0)
    causal = torch.tril(torch.ones(4, 4))
    causal = (causal / causal.sum(-1, keepdim=True))[None, None]  # uniform over the allowed prefix, zeros after
    assert head_entropy(causal, normalise=True).item() == pytest.approx(1.0)  # row 0 (one key) is left out
    peaked = torch.tensor([[[[0.97, 0.01, 0.01, 0.01]]]])
    value = head_entropy(peaked, normalise=True).item()
    assert 0 < value < 0.2 and value == pytest.approx(head_entropy(peaked).item() / math.log(4))


def test_positional_score_finds_previous_token_head():
    T = 5
    prev = torch.zeros(1, 1, T, T)
    prev[0, 0, 0, 0] = 1
    for i in range(1, T):
        prev[0, 0, i, i - 1] = 1
    assert positional_score(prev, -1).item() == pytest.approx(1.0)
    assert positional_score(prev, +1).item() == pytest.approx(0.0)


@pytest.fixture
def model_and_batch():
    torch.manual_seed(0)
    model = build_model(preset("tiny"), 30, 30).eval()
    src = torch.randint(4, 30, (3, 6))
    tgt = torch.randint(4, 30, (3, 6))
    return model, SimpleNamespace(src=src, tgt_in=tgt[:, :-1], tgt_out=tgt[:, 1:])


def test_unit_gates_change_nothing_and_masking_changes_output(model_and_batch):
    model, b = model_and_batch
    plain = model(b.src, b.tgt_in)
    with gate_heads(model, {("dec.cross", 0): torch.ones(4)}):
        assert torch.equal(model(b.src, b.tgt_in), plain)
    with ablate_heads(model, [("dec.cross", 0, 1)]):
        masked = model(b.src, b.tgt_in)
    assert not torch.allclose(masked, plain)
    assert torch.equal(model(b.src, b.tgt_in), plain) and hooks_remaining(model) == 0


def test_masking_a_head_zeroes_its_output(model_and_batch):
    model, b = model_and_batch
    block = model.decoder_layers[0].cross_attn
    seen = {}
    with ablate_heads(model, [("dec.cross", 0, 2)]):
        # registered after the gate, so this probe sees the gated per-head outputs
        h = block.hook_z.register_forward_hook(lambda m, i, o: seen.setdefault("z", o))
        try:
            model(b.src, b.tgt_in)
        finally:
            h.remove()
    assert torch.all(seen["z"][:, 2] == 0) and not torch.all(seen["z"][:, 1] == 0)


def test_importance_matches_finite_difference(model_and_batch):
    model, b = model_and_batch
    imp = head_importance(model, [b], pad_id=0, normalise=False)
    assert set(imp) == {(k, i) for k in ("enc.self", "dec.self", "dec.cross") for i in range(2)}
    key, head, eps = ("dec.cross", 1), 3, 1e-3

    def loss_with(g):
        gates = torch.ones(4)
        gates[head] = g
        with gate_heads(model, {key: gates}):
            logits = model(b.src, b.tgt_in)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, 30), b.tgt_out.reshape(-1), ignore_index=0).item()

    fd = abs(loss_with(1 + eps) - loss_with(1 - eps)) / (2 * eps)
    assert imp[key][head].item() == pytest.approx(fd, rel=2e-2, abs=1e-4)
    order = prune_order(head_importance(model, [b], pad_id=0))
    assert len(order) == 6 * 4 and len(set(order)) == 24
