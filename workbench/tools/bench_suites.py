"""The suites of ``workbench bench`` (:mod:`workbench.tools.benchmark` describes each) and the race they share."""

from __future__ import annotations

import contextlib
import functools
import logging
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

import workbench as wb
from workbench.lessons.flops import peak_flops, train_step_flops
from workbench.lessons.measure import call_seconds, matmul_peaks, peak_memory
from workbench.model.attention import MultiHeadAttention
from workbench.model.masks import to_nn_mask
from workbench.runtime import adam, autocast, choose_precision, cpu_bf16_units
from workbench.tools.rivals import NNTransformer, without_hook_points
from workbench.translation.decode import beam_search, greedy_decode
from workbench.translation.kernels import use_fast_dropout
from workbench.translation.train import step_loss

log = logging.getLogger(__name__)

SUITES = ("attention", "train_step", "capture", "decoding", "e2e", "sdpa", "precision")
MIN_ROUNDS = 5  # no published median comes from fewer rounds


def bench_precisions(device: torch.device) -> tuple[str, ...]:
    """The number formats the training races run in on ``device``: bf16 on CUDA (as training runs there), fp32 and
    bf16 on a CPU with bf16 matrix units (:func:`workbench.runtime.cpu_bf16_units`), fp32 elsewhere."""
    if device.type == "cuda":
        return ("bf16",)
    return ("fp32", "bf16") if device.type == "cpu" and cpu_bf16_units() is not None else ("fp32",)


@functools.cache
def _peaks(device: str) -> dict[str, float | None]:
    dev = torch.device(device)
    bf16 = "bf16" in bench_precisions(dev)
    peaks = matmul_peaks(dev, (torch.float32, torch.bfloat16) if bf16 else (torch.float32,))
    return {"fp32": peaks[torch.float32], "bf16": peaks.get(torch.bfloat16)}


def measured_peaks(device: torch.device) -> dict[str, float | None]:
    """The machine's fp32 and bf16 matrix-product peaks (FLOP/s; bf16 None where no race runs in it), measured once
    per process, the two formats alternating (:func:`workbench.lessons.measure.matmul_peaks`): ``workbench bench`` measures them at its start,
    and every suite's MFU is against the peak of the format it ran in."""
    return _peaks(str(device))


# -- measuring (the probes are workbench.lessons.measure's) -------------------------------------------------------------
def race(fns: dict[str, Callable[[], Any]], rounds: int, device: torch.device) -> dict[str, Any]:
    """Race the functions: one warm-up call each, then ``rounds`` rounds of one call each, the order alternating.

    Round 0 runs the functions in the given order, round 1 in reverse, and so on, so that each runs first in half
    of the rounds. Returns ``{"median_s": {name: s}, "rounds": [{"order": [...], "s": {name: s}}, ...]}``.
    """
    if rounds < MIN_ROUNDS:
        raise ValueError(f"rounds={rounds}: race at least {MIN_ROUNDS} rounds, so that a median means something")
    for fn in fns.values():
        fn()
    names = list(fns)
    log_rounds = []
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        log_rounds.append({"order": order, "s": {k: call_seconds(fns[k], 1, device)[0] for k in order}})
    median = {k: statistics.median(rd["s"][k] for rd in log_rounds) for k in names}
    return {"median_s": median, "rounds": log_rounds}


# -- suites --------------------------------------------------------------------------------------------------------
def suite_attention(device: torch.device, quick: bool) -> dict[str, Any]:
    """Self-attention forward+backward (a key-padding mask on a quarter of the rows), ours vs nn.MultiheadAttention."""
    d_model, n_heads, batch = 256, 8, 8
    lengths = (32, 64) if quick else (32, 64, 128, 256, 512, 1024)
    rounds = MIN_ROUNDS if quick else 7
    ours = MultiHeadAttention(d_model, n_heads).to(device)
    ref = nn.MultiheadAttention(d_model, n_heads, batch_first=True).to(device)
    rows = []
    for n in lengths:
        x = torch.randn(batch, n, d_model, device=device, requires_grad=True)
        keep = torch.ones(batch, n, dtype=torch.bool, device=device)
        keep[: batch // 4, n - n // 4 :] = False  # padded keys
        mask = keep[:, None, None, :]  # (B, 1, 1, Tk)
        nn_pad = to_nn_mask(keep)

        def fused(x: torch.Tensor = x, mask: torch.Tensor = mask) -> None:  # bind this length's tensors
            out, _ = ours(x, mask=mask)
            out.sum().backward()

        def explicit(x: torch.Tensor = x, mask: torch.Tensor = mask) -> None:
            out, _ = ours(x, mask=mask, need_weights=True)
            out.sum().backward()

        def reference(x: torch.Tensor = x, nn_pad: torch.Tensor = nn_pad) -> None:
            out, _ = ref(x, x, x, key_padding_mask=nn_pad, need_weights=False)
            out.sum().backward()

        fns = {"ours_fused": fused, "ours_explicit": explicit, "nn.MultiheadAttention": reference}
        raced = race(fns, rounds, device)
        med = raced["median_s"]
        mem = {k: peak_memory(fn, device) for k, fn in fns.items()}
        rows.append({
            "n": n,
            "rounds": raced["rounds"],
            "ms": {k: 1e3 * v for k, v in med.items()},
            "peak_mib": {k: (None if v is None else v / 2**20) for k, v in mem.items()},
            "fused_over_nn": med["ours_fused"] / med["nn.MultiheadAttention"],
            "explicit_over_nn": med["ours_explicit"] / med["nn.MultiheadAttention"],
        })
    return {"d_model": d_model, "n_heads": n_heads, "batch": batch, "rows": rows}


def _step_fn(model: nn.Module, loss_fn: Callable[[], torch.Tensor], device: torch.device,
             precision: str | bool = True) -> Callable[[], None]:
    """One optimizer step: ``loss_fn()`` under the autocast of ``precision`` (``True``: bf16 on CUDA only, as
    before), backward, Adam (the paper's betas and epsilon; fused where torch has the kernel, the same optimizer for
    both rivals)."""
    opt = adam(list(model.parameters()), device, lr=1e-4, betas=(0.9, 0.98), eps=1e-9)  # fused where it exists

    def step() -> None:
        with autocast(device, precision):
            loss = loss_fn()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def random_batch(vocab: int, B: int, S: int, T: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Random source (B, S) and target (B, T) ids; a quarter of the rows end in 5 padding tokens on both sides
    (about 6 %: less than the 13 % of target padding in real Multi30k token-budget batches that the ``e2e`` suite
    reports, so what ours saves by skipping padding rows is understated here, not overstated)."""
    src = torch.randint(4, vocab, (B, S), device=device)
    src[: B // 4, S - 5 :] = 0
    tgt = torch.randint(4, vocab, (B, T), device=device)
    tgt[B - B // 4 :, T - 5 :] = 0
    return src, tgt


MODEL_ONLY = "ours, model only"  # the train_step rival that differs from the reference by the model code alone


def train_step_pair(cfg: wb.ModelConfig, vocab: int, src: torch.Tensor, tgt: torch.Tensor,
                    device: torch.device, compiled: bool = False, precision: str | bool = True,
                    ) -> tuple[nn.Module, nn.Module, dict[str, Callable[[], None]]]:
    """Our model and the reference of the same sizes, and one training step of each on the batch ``(src, tgt)``.

    ``compiled``: also ``"ours compiled"`` and ``"nn.Transformer compiled"``, the same models through
    ``torch.compile`` (default inductor backend) with an optimizer of their own. ``precision``: the autocast both
    sides run under (``"fp32"``, ``"bf16"``; ``True``: bf16 on CUDA only).
    """
    from workbench.translation.batching import Batch

    ours = use_fast_dropout(wb.build_model(cfg, vocab, vocab)).to(device).train()  # as fit() trains it
    ref = NNTransformer(cfg, vocab).to(device).train()
    batch = Batch(src, tgt[:, :-1], tgt[:, 1:], pad_id=0)

    def stock_loss(net: nn.Module) -> torch.Tensor:
        logits = net(batch.src, batch.tgt_in)  # (B, T, V): every position projected
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                                           batch.tgt_out.reshape(-1), ignore_index=0, label_smoothing=0.1)

    def losses(ours_net: nn.Module, ref_net: nn.Module) -> tuple[Callable[[], torch.Tensor], Callable[[], torch.Tensor]]:
        def ours_loss() -> torch.Tensor:
            return step_loss(ours_net, ours, batch, pad_id=0, eps=0.1)[0] / max(batch.n_tgt_tokens, 1)

        return ours_loss, lambda: stock_loss(ref_net)

    ours_loss, ref_loss = losses(ours, ref)
    # model only: our model with torch's own dropout (nn.Dropout, as the reference) and the reference's stock loss,
    # so the two sides differ by the model code alone (same sizes, same loss, same dropout kernel)
    plain = wb.build_model(cfg, vocab, vocab).to(device).train()
    fns = {"ours": _step_fn(ours, ours_loss, device, precision), "nn.Transformer": _step_fn(ref, ref_loss, device, precision),
           MODEL_ONLY: _step_fn(plain, lambda: stock_loss(plain), device, precision)}
    if compiled:
        ours_c, ref_c = losses(torch.compile(ours), torch.compile(ref))
        fns["ours compiled"] = _step_fn(ours, ours_c, device, precision)
        fns["nn.Transformer compiled"] = _step_fn(ref, ref_c, device, precision)
    return ours, ref, fns


def suite_train_step(device: torch.device, quick: bool, presets: list[str] | None = None) -> dict[str, Any]:
    """Training step of each preset vs nn.Transformer of the same sizes (same batch, same optimizer).

    Each side runs with its best setting on the device: eager and ``torch.compile``d variants of both are raced
    (not in ``quick``, where compiling would dominate), and the ratio divides our fastest median by the reference's.
    One row per preset and number format (:func:`bench_precisions`): the reference always runs in the same format
    as ours; compiled variants only in the first format. MFU is against the measured peak of that format.
    """
    vocab = 8000
    if device.type == "cuda":
        presets_default, (B, S, T) = ("small", "base", "big"), (128, 32, 33)
    else:
        presets_default, (B, S, T) = (("tiny",) if quick else ("tiny", "small", "base")), (64, 20, 21)
    presets = tuple(presets) if presets else presets_default
    rounds = MIN_ROUNDS if quick else 7
    precisions = bench_precisions(device)
    rows = []
    for name, precision in ((n, p) for n in presets for p in precisions):
        torch.manual_seed(0)
        cfg = wb.preset(name)
        src, tgt = random_batch(vocab, B, S, T, device)
        ours, ref, fns = train_step_pair(cfg, vocab, src, tgt, device, compiled=not quick and precision == precisions[0],
                                         precision=precision)
        peak = peak_flops(device) or measured_peaks(device)[precision]
        t0 = time.perf_counter()
        for key in fns:
            if key.endswith("compiled"):
                fns[key]()  # compile (and a second call, in case the first step recompiles) before the race
                fns[key]()
        compile_s = time.perf_counter() - t0
        # the base preset on a CPU takes seconds a step: the minimum number of rounds there
        raced = race(fns, rounds if name != "base" or device.type == "cuda" else MIN_ROUNDS, device)
        med = raced["median_s"]
        best_ours = min((k for k in med if k.startswith("ours") and k != MODEL_ONLY), key=med.__getitem__)
        best_ref = min((k for k in med if k.startswith("nn.Transformer")), key=med.__getitem__)
        mem = {k: peak_memory(fns[k], device) for k in ("ours", "nn.Transformer")}
        n_real = int((tgt[:, 1:] != 0).sum())
        flops = train_step_flops(cfg, B, S, T - 1, vocab, n_projected=n_real)
        rows.append({
            "preset": name,
            "precision": precision,
            "batch": [B, S, T - 1],
            "target_padding_fraction": 1 - n_real / (B * (T - 1)),
            "rounds": raced["rounds"],
            "step_s": med,
            "best": {"ours": best_ours, "nn.Transformer": best_ref},
            "compile_s": compile_s if any(k.endswith("compiled") for k in fns) else None,
            "ratio_ours_over_nn": med[best_ours] / med[best_ref],
            "ratio_eager": med["ours"] / med["nn.Transformer"],
            # model only: the same stock loss and nn.Dropout on both sides, eager, so only the model code differs
            "ratio_model_only": med[MODEL_ONLY] / med["nn.Transformer"],
            "ours_tflops_per_s": flops / med[best_ours] / 1e12,
            "ours_mfu": None if peak is None else flops / med[best_ours] / peak,
            "peak_mib": {k: (None if v is None else v / 2**20) for k, v in mem.items()},
        })
        del ours, ref, fns
    return {"vocab": vocab, "precisions": list(precisions), "peak": "data sheet" if peak_flops(device) else "measured",
            "rows": rows}


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


@contextlib.contextmanager
def _no_eos(model: nn.Module, eos_id: int) -> Iterator[None]:
    """Make ``eos_id`` unreachable (its logit -inf), so every decode runs to its length limit."""

    def hook(_module: nn.Module, _inputs: Any, out: torch.Tensor) -> torch.Tensor:
        out = out.clone()
        out[..., eos_id] = float("-inf")
        return out

    handle = model.generator.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def suite_decoding(device: torch.device, quick: bool) -> dict[str, Any]:
    """Greedy and beam-4 decoding with and without the key/value cache, exactly 40 output tokens."""
    torch.manual_seed(0)
    cfg = wb.preset("tiny" if quick else "small")
    model = wb.build_model(cfg, 8000, 8000).to(device).eval()
    src, _ = random_batch(8000, 16, 20, 21, device)
    steps, eos = 40, 3
    result: dict[str, Any] = {"preset": "tiny" if quick else "small", "sentences": src.shape[0], "output_tokens": steps}
    with _no_eos(model, eos):
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


def suite_precision(device: torch.device, quick: bool) -> dict[str, Any]:
    """bf16 against fp32 on this machine: our training step per preset and beam-4 decoding, each pair raced in one
    run (alternating), with MFU against the measured peak of each format; and what ``--precision auto`` chooses
    for the ``small`` training step (the probe ``fit`` runs at start-up)."""
    precisions = bench_precisions(device)
    if "bf16" not in precisions:
        return {"skipped": "no bf16 matrix units on this CPU", "precisions": list(precisions)}
    if device.type == "cuda":
        return {"skipped": "CUDA trains in bf16 already (no fp32 race)", "precisions": list(precisions)}
    peaks = measured_peaks(device)
    vocab, (B, S, T) = 8000, (64, 20, 21)
    presets = ("tiny",) if quick else ("small", "base")
    rows = []
    for name in presets:
        torch.manual_seed(0)
        cfg = wb.preset(name)
        src, tgt = random_batch(vocab, B, S, T, device)
        fns = {p: train_step_pair(cfg, vocab, src, tgt, device, precision=p)[2]["ours"] for p in ("fp32", "bf16")}
        raced = race(fns, MIN_ROUNDS if quick or name == "base" else 7, device)
        med = raced["median_s"]
        n_real = int((tgt[:, 1:] != 0).sum())
        flops = train_step_flops(cfg, B, S, T - 1, vocab, n_projected=n_real)
        rows.append({"preset": name, "batch": [B, S, T - 1], "rounds": raced["rounds"], "step_s": med,
                     "bf16_speedup": med["fp32"] / med["bf16"],
                     "tflops_per_s": {p: flops / med[p] / 1e12 for p in med},
                     "mfu": {p: flops / med[p] / peaks[p] for p in med}})
        del fns
    torch.manual_seed(0)
    dec_name = "tiny" if quick else "small"
    model = wb.build_model(wb.preset(dec_name), vocab, vocab).to(device).eval()
    src, _ = random_batch(vocab, 16, 20, 21, device)
    steps, eos = 40, 3

    def beam4(p: str) -> Callable[[], None]:
        def run() -> None:
            with autocast(device, p):
                beam_search(model, src, beam=4, eos_id=eos, max_len=steps)

        return run

    with _no_eos(model, eos):
        raced = race({p: beam4(p) for p in ("fp32", "bf16")}, MIN_ROUNDS, device)
    med = raced["median_s"]
    decoding = {"preset": dec_name, "sentences": src.shape[0], "output_tokens": steps, "rounds": raced["rounds"],
                "sent_per_s": {p: src.shape[0] / s for p, s in med.items()}, "bf16_speedup": med["fp32"] / med["bf16"]}
    # what `--precision auto` takes for the small training step: fit's probe on a batch of the same size
    torch.manual_seed(0)
    src, tgt = random_batch(vocab, B, S, T, device)
    shadow = use_fast_dropout(wb.build_model(wb.preset(dec_name), vocab, vocab)).to(device).train()
    batch_ = _train_batch(src, tgt)

    def probe() -> None:
        loss, n = step_loss(shadow, shadow, batch_, pad_id=0, eps=0.1)
        (loss / max(n, 1)).backward()
        shadow.zero_grad(set_to_none=True)

    auto = choose_precision("auto", device, probe, what=f"a {dec_name} training step")
    return {"precisions": list(precisions), "bf16_units": cpu_bf16_units(),
            "peak_tflops": {p: None if v is None else v / 1e12 for p, v in peaks.items()},
            "train_step": rows, "beam4": decoding, "auto": auto.to_dict()}


def _train_batch(src: torch.Tensor, tgt: torch.Tensor) -> Any:
    from workbench.translation.batching import Batch

    return Batch(src, tgt[:, :-1], tgt[:, 1:], pad_id=0)


RUNNERS: dict[str, Callable[[torch.device, bool], dict[str, Any]]] = {
    "attention": suite_attention,
    "train_step": suite_train_step,
    "capture": suite_capture,
    "decoding": suite_decoding,
    "e2e": suite_e2e,
    "sdpa": suite_sdpa,
    "precision": suite_precision,
}
