"""Benchmark: the two attention paths of a CPU bf16 decoding step, on real beam-4 batches, with per-op profiles.

    python bench/archive/bf16_attention_paths.py [--threads 2] [--sentences 128] [--rounds 2] [--json FILE]

A bf16 decoding step has one query per row. :class:`workbench.translation.kernels.CpuAttention` computes it with
two explicit products (softmax(Q K^T / sqrt(d_k)) V) on a processor without AMX and with torch's flash kernel on one
with AMX (:func:`~workbench.translation.kernels.choose_kernels` picks; this script replaces that choice to force
either). This script decodes the
first ``--sentences`` of test_2016_flickr with the shipped small-de-en (beam 4, 64-sentence batches) in fp32, in bf16
through the explicit products and in bf16 through the flash kernel, whatever this processor has, ``--rounds`` times
in that order, and times each. Then it profiles one fp32 and one bf16 run (this processor's own path) and keeps the
22 ops with the most self time of each, and times ``F.linear`` in both formats on the decoding step's shapes.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sentences", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    torch.set_num_threads(args.threads)

    from torch.profiler import ProfilerActivity, profile

    from workbench.runtime import choose_precision, cpu_flags
    from workbench.tools.provenance import provenance
    from workbench.translation import kernels
    from workbench.translation.decode import translate
    from workbench.translation.pipeline import load_pairs
    from workbench.translation.shipped import load_any

    device = torch.device("cpu")
    report = {**provenance(device=device), "amx": "amx_bf16" in cpu_flags()}
    model, tokenizer, _ = load_any("small-de-en", device=device)
    sources = [s for s, _ in load_pairs("test_2016_flickr", "de", "en", args.data_dir)][: args.sentences]
    bf16 = choose_precision("bf16", device)  # refuses, in one line, on a CPU without bf16 support

    def run(precision: object) -> float:
        start = time.perf_counter()
        translate(model, tokenizer, sources, beam=4, alpha=0.6, batch_size=64, device=device, precision=precision)
        return time.perf_counter() - start

    seconds: dict[str, list[float]] = {}
    choose = kernels.choose_kernels
    try:
        for _ in range(args.rounds):
            for label, precision, path in (("fp32", "fp32", None), ("bf16_explicit", bf16, "explicit"),
                                           ("bf16_flash", bf16, "flash")):
                forced = choose() if path is None else kernels.Kernels(attention=kernels.CpuAttention(path))
                kernels.choose_kernels = lambda forced=forced: forced  # which kernel translate() installs
                seconds.setdefault(label, []).append(round(run(precision), 3))
    finally:
        kernels.choose_kernels = choose
    report["seconds"] = seconds
    print(f"{len(sources)} sentences, beam 4, seconds per round: {seconds}")
    tables = {}
    for label, precision in (("fp32", "fp32"), ("bf16", bf16)):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            run(precision)
        tables[label] = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=22)
    report["profiles"] = tables
    linear_us = {}
    for rows in (256, 128, 32):
        for d_in, d_out in ((512, 512), (512, 2048), (2048, 512), (512, 8000)):
            x, w, b = torch.randn(rows, d_in), torch.randn(d_out, d_in), torch.randn(d_out)
            for dtype in (torch.float32, torch.bfloat16):
                xx, ww, bb = x.to(dtype), w.to(dtype), b.to(dtype)
                for _ in range(3):
                    torch.nn.functional.linear(xx, ww, bb)
                start = time.perf_counter()
                for _ in range(20):
                    torch.nn.functional.linear(xx, ww, bb)
                linear_us[f"{rows}x{d_in}x{d_out} {str(dtype)[6:]}"] = round((time.perf_counter() - start) / 20 * 1e6, 1)
    report["linear_us"] = linear_us
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
