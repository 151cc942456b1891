"""The suites of ``workbench bench`` that probe one property each (:mod:`workbench.tools.bench.benchmark` describes them):
what the hook points cost (``capture``), the key/value cache in decoding (``decoding``), end-to-end training
tokens/s (``e2e``) and which SDPA kernels run (``sdpa``). The training-step and attention races are
:mod:`workbench.tools.bench.suites`."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

import workbench as wb
from workbench.runtime import autocast
from workbench.tools.bench.rivals import NNTransformer, without_hook_points
from workbench.tools.bench.suites import MIN_ROUNDS, no_eos, race, random_batch
from workbench.translation.decode import beam_search, greedy_decode


def suite_capture(device: torch.device, quick: bool) -> dict[str, Any]:
    """What hook points cost when nobody listens (our model vs the same model without them), and capturing all.

    Forward in evaluation (no gradients) and a training forward+backward, each raced against the hook-free copy
    made by :func:`without_hook_points` (same weights, same kernels, no taps).
    """
    torch.manual_seed(0)
    name = "tiny" if quick else "small"
    cfg = wb.preset(name)
    src, tgt = random_batch(8000, 64, 20, 21, device)
    model = wb.build_model(cfg, 8000, 8000).to(device)
    bare = without_hook_points(model)
    rounds = MIN_ROUNDS if quick else 21

    def forward(m: nn.Module) -> Callable[[], None]:
        def run() -> None:
            m(src, tgt)

        return run

    def captured() -> None:
        with wb.capture_attention(model):
            model(src, tgt)

    def train(m: nn.Module) -> Callable[[], None]:
        def run() -> None:
            m(src, tgt).sum().backward()
            m.zero_grad(set_to_none=True)

        return run

    for m in (model, bare):
        m.eval()
    with torch.no_grad():
        fwd = race({"without_hook_points": forward(bare), "hook_points_no_hooks": forward(model),
                    "capture_all": captured}, rounds, device)
    for m in (model, bare):
        m.train()
    trn = race({"without_hook_points": train(bare), "hook_points_no_hooks": train(model)}, rounds, device)
    f, t = fwd["median_s"], trn["median_s"]
    return {
        "preset": name,
        "forward_ms": {k: 1e3 * v for k, v in f.items()},
        "forward_rounds": fwd["rounds"],
        "train_fwd_bwd_ms": {k: 1e3 * v for k, v in t.items()},
        "train_rounds": trn["rounds"],
        "inactive_overhead_pct": 100 * (f["hook_points_no_hooks"] / f["without_hook_points"] - 1),
        "inactive_train_overhead_pct": 100 * (t["hook_points_no_hooks"] / t["without_hook_points"] - 1),
        "active_overhead_pct": 100 * (f["capture_all"] / f["hook_points_no_hooks"] - 1),
    }


def suite_decoding(device: torch.device, quick: bool) -> dict[str, Any]:
    """Greedy and beam-4 decoding with and without the key/value cache, exactly 40 output tokens."""
    torch.manual_seed(0)
    cfg = wb.preset("tiny" if quick else "small")
    model = wb.build_model(cfg, 8000, 8000).to(device).eval()
    src, _ = random_batch(8000, 16, 20, 21, device)
    steps, eos = 40, 3
    result: dict[str, Any] = {"preset": "tiny" if quick else "small", "sentences": src.shape[0], "output_tokens": steps}
    with no_eos(model, eos):
        fns = {
            "greedy": lambda c: greedy_decode(model, src, eos_id=eos, max_len=steps, use_cache=c),
            "beam4": lambda c: beam_search(model, src, beam=4, eos_id=eos, max_len=steps, use_cache=c),
        }
        for name, fn in fns.items():
            out = fn(True)
            # the limit forces eos at the last step; before it every position must be a real token
            if out.shape[1] != steps or bool((out[:, : steps - 1] == eos).any()):
                raise RuntimeError(f"{name} decoding stopped early ({out.shape[1]} tokens): the benchmark is invalid")
            raced = race({"cached": lambda fn=fn: fn(True), "uncached": lambda fn=fn: fn(False)}, MIN_ROUNDS, device)
            med = raced["median_s"]
            result[f"{name}_rounds"] = raced["rounds"]
            result[f"{name}_cached_sent_per_s"] = src.shape[0] / med["cached"]
            result[f"{name}_uncached_sent_per_s"] = src.shape[0] / med["uncached"]
            result[f"{name}_cache_speedup"] = med["uncached"] / med["cached"]
    return result


def padding_fractions(tokenizer: Any, pairs: list[tuple[str, str]], max_tokens: int) -> dict[str, float]:
    """Share of padding positions in the token-budget batches ``fit`` makes of ``pairs`` (one epoch's batches)."""
    from workbench.translation.batching import make_batch, token_batches

    src = tokenizer.encode_src([p[0] for p in pairs])
    tgt = tokenizer.encode_tgt([p[1] for p in pairs])
    cells = {"src": 0, "tgt": 0}
    real = {"src": 0, "tgt": 0}
    for idx in token_batches([len(s) for s in src], [len(t) - 1 for t in tgt], max_tokens, shuffle=False):
        b = make_batch([src[i] for i in idx], [tgt[i] for i in idx], tokenizer.pad_id)
        cells["src"] += b.src.numel()
        cells["tgt"] += b.tgt_out.numel()
        real["src"] += b.n_src_tokens
        real["tgt"] += b.n_tgt_tokens
    return {f"{k}_padding_fraction": 1 - real[k] / max(cells[k], 1) for k in cells}


def suite_e2e(device: torch.device, quick: bool) -> dict[str, Any]:
    """End-to-end training tokens/s on Multi30k batches through ``fit`` (one pass over a slice of the train split)."""
    from workbench.errors import DataError
    from workbench.translation.data import load_multi30k
    from workbench.translation.run import RunConfig
    from workbench.translation.tokenizer import SubwordTokenizer
    from workbench.translation.train import fit

    run = RunConfig.from_flat(
        limit=600 if quick else (None if device.type == "cuda" else 4000),
        vocab_size=2000 if quick else 8000,
        preset="tiny" if quick else ("base" if device.type == "cuda" else "small"),
        epochs=1, max_tokens=3072 if device.type == "cpu" else 16384, eval_bleu=False, device=str(device),
        log_every=10**9,
    )
    try:
        train = load_multi30k("train", run.src, run.tgt)
    except DataError as exc:
        return {"skipped": f"Multi30k not available: {exc}"}
    pairs = list(train)[: run.limit]
    tokenizer = SubwordTokenizer.train(pairs, vocab_size=run.vocab_size, joint=True)
    torch.manual_seed(0)
    # the preset as it is (separate source and target embeddings), not build_translator's tied one
    model = wb.build_model(wb.preset(run.preset), tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, tokenizer.pad_id)
    cfg = run.train
    history = fit(model, tokenizer, pairs, pairs[:64], cfg)
    return {
        **({} if quick else {"precision_race": e2e_precision_race(device, tokenizer, pairs)}),
        "preset": run.preset,
        "pairs": len(pairs),
        "max_tokens": cfg.max_tokens,
        **padding_fractions(tokenizer, pairs, cfg.max_tokens),
        "tokens_per_s": history.tokens_per_s[-1],
        "model_tflops_per_s": history.model_tflops_per_s[-1],
        "mfu": history.mfu[-1],
        "seconds": history.elapsed_s[-1],
        "precision": history.precision,  # what fit's --precision auto chose on this machine, and why
        "precision_reason": history.precision_reason,
    }


def e2e_precision_race(device: torch.device, tokenizer: Any, pairs: list[tuple[str, str]],
                       rounds: int = 3) -> dict[str, Any]:
    """The README recipe (``cpu-small``: small preset, dropout 0.2, 3,072-token batches, its schedule) for one pass over
    ``pairs`` through ``fit``, in every format :func:`bench_precisions` races on ``device`` (fp32 and bf16 on a CPU
    with bf16 units), ``rounds`` passes each, the order alternating (fp32, bf16, bf16, fp32, ...); every pass starts
    from the same initial weights. Reports each pass's tokens/s and the median bf16/fp32 speed-up of the tokens/s."""
    from workbench.tools.bench.suites import bench_precisions
    from workbench.translation.run import recipe
    from workbench.translation.train import fit

    precisions = bench_precisions(device)
    if len(precisions) < 2:
        return {"skipped": f"one format only on this device ({precisions[0]}): nothing to race"}
    order = [p for r in range(rounds) for p in (precisions if r % 2 == 0 else precisions[::-1])]
    tokens_per_s: dict[str, list[float]] = {p: [] for p in precisions}
    for precision in order:
        run = recipe("cpu-small", epochs=1, max_minutes=None, checkpoint_every=None, eval_bleu=False,
                     log_every=10**9, device=str(device), precision=precision)
        torch.manual_seed(0)
        model = wb.build_model(wb.preset(run.preset, dropout=run.dropout), tokenizer.src_vocab_size,
                               tokenizer.tgt_vocab_size, tokenizer.pad_id)
        tokens_per_s[precision].append(fit(model, tokenizer, pairs, pairs[:64], run.train).tokens_per_s[-1])
    median = {p: statistics.median(v) for p, v in tokens_per_s.items()}
    return {"recipe": "cpu-small", "pairs": len(pairs), "order": order, "tokens_per_s": tokens_per_s,
            "median_tokens_per_s": median, "bf16_speedup": median["bf16"] / median["fp32"]}


def sdpa_kernels(model: nn.Module, src: torch.Tensor, tgt: torch.Tensor, train: bool, device: torch.device) -> dict[str, int]:
    """The scaled-dot-product kernels one forward (+ backward in training) dispatches, and in training the number
    of dropout calls (``"dropout"``: ``nn.Dropout`` modules run with p > 0; ours draw their masks more cheaply on
    the CPU, see :mod:`workbench.translation.kernels`, so they are counted by module rather than by ATen op)."""
    from torch.profiler import ProfilerActivity, profile

    model.train(train)
    kernels: dict[str, int] = {}

    def count_dropout(module: nn.Module, _inputs: Any, _out: Any) -> None:
        if module.training and module.p > 0:
            kernels["dropout"] = kernels.get("dropout", 0) + 1

    handles = [m.register_forward_hook(count_dropout) for m in model.modules() if isinstance(m, nn.Dropout)]
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    try:
        with profile(activities=activities) as prof, autocast(device), torch.set_grad_enabled(train):
            out = model(src, tgt)
            if train:
                out.float().sum().backward()
    finally:
        for h in handles:
            h.remove()
    for ev in prof.events():
        if "scaled_dot_product" in ev.name and ev.name != "aten::scaled_dot_product_attention":
            kernels[ev.name] = kernels.get(ev.name, 0) + 1
    return kernels


def suite_sdpa(device: torch.device, quick: bool) -> dict[str, Any]:
    """The scaled-dot-product-attention kernels our forward actually dispatches to, per mode, and the reference's."""
    torch.manual_seed(0)
    cfg = wb.preset("tiny" if quick else "small", dropout=0.1)  # dropout on, as in training
    model = wb.build_model(cfg, 8000, 8000).to(device)
    ref = NNTransformer(cfg, 8000).to(device)
    src, tgt = random_batch(8000, 16, 20, 21, device)
    return {
        "train": sdpa_kernels(model, src, tgt, True, device),
        "eval": sdpa_kernels(model, src, tgt, False, device),
        "nn.Transformer_train": sdpa_kernels(ref, src, tgt, True, device),
    }
