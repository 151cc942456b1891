"""Benchmark: train a translator on Multi30k on this machine under a wall-clock budget, then report BLEU.

    python bench/translate_multi30k.py --arch transformer --preset small --minutes 38 --out runs/bench-small

Prints one JSON document: training figures, and val/test sacreBLEU (with signature), tokenized BLEU and chrF for
greedy and beam 4, with and without checkpoint averaging, each with its decoding time.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import sys
import time
from pathlib import Path

import torch

from workbench.checkpoint import average_last
from workbench.pipeline import evaluate_checkpoint, train_translation


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="transformer", choices=["transformer", "rnn"])
    ap.add_argument("--preset", default="small")
    ap.add_argument("--minutes", type=float, default=38.0, help="training budget (evaluation comes on top)")
    ap.add_argument("--out", default="runs/bench-small")
    ap.add_argument("--src", default="de")
    ap.add_argument("--tgt", default="en")
    ap.add_argument("--vocab-size", type=int, default=8000)
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--lr-factor", type=float, default=1.0)
    ap.add_argument("--warmup", type=int, default=800)
    ap.add_argument("--checkpoint-every", type=int, default=150)
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument("--full", action="store_true", help="also evaluate greedy/last and val (slower)")
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s")
    out = Path(args.out)
    t0 = time.perf_counter()
    report: dict = {
        "machine": platform.processor() or platform.machine(),
        "cpus": torch.get_num_threads(),
        "torch": torch.__version__,
        "device": "cuda" if torch.cuda.is_available() else "cpu",
        "args": vars(args),
    }
    if not args.skip_train:
        report["train"] = train_translation(
            preset_name=args.preset, src=args.src, tgt=args.tgt, out_dir=out, arch=args.arch, epochs=1000,
            max_minutes=args.minutes, data_dir=args.data_dir, vocab_size=args.vocab_size, max_tokens=args.max_tokens,
            lr_factor=args.lr_factor, warmup_steps=args.warmup, checkpoint_every=args.checkpoint_every,
            bleu_max_sentences=300,
        )
        history = json.loads((out / "history.json").read_text())
        report["history"] = {k: history[k] for k in ("train_loss", "val_loss", "val_bleu", "tokens_per_s", "elapsed_s")}
    averaged = average_last(out, last=5)
    runs = [("averaged", averaged, "test_2016_flickr", 4)]
    if args.full:
        runs += [
            ("averaged", averaged, "test_2016_flickr", 1),
            ("last", out / "last.pt", "test_2016_flickr", 4),
            ("last", out / "last.pt", "test_2016_flickr", 1),
            ("averaged", averaged, "val", 4),
        ]
    report["eval"] = []
    for name, ckpt, split, beam in runs:
        res = evaluate_checkpoint(ckpt, split=split, beam=beam, data_dir=args.data_dir, device="auto")
        res["weights"] = name
        report["eval"].append(res)
        print(json.dumps({k: res[k] for k in ("weights", "split", "beam", "bleu", "tok_bleu", "chrf", "decode_seconds")}), file=sys.stderr)
        if len(report["eval"]) == 1:
            report["wall_minutes_to_headline"] = round((time.perf_counter() - t0) / 60, 1)
    report["wall_minutes_total"] = round((time.perf_counter() - t0) / 60, 1)
    (out / "bench_report.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
