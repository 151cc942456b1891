"""The model is compile-clean: no graph break and no recompilation across batches (training and cached decoding)."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

import workbench as wb
from workbench.model import attention
from workbench.translation import kernels
from workbench.translation.batching import make_batch
from workbench.translation.train import step_loss

VOCAB = 50


def _model(seed: int = 0) -> wb.Transformer:
    torch.manual_seed(seed)
    return wb.build_model(wb.preset("tiny", dropout=0.1), VOCAB, VOCAB)


def _batch(lengths: list[tuple[int, int]], seed: int):
    """Random id lists of the given (source, target) lengths, padded into one bucket (multiples of 8)."""
    g = torch.Generator().manual_seed(seed)
    src = [torch.randint(4, VOCAB, (s,), generator=g).tolist() for s, _ in lengths]
    tgt = [[1, *torch.randint(4, VOCAB, (t,), generator=g).tolist(), 2] for _, t in lengths]
    return make_batch(src, tgt, pad_id=0, pad_multiple=8)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("probed", [True, False], ids=["kernel-probed", "first-call-traced"])
def test_training_forward_has_no_graph_break(probed, monkeypatch):
    """Also when the fused kernel's behaviour on empty rows was never probed on this device type before tracing."""
    if not probed:
        monkeypatch.setattr(attention, "_FUSED_ZEROES_EMPTY_ROWS", {})
    model = _model().train()  # dropout on: its random draws must trace too
    b = _batch([(7, 5), (3, 6), (5, 2)], seed=0)
    assert bool((b.src == 0).any())  # padding present: the masked (fused) attention path is traced
    explained = torch._dynamo.explain(model)(b.src, b.tgt_in, project=False)
    assert explained.graph_break_count == 0, [r.reason for r in explained.break_reasons]
    assert explained.graph_count == 1


def test_training_step_compiles_once_for_batches_of_one_bucket(monkeypatch):
    """Forward + backward through AOTAutograd: one graph serves batches of one shape bucket, gradients as eager."""
    # compiled, dropout is F.dropout (the compiler fuses its own draws); eager takes the same form here (no
    # use_kernels: the model's own nn.Dropout), so that both sides draw the same masks from the same seed
    eager, compiled = _model().train(), _model().train()
    assert not any(isinstance(m, kernels.Dropout) for m in eager.modules())
    counter = CompileCounterWithBackend("aot_eager")
    net = torch.compile(compiled, backend=counter)
    # different lengths and padding patterns, all padded to S = 8, T = 8 (multiples of 8)
    batches = [_batch([(7, 5), (3, 6), (5, 2)], 1), _batch([(8, 7), (2, 1), (6, 3)], 2), _batch([(4, 4), (4, 4), (1, 6)], 3)]
    assert {(b.src.shape, b.tgt_in.shape) for b in batches} == {(torch.Size([3, 8]), torch.Size([3, 8]))}
    for i, b in enumerate(batches):
        for model, call in ((eager, eager), (compiled, net)):
            torch.manual_seed(100 + i)  # same dropout masks on both sides
            loss, _ = step_loss(call, model, b, pad_id=0, eps=0.1)
            model.zero_grad(set_to_none=True)
            loss.backward()
        torch.testing.assert_close(compiled.generator.weight.grad, eager.generator.weight.grad, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(compiled.encoder_layers[0].self_attn.in_proj_weight.grad,
                                   eager.encoder_layers[0].self_attn.in_proj_weight.grad, rtol=1e-4, atol=1e-6)
    assert counter.frame_count == 1  # compiled once, reused for the next two batches


def test_cached_decoding_has_no_graph_break_and_stops_recompiling():
    model = _model().eval()
    src = torch.randint(4, VOCAB, (4, 9))
    src[0, 6:] = 0
    with torch.no_grad():
        src_mask = model.src_mask(src)
        memory = model.encode(src, src_mask)
        explained = torch._dynamo.explain(model.decode)(src[:, :1], memory, src_mask, cache=model.init_cache())
        assert explained.graph_break_count == 0, [r.reason for r in explained.break_reasons]
        torch._dynamo.reset()

        counter = CompileCounterWithBackend("eager")
        decode = torch.compile(model.decode, backend=counter)

        def run(steps: int) -> tuple[torch.Tensor, list[int]]:
            cache, tok, frames, outs = model.init_cache(), torch.ones(4, 1, dtype=torch.long), [], []
            for _ in range(steps):
                logits = decode(tok, memory, src_mask, cache=cache)  # (B, 1, V)
                tok = logits[:, -1:].argmax(-1)
                outs.append(tok)
                frames.append(counter.frame_count)
            return torch.cat(outs, 1), frames

        tokens, frames = run(10)
        # the first step (empty cache), the second (a cache of one) and the third (the cache length becomes
        # dynamic) compile; no later step does, and a second sentence batch of the same shape compiles nothing
        assert frames[2] <= 3 and frames[-1] == frames[2], frames
        again, frames2 = run(10)
        assert frames2[-1] == frames[-1]
        torch.testing.assert_close(again, tokens)
        from workbench.translation.decode import greedy_decode

        # the compiled steps pick what eager greedy decoding picks (its last step is forced to its eos)
        reference = greedy_decode(model, src, bos_id=1, eos_id=VOCAB + 1, max_len=10)  # an eos never chosen
        assert torch.equal(tokens[:, :9], reference[:, :9])
