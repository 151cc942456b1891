"""Benchmark: end-to-end training tokens/s of the README recipe in fp32 against bf16, on this machine's CPU.

    python bench/archive/e2e_precision.py [--pairs 4000] [--rounds 3] [--threads N] [--json FILE]

The race of ``workbench bench --suite e2e`` (:func:`workbench.tools.bench.probes.e2e_precision_race`) on its own,
without the suite's extra ``fit`` in the format ``auto`` picks, and with the number of passes and pairs as options,
so a short lease of another machine can measure it: the ``cpu-small`` recipe (small preset, dropout 0.2, 3,072-token
batches, its schedule) trains for one pass over the first ``--pairs`` Multi30k training pairs, ``--rounds`` passes
per format, the order alternating (fp32, bf16, bf16, fp32, ...), every pass from the same initial weights. Reports
each pass's tokens/s, the medians and their ratio, with the provenance record (CPU model, flags, threads, commit).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=4000, help="training pairs per pass (the e2e suite's 4000)")
    ap.add_argument("--rounds", type=int, default=3, help="passes per format")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    if args.threads:
        torch.set_num_threads(args.threads)

    from workbench.tools.bench.probes import e2e_precision_race
    from workbench.tools.provenance import provenance, utc_now
    from workbench.translation.data import load_multi30k
    from workbench.translation.tokenizer import SubwordTokenizer

    device = torch.device("cpu")
    report = {**provenance(device=device), "load_average_start": os.getloadavg()}
    pairs = list(load_multi30k("train", "de", "en"))[: args.pairs]
    tokenizer = SubwordTokenizer.train(pairs, vocab_size=8000, joint=True)  # as the e2e suite
    report["race"] = e2e_precision_race(device, tokenizer, pairs, rounds=args.rounds)
    report["load_average_end"] = os.getloadavg()
    report["finished_utc"] = utc_now()
    race = report["race"]
    if "skipped" in race:
        print(race["skipped"])
    else:
        med = race["median_tokens_per_s"]
        print(f"cpu-small recipe, {len(pairs)} pairs, {args.rounds} passes each: fp32 {med['fp32']:.0f} tok/s, "
              f"bf16 {med['bf16']:.0f} tok/s, bf16 speed-up {race['bf16_speedup']:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
