"""Core speed figures on this machine (printed and written as JSON; never a timed test).

    workbench bench [--quick] [--json out.json]      (or: python bench/core.py ...)

* train step of our `small` preset vs torch.nn.Transformer of the same sizes (same embeddings and generator,
  same batch, same optimizer), interleaved repeats, median, as a ratio ours / nn;
* forward with the capture machinery present but inactive vs inside an empty capture context, and with capture on;
* greedy and beam-4 decoding with vs without the key/value cache at 40 output tokens, sentences/s.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time

import torch
from torch import nn

import workbench as wb
from workbench.decode import beam_search, greedy_decode
from workbench.masks import causal_mask, to_nn_mask


class NNTransformer(nn.Module):
    """torch.nn.Transformer with the same embeddings, positions and tied generator as ours."""

    def __init__(self, cfg: wb.ModelConfig, vocab: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, cfg.d_model, padding_idx=0)
        self.register_buffer("pe", wb.sinusoidal_table(cfg.max_len, cfg.d_model), persistent=False)
        self.core = nn.Transformer(cfg.d_model, cfg.n_heads, cfg.n_enc_layers, cfg.n_dec_layers, cfg.d_ff, cfg.dropout,
                                   batch_first=True, norm_first=cfg.norm_first)
        self.generator = nn.Linear(cfg.d_model, vocab, bias=False)
        self.generator.weight = self.embed.weight
        self.scale = math.sqrt(cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        s = self.drop(self.embed(src) * self.scale + self.pe[: src.shape[1]])
        t = self.drop(self.embed(tgt) * self.scale + self.pe[: tgt.shape[1]])
        pad = to_nn_mask(src != 0)
        causal = to_nn_mask(causal_mask(tgt.shape[1]))
        out = self.core(s, t, tgt_mask=causal, src_key_padding_mask=pad, memory_key_padding_mask=pad, tgt_is_causal=True)
        return self.generator(out)


def step_fn(model: nn.Module, src: torch.Tensor, tgt: torch.Tensor):
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)

    def step() -> None:
        logits = model(src, tgt[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt[:, 1:].reshape(-1), ignore_index=0,
                                           label_smoothing=0.1)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def timed(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def run(quick: bool = False) -> dict:
    """Measure everything; returns the report (also what ``workbench bench`` prints)."""
    torch.manual_seed(0)
    repeats = 3 if quick else 9
    vocab, B, S, T = 8000, 64, 20, 21
    cfg = wb.preset("tiny" if quick else "small")
    src = torch.randint(4, vocab, (B, S))
    src[: B // 4, S - 5 :] = 0  # some padding, as in real batches
    tgt = torch.randint(4, vocab, (B, T))
    ours = wb.build_model(cfg, vocab, vocab).train()
    ref = NNTransformer(cfg, vocab).train()
    steps = {"ours": step_fn(ours, src, tgt), "nn.Transformer": step_fn(ref, src, tgt)}
    for fn in steps.values():
        fn()  # warm-up
    times: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(repeats):  # interleaved, so machine noise hits both alike
        for k, fn in steps.items():
            times[k] += timed(fn, 1)
    med = {k: statistics.median(v) for k, v in times.items()}
    report = {
        "machine": platform.processor() or platform.machine(), "threads": torch.get_num_threads(), "torch": torch.__version__,
        "preset": "tiny" if quick else "small", "batch": [B, S, T],
        "train_step_s": med, "train_step_ratio_ours_over_nn": med["ours"] / med["nn.Transformer"],
    }

    # capture: hook points present but nothing listening, vs an empty capture context, vs full capture
    ours.eval()
    with torch.no_grad():
        def plain() -> None:
            ours(src, tgt)

        def inactive() -> None:
            with wb.capture_attention(ours, kinds=[]):
                ours(src, tgt)

        def active() -> None:
            with wb.capture_attention(ours):
                ours(src, tgt)

        for fn in (plain, inactive, active):
            fn()
        t = {"plain": [], "capture_context_empty": [], "capture_all": []}
        for _ in range(repeats * 2):
            t["plain"] += timed(plain, 1)
            t["capture_context_empty"] += timed(inactive, 1)
            t["capture_all"] += timed(active, 1)
    fwd = {k: statistics.median(v) for k, v in t.items()}
    report["forward_s"] = fwd
    report["capture_inactive_overhead_pct"] = 100 * (fwd["capture_context_empty"] / fwd["plain"] - 1)
    report["capture_active_overhead_pct"] = 100 * (fwd["capture_all"] / fwd["plain"] - 1)

    # decoding with vs without the cache, 40 output tokens (eos never chosen: an id outside the vocabulary)
    dsrc = src[:16]
    dec = {}
    for name, fn in {
        "greedy": lambda c: greedy_decode(ours, dsrc, max_len=40, use_cache=c),
        "beam4": lambda c: beam_search(ours, dsrc, beam=4, max_len=40, use_cache=c),
    }.items():
        for cache in (True, False):
            fn(cache)
            runs = timed(lambda fn=fn, cache=cache: fn(cache), max(2, repeats // 3))
            dec[f"{name}_{'cached' if cache else 'uncached'}_sent_per_s"] = len(dsrc) / statistics.median(runs)
        dec[f"{name}_cache_speedup"] = dec[f"{name}_cached_sent_per_s"] / dec[f"{name}_uncached_sent_per_s"]
    report["decoding"] = dec
    return report


def main(suites: list[str] | None = None, quick: bool = False, out_json: str | None = None) -> int:
    """Entry point of ``workbench bench``: prints the report as JSON, optionally writes it to ``out_json``."""
    report = run(quick=quick)
    print(json.dumps(report, indent=2))
    if out_json:
        with open(out_json, "w") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    sys.exit(main(quick=a.quick, out_json=a.json))
