"""Speed and memory figures on this machine: ``workbench bench`` prints a table and writes JSON (never a timed test).

    workbench bench [--quick] [--suite attention --suite train_step ...] [--json bench.json] [--device auto]

Suites (each figure is the median of repeats; competing variants are interleaved so machine noise hits them alike):

* ``attention``  — self-attention forward+backward across sequence lengths: ours fused (SDPA), ours explicit
  (weights materialised, the path that returns them) and ``nn.MultiheadAttention``; peak memory of each.
* ``train_step`` — one training step (forward, label-smoothed loss, backward, Adam) of each preset vs
  ``nn.Transformer`` of the same sizes with the same embeddings and generator, as a ratio ours / nn; analytic
  TFLOP/s and MFU (where the device's peak is known); peak memory of each.
* ``capture``    — forward with the capture machinery present but inactive vs plain, and with capture on.
* ``decoding``   — greedy and beam-4 decoding with vs without the key/value cache, exactly 40 output tokens
  (the end-of-sentence token is made unreachable), sentences/s.
* ``e2e``        — end-to-end training tokens/s on real Multi30k batches through :func:`workbench.train.fit`.
* ``sdpa``       — which scaled-dot-product kernels actually run in our model's forward (from the profiler).

Peak memory: on CUDA ``torch.cuda.max_memory_allocated``; on Linux CPUs the growth of the resident set's
high-water mark (reset through ``/proc/self/clear_refs``) over the resident set before the call.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

import workbench as wb
from workbench.attention import MultiHeadAttention
from workbench.decode import beam_search, greedy_decode
from workbench.flops import peak_flops, train_step_flops
from workbench.masks import causal_mask, to_nn_mask
from workbench.runtime import autocast, resolve_device

log = logging.getLogger(__name__)

SUITES = ("attention", "train_step", "capture", "decoding", "e2e", "sdpa")


class NNTransformer(nn.Module):
    """torch.nn.Transformer with the same embeddings (shared as ``cfg`` says), positions and tied generator as ours."""

    def __init__(self, cfg: wb.ModelConfig, vocab: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, cfg.d_model, padding_idx=0)
        # a separate source embedding unless the config ties them, so both models have the same parameter count
        self.src_embed = self.embed if cfg.tie_src_tgt else nn.Embedding(vocab, cfg.d_model, padding_idx=0)
        self.register_buffer("pe", wb.sinusoidal_table(cfg.max_len, cfg.d_model), persistent=False)
        self.core = nn.Transformer(cfg.d_model, cfg.n_heads, cfg.n_enc_layers, cfg.n_dec_layers, cfg.d_ff, cfg.dropout,
                                   batch_first=True, norm_first=cfg.norm_first)
        self.generator = nn.Linear(cfg.d_model, vocab, bias=False)
        self.generator.weight = self.embed.weight
        self.scale = math.sqrt(cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        s = self.drop(self.src_embed(src) * self.scale + self.pe[: src.shape[1]])
        t = self.drop(self.embed(tgt) * self.scale + self.pe[: tgt.shape[1]])
        pad = to_nn_mask(src != 0)
        causal = to_nn_mask(causal_mask(tgt.shape[1], device=tgt.device))
        out = self.core(s, t, tgt_mask=causal, src_key_padding_mask=pad, memory_key_padding_mask=pad, tgt_is_causal=True)
        return self.generator(out)


# -- measuring -----------------------------------------------------------------------------------------------------
def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], Any], repeats: int, device: torch.device = torch.device("cpu")) -> list[float]:
    """Wall-clock seconds of ``repeats`` calls (device work included)."""
    out = []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        out.append(time.perf_counter() - t0)
    return out


def interleaved_medians(fns: dict[str, Callable[[], Any]], repeats: int, device: torch.device) -> dict[str, float]:
    """Median seconds per call of each function, after one warm-up call each, repeats interleaved."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            times[k] += timed(fn, 1, device)
    return {k: statistics.median(v) for k, v in times.items()}


def _rss_bytes(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def peak_memory(fn: Callable[[], Any], device: torch.device) -> int | None:
    """Bytes by which memory rose above its level before ``fn`` at its peak during ``fn`` (None if unmeasurable)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak resident set size (VmHWM) to the current one
    except OSError:
        return None
    before = _rss_bytes("VmRSS")
    fn()
    peak = _rss_bytes("VmHWM")
    return None if before is None or peak is None else max(peak - before, 0)


# -- suites --------------------------------------------------------------------------------------------------------
def suite_attention(device: torch.device, quick: bool) -> dict[str, Any]:
    """Self-attention forward+backward (a key-padding mask on a quarter of the rows), ours vs nn.MultiheadAttention."""
    d_model, n_heads, batch = 256, 8, 8
    lengths = (32, 64) if quick else (32, 64, 128, 256, 512, 1024)
    repeats = 3 if quick else 7
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
        med = interleaved_medians(fns, repeats, device)
        mem = {k: peak_memory(fn, device) for k, fn in fns.items()}
        rows.append({
            "n": n,
            "ms": {k: 1e3 * v for k, v in med.items()},
            "peak_mib": {k: (None if v is None else v / 2**20) for k, v in mem.items()},
            "fused_over_nn": med["ours_fused"] / med["nn.MultiheadAttention"],
            "explicit_over_nn": med["ours_explicit"] / med["nn.MultiheadAttention"],
        })
    return {"d_model": d_model, "n_heads": n_heads, "batch": batch, "rows": rows}


def _step_fn(model: nn.Module, src: torch.Tensor, tgt: torch.Tensor, device: torch.device) -> Callable[[], None]:
    fused = {"fused": True} if device.type == "cuda" else {}
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, **fused)

    def step() -> None:
        with autocast(device):
            logits = model(src, tgt[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), tgt[:, 1:].reshape(-1),
                                           ignore_index=0, label_smoothing=0.1)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def _batch(vocab: int, B: int, S: int, T: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    src = torch.randint(4, vocab, (B, S), device=device)
    src[: B // 4, S - 5 :] = 0  # some padding, as in real batches
    tgt = torch.randint(4, vocab, (B, T), device=device)
    return src, tgt


def suite_train_step(device: torch.device, quick: bool) -> dict[str, Any]:
    """Training step of each preset vs nn.Transformer of the same sizes (same batch, same optimizer)."""
    vocab = 8000
    if device.type == "cuda":
        presets, (B, S, T) = ("small", "base", "big"), (128, 32, 33)
    else:
        presets, (B, S, T) = (("tiny",) if quick else ("tiny", "small", "base")), (64, 20, 21)
    repeats = 3 if quick else 7
    peak = peak_flops(device)
    rows = []
    for name in presets:
        torch.manual_seed(0)
        cfg = wb.preset(name)
        src, tgt = _batch(vocab, B, S, T, device)
        ours = wb.build_model(cfg, vocab, vocab).to(device).train()
        ref = NNTransformer(cfg, vocab).to(device).train()
        fns = {"ours": _step_fn(ours, src, tgt, device), "nn.Transformer": _step_fn(ref, src, tgt, device)}
        med = interleaved_medians(fns, repeats if name != "base" or device.type == "cuda" else 3, device)
        mem = {k: peak_memory(fn, device) for k, fn in fns.items()}
        flops = train_step_flops(cfg, B, S, T - 1, vocab)
        rows.append({
            "preset": name,
            "batch": [B, S, T - 1],
            "step_s": med,
            "ratio_ours_over_nn": med["ours"] / med["nn.Transformer"],
            "ours_tflops_per_s": flops / med["ours"] / 1e12,
            "ours_mfu": None if peak is None else flops / med["ours"] / peak,
            "peak_mib": {k: (None if v is None else v / 2**20) for k, v in mem.items()},
        })
        del ours, ref, fns
    return {"vocab": vocab, "amp": "bf16" if device.type == "cuda" else "fp32", "rows": rows}


def suite_capture(device: torch.device, quick: bool) -> dict[str, Any]:
    """Forward with no capture, inside an empty capture context, and capturing every attention pattern."""
    torch.manual_seed(0)
    cfg = wb.preset("tiny" if quick else "small")
    src, tgt = _batch(8000, 64, 20, 21, device)
    model = wb.build_model(cfg, 8000, 8000).to(device).eval()

    def plain() -> None:
        model(src, tgt)

    def inactive() -> None:
        with wb.capture_attention(model, kinds=[]):
            model(src, tgt)

    def active() -> None:
        with wb.capture_attention(model):
            model(src, tgt)

    with torch.no_grad():
        med = interleaved_medians({"plain": plain, "capture_context_empty": inactive, "capture_all": active},
                                  6 if quick else 21, device)
    return {
        "preset": "tiny" if quick else "small",
        "forward_ms": {k: 1e3 * v for k, v in med.items()},
        "inactive_overhead_pct": 100 * (med["capture_context_empty"] / med["plain"] - 1),
        "active_overhead_pct": 100 * (med["capture_all"] / med["plain"] - 1),
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
    src, _ = _batch(8000, 16, 20, 21, device)
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
            med = interleaved_medians({"cached": lambda fn=fn: fn(True), "uncached": lambda fn=fn: fn(False)},
                                      2 if quick else 5, device)
            result[f"{name}_cached_sent_per_s"] = src.shape[0] / med["cached"]
            result[f"{name}_uncached_sent_per_s"] = src.shape[0] / med["uncached"]
            result[f"{name}_cache_speedup"] = med["uncached"] / med["cached"]
    return result


def suite_e2e(device: torch.device, quick: bool) -> dict[str, Any]:
    """End-to-end training tokens/s on Multi30k batches through ``fit`` (one pass over a slice of the train split)."""
    from workbench.data import load_multi30k
    from workbench.errors import DataError
    from workbench.tokenizer import SubwordTokenizer
    from workbench.train import fit

    try:
        train = load_multi30k("train", "de", "en")
    except DataError as exc:
        return {"skipped": f"Multi30k not available: {exc}"}
    n = 600 if quick else (len(train) if device.type == "cuda" else 4000)
    pairs = list(train)[:n]
    tokenizer = SubwordTokenizer.train(pairs, vocab_size=2000 if quick else 8000, joint=True)
    name = "tiny" if quick else ("base" if device.type == "cuda" else "small")
    torch.manual_seed(0)
    model = wb.build_model(wb.preset(name), tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, tokenizer.pad_id)
    cfg = wb.TrainConfig(epochs=1, max_tokens=3072 if device.type == "cpu" else 16384, eval_bleu=False,
                         device=str(device), log_every=10**9)
    history = fit(model, tokenizer, pairs, pairs[:64], cfg)
    return {
        "preset": name,
        "pairs": n,
        "max_tokens": cfg.max_tokens,
        "tokens_per_s": history.tokens_per_s[-1],
        "model_tflops_per_s": history.model_tflops_per_s[-1],
        "mfu": history.mfu[-1],
        "seconds": history.elapsed_s[-1],
    }


def suite_sdpa(device: torch.device, quick: bool) -> dict[str, Any]:
    """The scaled-dot-product-attention kernels our forward actually dispatches to, per mode."""
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    cfg = wb.preset("tiny" if quick else "small")
    model = wb.build_model(cfg, 8000, 8000).to(device)
    src, tgt = _batch(8000, 16, 20, 21, device)
    result: dict[str, Any] = {}
    for mode in ("train", "eval"):
        model.train(mode == "train")
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with profile(activities=activities) as prof, autocast(device), torch.set_grad_enabled(mode == "train"):
            model(src, tgt)
        kernels: dict[str, int] = {}
        for ev in prof.events():
            if "scaled_dot_product" in ev.name and ev.name != "aten::scaled_dot_product_attention":
                kernels[ev.name] = kernels.get(ev.name, 0) + 1
        result[mode] = kernels
    return result


RUNNERS: dict[str, Callable[[torch.device, bool], dict[str, Any]]] = {
    "attention": suite_attention,
    "train_step": suite_train_step,
    "capture": suite_capture,
    "decoding": suite_decoding,
    "e2e": suite_e2e,
    "sdpa": suite_sdpa,
}


def run(suites: list[str] | None = None, quick: bool = False, device: str = "auto") -> dict[str, Any]:
    """Run the chosen suites (all by default) and return the report."""
    names = list(suites or SUITES)
    unknown = [s for s in names if s not in RUNNERS]
    if unknown:
        raise ValueError(f"unknown benchmark suite(s) {unknown}: choose from {list(SUITES)}")
    dev = resolve_device(device)
    report: dict[str, Any] = {
        "machine": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "quick": quick,
        "peak_tflops": None if peak_flops(dev) is None else peak_flops(dev) / 1e12,
    }
    for name in names:
        t0 = time.perf_counter()
        log.info("benchmark suite %s ...", name)
        report[name] = RUNNERS[name](dev, quick)
        report[name]["suite_seconds"] = round(time.perf_counter() - t0, 1)
    return report


# -- printing ------------------------------------------------------------------------------------------------------
def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def format_table(report: dict[str, Any]) -> str:
    """A plain-text summary of a report, one block per suite."""
    lines = [f"{report['device']} ({report['machine']}, {report['threads']} threads), torch {report['torch']}"]
    if "attention" in report:
        a = report["attention"]
        lines += ["", f"attention fwd+bwd, d_model={a['d_model']}, h={a['n_heads']}, batch={a['batch']} (ms; peak MiB)",
                  f"{'n':>6} {'fused':>9} {'explicit':>9} {'nn.MHA':>9} {'fused/nn':>9} {'mem fused':>10} {'mem expl':>9} {'mem nn':>8}"]
        for r in a["rows"]:
            ms, mem = r["ms"], r["peak_mib"]
            lines.append(f"{r['n']:>6} {ms['ours_fused']:>9.2f} {ms['ours_explicit']:>9.2f} {ms['nn.MultiheadAttention']:>9.2f} "
                         f"{r['fused_over_nn']:>9.2f} {_fmt(mem['ours_fused']):>10} {_fmt(mem['ours_explicit']):>9} "
                         f"{_fmt(mem['nn.MultiheadAttention']):>8}")
    if "train_step" in report:
        t = report["train_step"]
        lines += ["", f"training step vs nn.Transformer ({t['amp']})",
                  f"{'preset':>7} {'ours s':>8} {'nn s':>8} {'ratio':>6} {'GFLOP/s':>8} {'MFU':>6} {'mem ours':>9} {'mem nn':>8}"]
        for r in t["rows"]:
            mfu = "-" if r["ours_mfu"] is None else f"{r['ours_mfu']:.1%}"
            lines.append(f"{r['preset']:>7} {r['step_s']['ours']:>8.3f} {r['step_s']['nn.Transformer']:>8.3f} "
                         f"{r['ratio_ours_over_nn']:>6.2f} {1e3 * r['ours_tflops_per_s']:>8.1f} {mfu:>6} "
                         f"{_fmt(r['peak_mib']['ours']):>9} {_fmt(r['peak_mib']['nn.Transformer']):>8}")
    if "capture" in report:
        c = report["capture"]
        lines += ["", f"capture ({c['preset']}): inactive {c['inactive_overhead_pct']:+.2f} %, "
                      f"capturing all {c['active_overhead_pct']:+.1f} %"]
    if "decoding" in report:
        d = report["decoding"]
        lines += ["", f"decoding ({d['preset']}, {d['sentences']} sentences x {d['output_tokens']} tokens), sentences/s"]
        for name in ("greedy", "beam4"):
            lines.append(f"  {name:<7} cached {d[f'{name}_cached_sent_per_s']:.1f}  uncached "
                         f"{d[f'{name}_uncached_sent_per_s']:.1f}  speed-up {d[f'{name}_cache_speedup']:.1f}x")
    if "e2e" in report:
        e = report["e2e"]
        if "skipped" in e:
            lines += ["", f"end-to-end: skipped ({e['skipped']})"]
        else:
            mfu = "" if e["mfu"] is None else f", MFU {e['mfu']:.1%}"
            lines += ["", f"end-to-end fit on Multi30k ({e['preset']}, {e['pairs']} pairs): {e['tokens_per_s']:.0f} tok/s, "
                          f"{1e3 * e['model_tflops_per_s']:.1f} GFLOP/s{mfu}"]
    if "sdpa" in report:
        lines += ["", "SDPA kernels dispatched: " + "; ".join(
            f"{mode}: " + ", ".join(f"{k} x{v}" for k, v in report["sdpa"][mode].items()) for mode in ("train", "eval"))]
    return "\n".join(lines)


def main(suites: list[str] | None = None, quick: bool = False, out_json: str | None = "bench.json",
         device: str = "auto", as_json: bool = False) -> int:
    """Entry point of ``workbench bench``: prints the table (or the JSON), writes the JSON to ``out_json``."""
    report = run(suites, quick=quick, device=device)
    print(json.dumps(report, indent=2) if as_json else format_table(report))
    if out_json:
        Path(out_json).parent.mkdir(parents=True, exist_ok=True)
        Path(out_json).write_text(json.dumps(report, indent=2))
        log.info("wrote %s", out_json)
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description="speed and memory benchmarks: print a table and write JSON")
    add_arguments(ap)
    return ap


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The benchmark's options (shared by ``workbench bench`` and ``bench/core.py``)."""
    ap.add_argument("--quick", action="store_true", help="tiny sizes and few repeats (a smoke run)")
    ap.add_argument("--suite", action="append", choices=SUITES, help="run only this suite (repeatable; default all)")
    ap.add_argument("--json", default="bench.json", help="where to write the JSON report ('' for nowhere)")
    ap.add_argument("--print-json", action="store_true", help="print the JSON report instead of the table")
    ap.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    a = build_parser().parse_args()
    sys.exit(main(a.suite, a.quick, a.json or None, a.device, a.print_json))
