"""The analytic FLOP count agrees with PyTorch's own FLOP counter, and MFU uses it."""

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import workbench as wb
from workbench import build_model, preset
from workbench.translation.flops import forward_flops, mfu, model_train_flops, peak_flops, train_step_flops


@pytest.mark.parametrize("name", ["tiny", "small"])
def test_analytic_train_flops_match_torch_flop_counter(name):
    cfg, vocab = wb.preset(name), 300
    model = wb.build_model(cfg, vocab, vocab).train()
    src, tgt = torch.randint(4, vocab, (3, 7)), torch.randint(4, vocab, (3, 9))
    # the math backend decomposes attention into matmuls that the counter sees (fused CPU kernels are not counted)
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(src, tgt).sum().backward()
    measured = counter.get_total_flops()
    assert train_step_flops(cfg, 3, 7, 9, vocab) == pytest.approx(measured, rel=1e-4)
    assert model_train_flops(model, src, tgt) == train_step_flops(cfg, 3, 7, 9, vocab)
    assert train_step_flops(cfg, 3, 7, 9, vocab) == 3 * forward_flops(cfg, 3, 7, 9, vocab)


def test_no_count_for_the_recurrent_baseline():
    from workbench.model.rnn import RNNConfig, build_rnn

    model = build_rnn(RNNConfig(), 50, 50)
    assert model_train_flops(model, torch.ones(2, 3, dtype=torch.long), torch.ones(2, 4, dtype=torch.long)) is None


def test_peak_and_mfu(monkeypatch):
    monkeypatch.delenv("WORKBENCH_PEAK_TFLOPS", raising=False)
    assert peak_flops("cpu") is None and mfu(1e12, 1.0, "cpu") is None
    monkeypatch.setenv("WORKBENCH_PEAK_TFLOPS", "2")
    assert peak_flops("cpu") == 2e12 and mfu(1e12, 1.0, "cpu") == pytest.approx(0.5)
    monkeypatch.setenv("WORKBENCH_PEAK_TFLOPS", "fast")
    with pytest.raises(ValueError, match="WORKBENCH_PEAK_TFLOPS"):
        peak_flops("cpu")


def test_benchmark_reference_has_our_parameter_count():
    """The nn.Transformer we race against is the same size (its extra final LayerNorms of a post-LN stack removed)."""
    from workbench import build_model, preset
    from workbench.tools.bench.rivals import NNTransformer

    # base ties the source embedding too (paper section 3.4); shared tensors counted once
    for cfg in (preset("tiny"), preset("small"), preset("small", norm_first=True), preset("base")):
        ours = sum(p.numel() for p in build_model(cfg, 500, 500).parameters())
        ref = sum(p.numel() for p in NNTransformer(cfg, 500).parameters())
        assert ref == ours


def test_projection_flops_count_real_targets_only():
    cfg, vocab = preset("tiny"), 300
    full = forward_flops(cfg, 3, 7, 9, vocab)
    assert full - forward_flops(cfg, 3, 7, 9, vocab, n_projected=20) == 2 * (27 - 20) * cfg.d_model * vocab
    model = build_model(cfg, vocab, vocab)
    src, tgt = torch.ones(3, 7, dtype=torch.long), torch.ones(3, 9, dtype=torch.long)
    assert model_train_flops(model, src, tgt, n_projected=20) == 3 * forward_flops(cfg, 3, 7, 9, vocab, n_projected=20)
