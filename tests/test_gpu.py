"""Checks that need a CUDA device (marker ``gpu``: deselected where torch sees none, see tests/conftest.py; CI never
runs them, ``bench/gpu_check.sh`` does on a GPU machine).

The CUDA decoder must find the CPU's translations token for token in fp32 and the same BLEU (within 0.1) in bf16,
ask the host at most once per step (``torch.cuda.set_sync_debug_mode`` reports every synchronising call), find the
same tokens with and without its cache; a bf16 training step must agree with fp32, and the training loop must make
no host synchronisation between its steps.
"""

from __future__ import annotations

import contextlib
import warnings

import pytest
import torch

import workbench.translation.decode as decode
import workbench.translation.train as train_mod
from workbench import build_model, preset
from workbench.translation.metrics import corpus_bleu

pytestmark = pytest.mark.gpu

CUDA = torch.device("cuda")


@pytest.fixture(scope="module")
def shipped():
    from workbench.translation.shipped import load_any

    model, tok, _ = load_any("small-de-en", device=torch.device("cpu"))
    return model.eval(), tok


@pytest.fixture(scope="module")
def test_pairs(multi30k_dir):
    from workbench.translation.data import load_multi30k

    return load_multi30k("test_2016_flickr", "de", "en", data_dir=multi30k_dir)


@pytest.mark.parametrize("beam", [1, 4])
def test_cuda_fp32_translates_as_the_cpu_does(shipped, test_pairs, beam):
    """200 test sentences, token for token, fp32 on CUDA (token-budget batches, the batch keeping its shape) against
    fp32 on one CPU thread (batches of 64, finished sentences leaving them)."""
    import copy

    model, tok = shipped
    sources = [s for s, _ in test_pairs[:200]]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cpu = decode.translate(model, tok, sources, beam=beam, precision="fp32")
    finally:
        torch.set_num_threads(threads)
    gpu_model = copy.deepcopy(model).to(CUDA)
    gpu = decode.translate(gpu_model, tok, sources, beam=beam, precision="fp32")
    differ = [i for i, (a, b) in enumerate(zip(cpu, gpu, strict=True)) if a != b]
    assert differ == [], f"{len(differ)} of 200 differ, first {differ[:5]}: {cpu[differ[0]]!r} vs {gpu[differ[0]]!r}"


def test_cuda_bf16_bleu_is_within_a_tenth_of_fp32(shipped, test_pairs):
    import copy

    model, tok = shipped
    gpu_model = copy.deepcopy(model).to(CUDA)
    sources, refs = [s for s, _ in test_pairs], [t for _, t in test_pairs]
    fp32 = corpus_bleu(decode.translate(gpu_model, tok, sources, beam=4, precision="fp32"), refs).score
    bf16 = corpus_bleu(decode.translate(gpu_model, tok, sources, beam=4, precision="bf16"), refs).score
    assert abs(bf16 - fp32) <= 0.1, (fp32, bf16)


@contextlib.contextmanager
def _cuda_syncs(monkeypatch, owner, attr):
    """Every synchronising CUDA call as a warning (torch.cuda.set_sync_debug_mode), with a marker at each call of
    ``owner.attr`` (a step)."""
    events: list[str] = []
    real = getattr(owner, attr)

    def marked(*args, **kwargs):
        events.append("step")
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, attr, marked)

    def show(message, *args, **kwargs):
        if "synchroniz" in str(message):
            events.append("sync")

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = show
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield events
        finally:
            torch.cuda.set_sync_debug_mode("default")


def _per_step(events: list[str]) -> list[int]:
    counts: list[int] = []
    for e in events:
        if e == "step":
            counts.append(0)
        elif counts:
            counts[-1] += 1
    return counts


@pytest.mark.parametrize("beam", [1, 4])
def test_cuda_decoding_syncs_at_most_once_a_step(shipped, test_pairs, beam, monkeypatch):
    import copy

    model, tok = shipped
    gpu_model = copy.deepcopy(model).to(CUDA)
    sources = [s for s, _ in test_pairs[:64]]
    decode.translate(gpu_model, tok, sources[:8], beam=beam)  # warm-up: lazy initialisation syncs once
    with _cuda_syncs(monkeypatch, decode._Stepper, "__call__") as events:
        decode.translate(gpu_model, tok, sources, beam=beam)
    per_step = _per_step(events)
    assert len(per_step) >= 10
    assert max(per_step[:-1]) <= 1, per_step  # the last segment also holds the batch's read-back to the host


@pytest.mark.parametrize("beam", [1, 4])
def test_cuda_cached_equals_uncached(beam):
    torch.manual_seed(0)
    model = build_model(preset("tiny", max_len=64), 40, 40).eval().to(CUDA)
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, 40, (6, 9), generator=g)
    src[1, 5:] = 0
    src = src.to(CUDA)
    if beam == 1:
        a, b = (decode.greedy_decode(model, src, max_extra=12, use_cache=c) for c in (True, False))
    else:
        a, b = (decode.beam_search(model, src, beam=beam, max_extra=12, use_cache=c) for c in (True, False))
    assert torch.equal(a, b)


def test_bf16_training_step_agrees_with_fp32():
    from workbench.runtime import Precision, autocast
    from workbench.translation.batching import make_batch
    from workbench.translation.objective import step_loss

    torch.manual_seed(0)
    model = build_model(preset("small", max_len=64), 1000, 1000).to(CUDA).train()
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, 1000, (32, 20), generator=g).tolist()
    tgt = [[2, *row[:15], 3] for row in torch.randint(4, 1000, (32, 15), generator=g).tolist()]
    batch = make_batch(src, tgt, 0).to(CUDA)
    torch.manual_seed(1)
    loss32, n = step_loss(model, model, batch, 0, 0.1)
    torch.manual_seed(1)
    with autocast(CUDA, Precision("bf16", "test")):
        loss16, _ = step_loss(model, model, batch, 0, 0.1)
    assert abs(float(loss16) - float(loss32)) / float(loss32) < 2e-2


def test_cuda_training_loop_has_no_sync_between_steps(monkeypatch):
    from workbench.translation.data import synthetic_pairs
    from workbench.translation.tokenizer import WordTokenizer
    from workbench.translation.train import TrainConfig, fit

    pairs = synthetic_pairs("copy", 600, 3, 8, 20, seed=0)
    tok = WordTokenizer.train(pairs)
    torch.manual_seed(0)
    model = build_model(preset("tiny", d_model=64, d_ff=128), tok.src_vocab_size, tok.tgt_vocab_size)
    cfg = TrainConfig(epochs=1, warmup_steps=50, max_tokens=400, eval_bleu=False, device="cuda", precision="bf16",
                      log_every=1000)
    with _cuda_syncs(monkeypatch, train_mod, "_optimizer_step") as events:
        fit(model, tok, pairs, pairs[:20], cfg)
    per_step = _per_step(events)
    assert len(per_step) >= 5
    assert max(per_step[1:-1]) == 0, per_step  # the first step's lazy initialisation and the epoch's end aside


@pytest.mark.parametrize("beam", [1, 4])
def test_cuda_graph_decoding_finds_eager_decodings_translations(shipped, test_pairs, beam):
    """Steps replayed as a captured CUDA graph translate as the eager CUDA steps do (200 test sentences, fp32)."""
    import copy

    model, tok = shipped
    gpu_model = copy.deepcopy(model).to(CUDA)
    sources = [s for s, _ in test_pairs[:200]]
    eager = decode.translate(gpu_model, tok, sources, beam=beam, precision="fp32")
    graphs = decode.translate(gpu_model, tok, sources, beam=beam, precision="fp32", graphs=True)
    differ = [i for i, (a, b) in enumerate(zip(eager, graphs, strict=True)) if a != b]
    assert differ == [], f"{len(differ)} of 200 differ, first {differ[:5]}"
