"""Shipped models decoded in bf16 against fp32 and against their cards: test_2016_flickr sacreBLEU and decoding time.

    python bench/bf16_shipped.py [--names small-de-en gru-de-en] [--split test_2016_flickr] [--beam N] [--json FILE]

Each shipped model decodes the split with its card's beam (or ``--beam``; 1 is greedy) and length penalty twice, in
fp32 and in bf16 (the order alternating from model to model), through the one scoring function
(:func:`workbench.translation.pipeline.score`). The report holds, per model: the card's score, both scores here,
their differences, both decoding times and their ratio (the beam-4 decoding speed-up on real sentences), the
machine's load average before and after (a shared machine is said to be shared), and the provenance record
(:mod:`workbench.tools.provenance`). bf16 needs a CPU with bf16 matrix units (``--precision bf16`` refuses
otherwise).

The two whole-split timings run one after the other, so a busy spell of a shared machine can fall on one format only.
``race`` then times the split again batch by batch (the 64-sentence length-sorted batches of ``translate``), both
formats on every batch, which one goes first alternating from batch to batch: its ``speedup_bf16`` (summed fp32 time
over summed bf16 time) and ``median_batch_speedup_bf16`` are the figures to read on a loaded machine.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from typing import Any

import torch

from workbench.runtime import choose_precision, resolve_device
from workbench.tools.provenance import provenance, utc_now, write_report
from workbench.translation.pipeline import load_pairs, score
from workbench.translation.shipped import default_alpha, list_pretrained, load_any, read_card

TOLERANCE = 0.3  # BLEU: the bound on bf16 decoding against the card


def race(model: torch.nn.Module, tokenizer: Any, sources: list[str], beam: int, alpha: float,
         device: torch.device, bf16: Any, batch_size: int = 64) -> dict[str, Any]:
    """Decode ``sources`` batch by batch in fp32 and in bf16, alternating which goes first; times per batch."""
    from workbench.translation.decode import translate

    lengths = [len(ids) for ids in tokenizer.encode_src(sources)]
    order = sorted(range(len(sources)), key=lambda i: lengths[i])  # as translate() batches
    batches = [[sources[i] for i in order[k : k + batch_size]] for k in range(0, len(order), batch_size)]
    seconds: dict[str, list[float]] = {"fp32": [], "bf16": []}
    for b, chunk in enumerate(batches):
        for name, precision in ((("fp32", "fp32"), ("bf16", bf16)) if b % 2 == 0 else
                                (("bf16", bf16), ("fp32", "fp32"))):
            start = time.perf_counter()
            translate(model, tokenizer, chunk, beam=beam, alpha=alpha, batch_size=batch_size, device=device,
                      precision=precision)
            seconds[name].append(time.perf_counter() - start)
    ratios = sorted(f / b for f, b in zip(seconds["fp32"], seconds["bf16"], strict=True))
    return {"batches": len(batches), "batch_size": batch_size,
            "fp32_seconds": round(sum(seconds["fp32"]), 2), "bf16_seconds": round(sum(seconds["bf16"]), 2),
            "speedup_bf16": round(sum(seconds["fp32"]) / sum(seconds["bf16"]), 3),
            "median_batch_speedup_bf16": round(ratios[len(ratios) // 2], 3),
            "batch_seconds": {k: [round(t, 3) for t in v] for k, v in seconds.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--names", nargs="+", default=None, help="shipped models (default: all)")
    ap.add_argument("--split", default="test_2016_flickr")
    ap.add_argument("--beam", type=int, default=None, help="beam size instead of the card's (1: greedy search)")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)

    device = resolve_device("cpu")
    bf16 = choose_precision("bf16", device)  # refuses, in one line, on a CPU without bf16 support
    report = {**provenance(device=device), "load_average_start": os.getloadavg(), "split": args.split,
              "tolerance_bleu": TOLERANCE, "models": {}}
    for i, name in enumerate(args.names or list_pretrained()):
        model, tokenizer, info = load_any(name, device=device)
        card = read_card(name)
        beam = args.beam or card.get("decoding", {}).get("beam", 4)
        alpha = default_alpha(info)
        pairs = load_pairs(args.split, info["extra"]["src_lang"], info["extra"]["tgt_lang"], args.data_dir)
        order = ("fp32", bf16) if i % 2 == 0 else (bf16, "fp32")
        runs = {}
        for precision in order:
            r = score(model, tokenizer, pairs, beam=beam, alpha=alpha, device=device, precision=precision)
            runs[r["precision"]] = r
        card_bleu = card["bleu"][args.split][f"beam{beam}" if beam > 1 else "greedy"]
        report["models"][name] = {
            "beam": beam, "alpha": alpha, "order": [p if isinstance(p, str) else p.name for p in order],
            "card_bleu": card_bleu, "fp32": runs["fp32"], "bf16": runs["bf16"],
            "bf16_minus_card": round(runs["bf16"]["bleu"] - card_bleu, 2),
            "bf16_minus_fp32": round(runs["bf16"]["bleu"] - runs["fp32"]["bleu"], 2),
            "within_tolerance": abs(runs["bf16"]["bleu"] - card_bleu) <= TOLERANCE,
            "decode_speedup_bf16": runs["fp32"]["decode_seconds"] / runs["bf16"]["decode_seconds"],
            "race": race(model, tokenizer, [s for s, _ in pairs], beam, alpha, device, bf16),
        }
        m = report["models"][name]
        print(f"{name}: card {card_bleu:.2f}, fp32 {runs['fp32']['bleu']:.2f}, bf16 {runs['bf16']['bleu']:.2f} "
              f"({m['bf16_minus_card']:+.2f} vs card); decoding {runs['fp32']['decode_seconds']:.0f} s fp32, "
              f"{runs['bf16']['decode_seconds']:.0f} s bf16 ({m['decode_speedup_bf16']:.2f}x); batch by batch, "
              f"interleaved: {m['race']['speedup_bf16']:.2f}x (median batch {m['race']['median_batch_speedup_bf16']:.2f}x)",
              flush=True)
    report["load_average_end"] = os.getloadavg()
    report["finished_utc"] = utc_now()
    report["threads"] = torch.get_num_threads()
    write_report(report, args.json)


if __name__ == "__main__":
    main()
