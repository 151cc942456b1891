"""The precision setting (auto | fp32 | bf16), the CPU's bf16 path, and inspection staying fp32 whatever it is.

The processor's flags are patched where a test needs a CPU with (or without) bf16 matrix units, so every test runs,
and can fail, on any machine: bf16 arithmetic itself works on every x86 CPU (emulated where the units are missing).
"""

from __future__ import annotations

import pytest
import torch
from conftest import projected_loss_case

import workbench as wb
from workbench import runtime
from workbench.errors import ConfigError, PrecisionError
from workbench.translation import kernels
from workbench.translation.batching import Batch
from workbench.translation.decode import decoding_precision, translate
from workbench.translation.run import RunConfig
from workbench.translation.train import step_loss
from workbench.translation.train_config import TrainConfig

CPU = torch.device("cpu")


@pytest.fixture
def no_bf16(monkeypatch):
    """A processor without bf16 matrix units."""
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx2", "fma", "avx512f"})


@pytest.fixture
def bf16_units(monkeypatch):
    """A processor with bf16 matrix units (AVX-512 bf16)."""
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx2", "avx512f", "avx512_bf16"})
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True, raising=False)


def test_units_are_read_from_the_flags(no_bf16, monkeypatch):
    assert runtime.cpu_bf16_units() is None
    # oneDNN's own answer would hide the flags on a CPU where it says no (this project's AMD EPYC): say yes here
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True, raising=False)
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx512_bf16", "amx_bf16", "amx_tile"})
    assert runtime.cpu_bf16_units() == "amx_bf16"  # the tiles first
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx512_bf16"})
    assert runtime.cpu_bf16_units() == "avx512_bf16"


def test_fp32_is_fp32_and_unknown_names_are_refused():
    assert runtime.choose_precision("fp32", CPU).name == "fp32"
    with pytest.raises(ConfigError, match="fp16"):
        runtime.choose_precision("fp16", CPU)
    with pytest.raises(ConfigError, match="precision"):
        TrainConfig(precision="half")
    assert RunConfig.from_flat(epochs=1, precision="bf16").train.precision == "bf16"


def test_bf16_without_units_is_an_error_that_says_how_to_run_in_fp32(no_bf16):
    with pytest.raises(PrecisionError, match=r"no bf16 matrix units.*--precision fp32"):
        runtime.choose_precision("bf16", CPU)


def test_auto_without_units_is_fp32_and_measures_nothing(no_bf16):
    def probe():
        raise AssertionError("no probe without bf16 units")

    p = runtime.choose_precision("auto", CPU, probe)
    assert p.name == "fp32" and "no bf16 matrix units" in p.reason


@pytest.mark.parametrize("bf16_s, expected", [(0.5, "bf16"), (0.94, "bf16"), (0.97, "fp32"), (1.3, "fp32")])
def test_auto_with_units_follows_the_probe(bf16_units, monkeypatch, bf16_s, expected):
    monkeypatch.setattr(runtime, "probe_seconds", lambda probe, device: {"fp32": 1.0, "bf16": bf16_s})
    p = runtime.choose_precision("auto", CPU, lambda: None, what="a step")
    assert p.name == expected
    assert "avx512_bf16" in p.reason and f"{1e3 * bf16_s:.0f} ms in bf16" in p.reason


def test_probe_times_both_formats_and_leaves_the_random_state(bf16_units):
    dtypes = []

    def probe():
        dtypes.append(torch.mm(torch.ones(4, 4), torch.ones(4, 4)).dtype)

    torch.manual_seed(0)
    before = torch.rand(3)
    torch.manual_seed(0)
    seconds = runtime.probe_seconds(probe, CPU, rounds=3)
    assert set(seconds) == {"fp32", "bf16"} and all(s > 0 for s in seconds.values())
    assert dtypes.count(torch.bfloat16) == dtypes.count(torch.float32) == 4  # one warm-up and three rounds each
    assert torch.equal(torch.rand(3), before)


def test_cli_bf16_without_units_is_one_line_and_exit_2(no_bf16, capsys):
    from workbench.tools.cli.main import main

    rc = main(["translate", "--checkpoint", "small-de-en", "--device", "cpu", "--precision", "bf16", "Ein Hund ."])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert "no bf16 matrix units" in err[0] and "--precision fp32" in err[0]


# -- the bf16 kernels against fp32 references -------------------------------------------------------------------
@pytest.mark.parametrize("n_rows", [1, 130, 700])  # below, at and across the chunk size (131 rows of 8000)
def test_bf16_projected_loss_matches_fp32_reference(n_rows):
    hidden, weight, y, ref, g2 = projected_loss_case(n_rows)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours = kernels.projected_label_smoothed_cross_entropy(hidden, weight, y, 0.1)
    g1 = torch.autograd.grad(ours / n_rows, (hidden, weight))
    assert ours.dtype == torch.float32 and all(g.dtype == torch.float32 for g in g1)  # fp32 loss, fp32 gradients
    # bf16 products (8 bits of mantissa) summed over 64 terms: about 1 % of a logit; measured here 0.2 %
    torch.testing.assert_close(ours, ref, rtol=1e-2, atol=1e-2)
    for a, b in zip(g1, g2, strict=True):
        assert (a - b).norm() <= 2e-2 * b.norm(), ((a - b).norm(), b.norm())
    plain = kernels.projected_label_smoothed_cross_entropy(hidden, weight, y, 0.1)  # no autocast: the fp32 kernel
    assert not torch.equal(plain, ours)  # bf16 products really ran under autocast
    torch.testing.assert_close(plain, ref, rtol=1e-5, atol=1e-3)


def test_bf16_dropout_keeps_dtype_and_rate():
    torch.manual_seed(2)
    x = torch.ones(400_000, dtype=torch.bfloat16, requires_grad=True)
    y = kernels.cpu_dropout(x, 0.1)
    assert y.dtype == torch.bfloat16
    assert abs((y == 0).float().mean().item() - kernels.quantized_p(0.1)) < 3e-3
    (g,) = torch.autograd.grad(y.float().sum(), x)
    assert g.dtype == torch.bfloat16 and torch.equal(g == 0, y == 0)


def test_bf16_training_step_keeps_fp32_master_weights_and_matches_fp32():
    """One step's loss and gradients under CPU bf16 autocast: the residual stream is bf16, parameters and their
    gradients stay fp32, and the figures are those of fp32 within bf16's rounding."""
    torch.manual_seed(6)
    model = kernels.use_kernels(wb.build_model(wb.preset("small", dropout=0.0), 300, 300)).train()
    src = torch.randint(4, 300, (8, 12))
    tgt = torch.randint(4, 300, (8, 13))
    tgt[4:, -3:] = 0
    batch = Batch(src, tgt[:, :-1], tgt[:, 1:], pad_id=0)
    stream = []
    handle = model.encoder_layers[0].register_forward_hook(lambda _m, _i, out: stream.append(out.dtype))
    with runtime.autocast(CPU, "bf16"):
        loss16, n = step_loss(model, model, batch, pad_id=0, eps=0.1)
    grads16 = torch.autograd.grad(loss16 / n, list(model.parameters()))
    loss32, _ = step_loss(model, model, batch, pad_id=0, eps=0.1)
    grads32 = torch.autograd.grad(loss32 / n, list(model.parameters()))
    handle.remove()
    assert stream == [torch.bfloat16, torch.float32]
    assert loss16.dtype == torch.float32 and all(g.dtype == torch.float32 for g in grads16)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert loss16.item() != loss32.item()
    assert abs(loss16.item() - loss32.item()) < 1e-2 * loss32.item()
    total16 = torch.cat([g.flatten() for g in grads16])
    total32 = torch.cat([g.flatten() for g in grads32])
    assert (total16 - total32).norm() < 0.05 * total32.norm()


def test_bf16_attention_backward_runs_in_fp32_and_agrees():
    torch.manual_seed(7)
    q, k, v = (torch.randn(2, 4, 9, 16, requires_grad=True) for _ in range(3))
    mask = torch.ones(2, 1, 1, 9, dtype=torch.bool)
    mask[0, ..., 6:] = False
    out16, _ = wb.model.attention.scaled_dot_product_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), mask=mask)
    out32, _ = wb.model.attention.scaled_dot_product_attention(q, k, v, mask=mask)
    assert out16.dtype == torch.bfloat16
    torch.testing.assert_close(out16.float(), out32, rtol=2e-2, atol=2e-2)
    g16 = torch.autograd.grad(out16.float().sum(), (q, k, v))
    g32 = torch.autograd.grad(out32.sum(), (q, k, v))
    for a, b in zip(g16, g32, strict=True):
        assert (a - b).norm() <= 3e-2 * b.norm()


# -- training and decoding take the setting ---------------------------------------------------------------------
def _pairs(n: int = 40) -> list[tuple[str, str]]:
    words = ["ein", "hund", "mann", "frau", "läuft", "spielt", "im", "park", "schnee", "ball"]
    eng = ["a", "dog", "man", "woman", "runs", "plays", "in", "park", "snow", "ball"]
    out = []
    for i in range(n):
        idx = [(i * 3 + j) % len(words) for j in range(4 + i % 3)]
        out.append((" ".join(words[j] for j in idx), " ".join(eng[j] for j in idx)))
    return out


@pytest.fixture
def tiny_translator():
    from workbench.translation.tokenizer import SubwordTokenizer

    torch.manual_seed(0)
    tok = SubwordTokenizer.train(_pairs(), vocab_size=120, joint=True)
    model = wb.build_model(wb.preset("tiny"), tok.src_vocab_size, tok.tgt_vocab_size, tok.pad_id)
    return model, tok


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_fit_records_its_precision_and_keeps_fp32_state(bf16_units, tiny_translator, precision):
    from workbench.translation.train import fit

    model, tok = tiny_translator
    cfg = TrainConfig(max_steps=3, max_tokens=200, eval_bleu=False, precision=precision, warmup_steps=10)
    history = fit(model, tok, _pairs(), _pairs(8), cfg)
    assert history.precision == precision
    assert precision in history.precision_reason
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_fit_auto_follows_the_probe_and_says_why(bf16_units, tiny_translator, monkeypatch):
    from workbench.translation.train import fit

    calls = []

    def fake_seconds(probe, device):
        probe()  # the real training-step probe runs
        calls.append(1)
        return {"fp32": 1.0, "bf16": 0.5}

    monkeypatch.setattr(runtime, "probe_seconds", fake_seconds)
    model, tok = tiny_translator
    before = [p.detach().clone() for p in model.parameters()]
    cfg = TrainConfig(max_steps=1, max_tokens=200, eval_bleu=False, precision="auto", lr_factor=1e-9,
                      device="cpu")  # the CPU probe, also on a machine with a GPU
    history = fit(model, tok, _pairs(), _pairs(8), cfg)
    assert calls == [1] and history.precision == "bf16" and "a training step took 500 ms in bf16" in \
        history.precision_reason
    # the probe trained a copy: with a negligible learning rate the weights are as they were
    for a, b in zip(before, model.parameters(), strict=True):
        torch.testing.assert_close(a, b.detach(), rtol=0, atol=1e-6)


def test_a_run_resumed_again_and_again_says_why_once():
    from workbench.translation.train import History, _choose_precision

    history = History()
    history.precision, history.precision_reason = "bf16", "a training step took 500 ms in bf16, 1000 ms in fp32"
    cfg = TrainConfig(max_steps=1, precision="auto", device="cpu")
    reasons = []
    for _ in range(3):  # three resumes, each recording what the next one reads
        chosen = _choose_precision(torch.nn.Linear(1, 1), cfg, torch.device("cpu"), [], [], 0, False, history)
        history.precision, history.precision_reason = chosen.name, chosen.reason
        reasons.append(chosen.reason)
    assert chosen.name == "bf16"
    assert reasons == ["resumed in the run's format (a training step took 500 ms in bf16, 1000 ms in fp32)"] * 3


def test_translate_in_bf16_and_auto(bf16_units, tiny_translator, monkeypatch):
    model, tok = tiny_translator
    model.eval()
    sentences = [s for s, _ in _pairs(6)]
    assert len(translate(model, tok, sentences, beam=2, precision="bf16")) == 6
    monkeypatch.setattr(runtime, "probe_seconds", lambda probe, device: (probe(), {"fp32": 1.0, "bf16": 2.0})[1])
    p = decoding_precision(model, tok, sentences, beam=2, precision="auto")
    assert p.name == "fp32" and "beam-2 decoding took 2000 ms in bf16" in p.reason


# -- inspection is fp32 whatever the setting --------------------------------------------------------------------
def test_capture_interventions_and_attribution_run_in_fp32_under_bf16():
    from workbench.inspect.attribution import attribute
    from workbench.inspect.intervene import ablate_heads

    torch.manual_seed(8)
    model = wb.build_model(wb.preset("tiny"), 60, 60).eval()
    src = torch.randint(4, 60, (2, 7))
    tgt = torch.randint(4, 60, (2, 6))
    with wb.capture_attention(model) as ref:
        out_ref = model(src, tgt)
    with ablate_heads(model, [("enc.self", 0, 1)]):
        abl_ref = model(src, tgt)
    attr_ref = attribute(model, src[0], tgt[0], method="saliency")
    with runtime.autocast(CPU, "bf16"):
        assert model(src, tgt).dtype == torch.bfloat16  # the setting is on around these calls
        with wb.capture_attention(model) as cache:
            out = model(src, tgt)
        with ablate_heads(model, [("enc.self", 0, 1)]):
            abl = model(src, tgt)
        attr = attribute(model, src[0], tgt[0], method="saliency")
    assert torch.equal(out, out_ref) and torch.equal(abl, abl_ref)
    assert cache["dec.cross", 0].dtype == torch.float32
    for key in ref.keys():
        assert torch.equal(cache[key], ref[key]), key
    assert torch.equal(attr.scores, attr_ref.scores)


# -- the benchmark gives the reference the same precision ---------------------------------------------------------
def test_train_step_race_runs_both_sides_in_the_same_precision():
    from workbench.tools.bench.suites import random_batch, train_step_pair

    torch.manual_seed(9)
    src, tgt = random_batch(200, 4, 6, 7, CPU)
    for precision, expected in (("bf16", True), ("fp32", False)):
        ours, ref, fns = train_step_pair(wb.preset("tiny"), 200, src, tgt, CPU, precision=precision)
        seen = []
        for m in (ours, ref):
            m.register_forward_hook(lambda _m, _i, _o, seen=seen: seen.append(torch.is_autocast_enabled("cpu")))
        fns["ours"]()
        fns["nn.Transformer"]()
        assert seen == [expected, expected], precision


def test_matmul_peaks_alternate_the_formats():
    from workbench.lessons.measure import matmul_peaks

    calls = []
    real_mm = torch.mm

    def mm(a, b):
        calls.append(a.dtype)
        return real_mm(a, b)

    torch.mm = mm
    try:
        peaks = matmul_peaks(CPU, (torch.float32, torch.bfloat16), sizes=(64,), rounds=4)
    finally:
        torch.mm = real_mm
    assert set(peaks) == {torch.float32, torch.bfloat16} and all(v > 0 for v in peaks.values())
    f, b = torch.float32, torch.bfloat16
    assert calls == [f, b] + [f, b, b, f, f, b, b, f]  # warm-ups, then four rounds alternating which goes first


def test_table_says_when_the_machine_was_busy_and_shows_the_precision_race():
    from workbench.tools.bench.benchmark import format_table

    base = {"device": "cpu", "machine": "x86_64", "cpu_model": "Some CPU", "threads": 1, "torch": "2", "commit": None,
            "cpu_count": 2, "matmul_peak_tflops": {"fp32": 0.09, "bf16": 0.19}, "bf16_units": "avx512_bf16"}
    row = {"preset": "small", "step_s": {"fp32": 2.0, "bf16": 1.0}, "bf16_speedup": 2.0,
           "mfu": {"fp32": 0.05, "bf16": 0.04}}
    precision = {"train_step": [row], "beam4": {"preset": "small", "sent_per_s": {"fp32": 1.0, "bf16": 1.5},
                                                 "bf16_speedup": 1.5},
                 "auto": {"precision": "bf16", "reason": "auto: bf16, measured"}}
    busy = format_table({**base, "load_average_start": [10.0, 9.0, 8.0], "precision": precision})
    assert "a busy machine: load average 10.0 on 2 CPUs" in busy
    assert "fp32 90 GFLOP/s, bf16 190 GFLOP/s" in busy and "speed-up 2.00x" in busy and "speed-up 1.50x" in busy
    assert "--precision auto: bf16 (auto: bf16, measured)" in busy
    idle = format_table({**base, "load_average_start": [0.5, 0.5, 0.5], "precision": {"skipped": "no bf16 units"}})
    assert "busy" not in idle and "bf16 vs fp32: skipped (no bf16 units)" in idle


def test_reproducing_a_card_trains_in_the_cards_precision(monkeypatch, tmp_path):
    """The shipped cards were trained in fp32 before --precision existed: reproducing one must not take auto's bf16."""
    import argparse

    from workbench.tools.cli import main as cli

    seen = []
    monkeypatch.setattr(cli, "main", lambda argv: seen.append(list(argv)) or 1)  # stop before building
    args = argparse.Namespace(action="reproduce", name="small-de-en", out=str(tmp_path), data_dir=None)
    assert cli.cmd_pretrained(args) == 1
    (argv,) = seen
    assert argv[0] == "train" and argv[argv.index("--precision") + 1] == "fp32"


@pytest.mark.parametrize("amx", [False, True])
def test_bf16_decoding_step_attention_agrees_with_the_fused_kernel(amx, monkeypatch):
    """The CPU kernels chosen for a processor without AMX multiply a bf16 step's attention (one query per row) out
    (faster there than the bf16 flash kernel), and keep the flash kernel where it has AMX: either way it agrees with
    fp32 attention within bf16 rounding, and a fully masked row is zeros, as on the fused path."""
    import torch.nn.functional as F

    fused = F.scaled_dot_product_attention
    calls = []

    def counted(*args, **kwargs):
        calls.append(args[0].dtype)
        return fused(*args, **kwargs)

    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx512_bf16", "amx_bf16"} if amx else {"avx512_bf16"})
    kernel = kernels.choose_kernels().attention
    assert kernel.bf16_step_attention == ("flash" if amx else "explicit")  # chosen from the processor's flags
    monkeypatch.setattr(F, "scaled_dot_product_attention", counted)
    sdpa = wb.model.attention.scaled_dot_product_attention
    torch.manual_seed(8)
    q, k, v = torch.randn(6, 4, 1, 16), torch.randn(6, 4, 11, 16), torch.randn(6, 4, 11, 16)
    mask = torch.ones(6, 1, 1, 11, dtype=torch.bool)
    mask[1, ..., 4:] = False
    mask[2] = False  # no key at all
    out16, weights = sdpa(q.bfloat16(), k.bfloat16(), v.bfloat16(), mask=mask, fused=kernel)
    out32, _ = sdpa(q, k, v, mask=mask, fused=kernel)
    assert weights is None and out16.dtype == torch.bfloat16
    assert calls == ([torch.bfloat16] if amx else []) + [torch.float32]  # which path the bf16 step took
    torch.testing.assert_close(out16.float(), out32, rtol=2e-2, atol=2e-2)
    assert torch.equal(out16[2], torch.zeros_like(out16[2]))
    # one query per row, not the training shapes: several queries still take the fused kernel, and agree too
    q9 = torch.randn(6, 4, 9, 16)
    out16, _ = sdpa(q9.bfloat16(), k.bfloat16(), v.bfloat16(), mask=mask, fused=kernel)
    out32, _ = sdpa(q9, k, v, mask=mask, fused=kernel)
    torch.testing.assert_close(out16.float(), out32, rtol=2e-2, atol=2e-2)
    # the paper's attention alone (no kernel passed) takes torch's kernel, whatever the processor
    calls.clear()
    sdpa(q.bfloat16(), k.bfloat16(), v.bfloat16(), mask=mask)
    assert calls == [torch.bfloat16]


def test_the_bf16_step_attention_can_be_forced_and_says_what_it_takes(monkeypatch):
    """A kernel choice made by the caller wins over the processor's flags and reaches every attention block;
    translate() installs this processor's choice for its own call only; a misspelt choice is refused."""
    import torch.nn.functional as F

    q = torch.randn(2, 2, 1, 8).bfloat16()
    calls = []
    fused = F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **kw: calls.append(1) or fused(*a, **kw))
    for forced, amx in (("flash", False), ("explicit", True)):
        monkeypatch.setattr(runtime, "cpu_flags", lambda amx=amx: {"amx_bf16"} if amx else set())
        model = wb.build_model(wb.preset("tiny"), 20, 20).eval()
        kernels.use_kernels(model, kernels.Kernels(attention=kernels.CpuAttention(bf16_step_attention=forced)))
        blocks = [m for m in model.modules() if isinstance(m, wb.MultiHeadAttention)]
        assert {b.fused.bf16_step_attention for b in blocks} == {forced}  # the setting wins over the processor
        calls.clear()
        wb.model.attention.scaled_dot_product_attention(q, q, q, fused=blocks[0].fused)
        assert calls == ([1] if forced == "flash" else [])
        with kernels.attention_kernels(model):  # what translate() runs under: this processor's choice, then back
            assert {b.fused.bf16_step_attention for b in blocks} == {"flash" if amx else "explicit"}
        assert {b.fused.bf16_step_attention for b in blocks} == {forced}
    with pytest.raises(ValueError, match="bf16_step_attention='fast': use 'flash' or 'explicit'"):
        kernels.CpuAttention(bf16_step_attention="fast")


@pytest.mark.parametrize("bad", [True, False, "", "fp16"])
def test_precision_takes_a_name_or_a_resolved_precision_and_nothing_else(bad):
    """One type everywhere: ``Precision | "auto" | "fp32" | "bf16"``; a bool (the old form) or an empty string is
    refused with the names to use, by every entry point."""
    model = wb.build_model(wb.preset("tiny"), 30, 30).eval()
    with pytest.raises(ConfigError, match="choose one of"):
        runtime.choose_precision(bad, CPU)
    with pytest.raises(ConfigError, match="choose one of"), runtime.autocast(CPU, bad):
        pass
    with pytest.raises(ConfigError, match="precision"):
        TrainConfig(precision=bad)
    with pytest.raises(ConfigError, match="choose one of"):
        decoding_precision(model, None, [], precision=bad)
    resolved = runtime.Precision("bf16", "chosen elsewhere")
    assert runtime.choose_precision(resolved, CPU) is resolved  # a resolved precision passes through
    with runtime.autocast(CPU, "auto"):  # auto without a probe: bf16 on CUDA only
        assert not torch.is_autocast_enabled("cpu")
    with runtime.autocast(CPU, resolved):
        assert torch.is_autocast_enabled("cpu")
