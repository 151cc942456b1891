"""Attention rollout and attention flow (Abnar & Zuidema, 2020) on hand-computed cases and a real model."""

from __future__ import annotations

import pytest
import torch

from workbench import build_model, preset
from workbench.inspect.capture import capture_attention
from workbench.inspect.flow import (
    FlowInputError,
    attention_flow,
    attention_rollout,
    decoder_attention_flow,
    decoder_rollout,
    residual_attention,
    rollout_from_cache,
)


def _heads(*mats):
    """(H, T, T) from H matrices."""
    return torch.stack([torch.tensor(m, dtype=torch.float64) for m in mats])


def test_rollout_of_an_identity_stack_is_the_identity():
    eye = torch.eye(5).expand(3, 5, 5)  # (H, T, T): every head attends to itself
    for residual in (True, False):
        R = attention_rollout([eye] * 4, residual=residual)
        assert torch.equal(R, torch.eye(5, dtype=torch.float64))
    assert torch.equal(attention_rollout([eye] * 3, cumulative=True), torch.eye(5, dtype=torch.float64).expand(3, 5, 5))


def test_residual_matrix_by_hand():
    a = _heads([[1.0, 0.0], [0.4, 0.6]], [[1.0, 0.0], [0.8, 0.2]])  # head mean [[1, 0], [0.6, 0.4]]
    expected = torch.tensor([[1.0, 0.0], [0.3, 0.7]], dtype=torch.float64)  # 0.5 * mean + 0.5 * I
    torch.testing.assert_close(residual_attention(a), expected)
    masked = torch.zeros(1, 2, 2)
    masked[0, 0] = torch.tensor([0.5, 0.5])  # query 1 attended to nothing (fully masked row)
    torch.testing.assert_close(residual_attention(masked), torch.tensor([[0.75, 0.25], [0.0, 1.0]], dtype=torch.float64))


def test_rollout_is_the_product_of_residual_matrices_and_rows_sum_to_one():
    g = torch.Generator().manual_seed(0)
    layers = [torch.rand(2, 4, 3, 6, 6, generator=g).softmax(-1) for _ in range(3)]  # (B, C, H, T, T)
    R = attention_rollout(layers)
    assert R.shape == (2, 4, 6, 6)
    torch.testing.assert_close(R.sum(-1), torch.ones(2, 4, 6, dtype=torch.float64))
    m = [0.5 * a.double().mean(-3) + 0.5 * torch.eye(6, dtype=torch.float64) for a in layers]  # rows already sum to 1
    torch.testing.assert_close(R, m[2] @ m[1] @ m[0])
    assert not torch.allclose(R, m[0] @ m[1] @ m[2])  # order matters: bottom layer first


def test_decoder_rollout_by_hand():
    enc = [_heads([[1.0, 0.0], [0.5, 0.5]])]  # rollout [[1, 0], [0.25, 0.75]]
    dec_self = [_heads([[1.0, 0.0], [0.6, 0.4]]), _heads([[1.0, 0.0], [0.2, 0.8]])]
    cross = [_heads([[0.4, 0.6], [1.0, 0.0]]), _heads([[0.0, 1.0], [0.5, 0.5]])]
    one = decoder_rollout(enc, dec_self[:1], cross[:1])
    torch.testing.assert_close(one.encoder, torch.tensor([[1.0, 0.0], [0.25, 0.75]], dtype=torch.float64))
    torch.testing.assert_close(one.target, torch.tensor([[0.5, 0.0], [0.15, 0.35]], dtype=torch.float64))
    torch.testing.assert_close(one.source, torch.tensor([[0.275, 0.225], [0.5, 0.0]], dtype=torch.float64))
    two = decoder_rollout(enc, dec_self, cross)
    torch.testing.assert_close(two.target, torch.tensor([[0.25, 0.0], [0.0925, 0.1575]], dtype=torch.float64))
    torch.testing.assert_close(two.source, torch.tensor([[0.2625, 0.4875], [0.55125, 0.19875]], dtype=torch.float64))
    torch.testing.assert_close(two.source.sum(-1) + two.target.sum(-1), torch.ones(2, dtype=torch.float64))
    torch.testing.assert_close(two.source_normalised().sum(-1), torch.ones(2, dtype=torch.float64))


def test_flow_on_a_hand_made_graph():
    # no residual: edges (layer 0, j) -> (layer 1, i) with capacity A1[i, j], then A2 to layer 2.
    A1 = [[0.5, 0.5], [0.2, 0.8]]
    A2 = [[1.0, 0.0], [0.3, 0.7]]
    F = attention_flow([_heads(A1), _heads(A2)], residual=False)
    # input 0 -> output 0: via node 0 min(.5, 1) = .5, via node 1 min(.2, 0) = 0          -> .5
    # input 0 -> output 1: via node 0 min(.5, .3) = .3, via node 1 min(.2, .7) = .2       -> .5
    # input 1 -> output 0: via node 0 min(.5, 1) = .5, via node 1 min(.8, 0) = 0          -> .5
    # input 1 -> output 1: via node 0 min(.5, .3) = .3, via node 1 min(.8, .7) = .7       -> 1.0
    torch.testing.assert_close(F, torch.tensor([[0.5, 0.5], [0.5, 1.0]], dtype=torch.float64), atol=1e-8, rtol=0)
    rollout = attention_rollout([_heads(A1), _heads(A2)], residual=False)  # [[.5, .5], [.29, .71]]: not the flow
    assert abs(float(rollout[1, 1]) - 0.71) < 1e-12
    torch.testing.assert_close(attention_flow([_heads(A1), _heads(A2)], residual=False, outputs=[1]), F[1:])


def test_flow_of_identity_stack_and_bottleneck():
    eye = torch.eye(4).expand(2, 4, 4)
    torch.testing.assert_close(attention_flow([eye] * 3), torch.eye(4, dtype=torch.float64))
    # a 3-layer chain: input 1 reaches node 0 of level 2 only over an edge of 0.1, and both outputs read that node
    chain = [_heads([[1.0, 0.0], [0.0, 1.0]]), _heads([[0.9, 0.1], [0.0, 1.0]]), _heads([[1.0, 0.0], [1.0, 0.0]])]
    F = attention_flow(chain, residual=False)
    torch.testing.assert_close(F, torch.tensor([[0.9, 0.1], [0.9, 0.1]], dtype=torch.float64), atol=1e-8, rtol=0)


def test_decoder_flow_by_hand():
    enc = [_heads([[1.0, 0.0], [0.5, 0.5]])]  # residual: [[1, 0], [.25, .75]]
    dec_self = [_heads([[1.0]])]
    cross = [_heads([[0.4, 0.6]])]  # capacities 0.5 * A: .2 from encoder top 0, .3 from encoder top 1
    F = decoder_attention_flow(enc, dec_self, cross)
    # source 0: via top 0 min(1, .2) = .2, via top 1 min(.25, .3) = .25 -> .45; source 1: via top 1 min(.75, .3)
    torch.testing.assert_close(F, torch.tensor([[0.45, 0.3]], dtype=torch.float64), atol=1e-8, rtol=0)
    R = decoder_rollout(enc, dec_self, cross)
    torch.testing.assert_close(R.source, torch.tensor([[0.275, 0.225]], dtype=torch.float64))


def test_rollouts_of_a_real_model_from_the_cache():
    torch.manual_seed(0)
    model = build_model(preset("tiny"), 30, 30).eval()
    src, tgt_in = torch.randint(4, 30, (2, 7)), torch.randint(4, 30, (2, 5))
    with torch.no_grad(), capture_attention(model) as cache:
        model(src, tgt_in)
    r = rollout_from_cache(cache, index=1)
    assert r.source.shape == (5, 7) and r.target.shape == (5, 5) and r.encoder.shape == (7, 7)
    torch.testing.assert_close(r.source.sum(-1) + r.target.sum(-1), torch.ones(5, dtype=torch.float64))
    assert torch.all(r.target.triu(1) == 0)  # causal: no share from future decoder inputs
    enc = [cache["enc.self", layer][1] for layer in range(2)]
    torch.testing.assert_close(r.encoder, attention_rollout(enc))
    flow = attention_flow(enc, outputs=[0, 3])
    assert flow.shape == (2, 7) and torch.all(flow >= 0) and torch.all(flow <= 1 + 1e-6)
    dflow = decoder_attention_flow(enc, [cache["dec.self", i][1] for i in range(2)], [cache["dec.cross", i][1] for i in range(2)])
    assert dflow.shape == (5, 7) and torch.all(dflow <= 1 + 1e-6)  # the sink's incoming capacity is 0.5 + 0.5
    one = decoder_attention_flow(enc, [cache["dec.self", 0][1]], [cache["dec.cross", 0][1]])
    assert torch.all(one <= 0.5 + 1e-6) and torch.all(one > 0)  # one decoder layer: all of it over cross edges


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(FlowInputError, match="empty"):
        attention_rollout([])
    with pytest.raises(FlowInputError, match="expected \\(..., H, Tq, Tk\\)"):
        attention_rollout([torch.eye(3)])
    with pytest.raises(FlowInputError, match="one sentence"):
        attention_flow([torch.eye(3).expand(2, 1, 3, 3)])
    with pytest.raises(FlowInputError, match="outputs \\[5\\]"):
        attention_flow([torch.eye(3)[None]], outputs=[5])
    with pytest.raises(FlowInputError, match="2 decoder self-attention layers but 1"):
        decoder_rollout([torch.eye(2)[None]], [torch.eye(2)[None]] * 2, [torch.eye(2)[None]])
