"""Time of a full layer x position patching sweep of one minimal pair with the shipped small-de-en (issue 34: <= 2 s
on a 2-core CPU).

    python bench/patching_sweep.py [--threads 1 2] [--repeats 7] [--pair 0] [--out bench/results/patching/...json]

The pair is the ``--pair``-th pronoun minimal pair (:mod:`workbench.lessons.pronoun_pairs`) built from the
validation split. A *full* layer x position sweep patches, clean -> corrupted, every cell of the three position
families: the source embedding and the encoder residual stream after each layer at every source position
(``enc.resid``), each decoder layer's cross keys and values at every source position (``dec.memory``), and the
target embedding and decoder residual stream at every target position (``dec.resid``); the report keeps the keys
``resid_enc``, ``memory``, ``resid_dec`` of its earlier results. Its time includes caching both
runs. Each family alone, a layer x head sweep of the cross-attention and the path patching grid are timed too.
Timings are medians of ``--repeats`` runs after one warm-up, per thread count, the thread counts interleaved; the
machine's load average is recorded beside them, so that figures taken on a busy machine are read as such.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

import workbench as wb
from workbench.inspect.patching_sweeps import (
    LogitDiff,
    path_patching,
    prepare_pair,
    sweep_heads,
    sweep_positions,
)
from workbench.lessons.pronoun_pairs import build_pronoun_pairs
from workbench.tools.provenance import provenance, write_report
from workbench.translation.data import load_multi30k

TARGET_S = 2.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch intra-op thread counts to time")
    ap.add_argument("--repeats", type=int, default=7, help="timed runs per measurement (median reported)")
    ap.add_argument("--pair", type=int, default=0, help="which validation pair to sweep")
    ap.add_argument("--out", default=None, help="JSON file to write (default: bench/results/patching/sweep-<commit>.json)")
    args = ap.parse_args()
    record = provenance()
    load_before = os.getloadavg()
    model, tok, _ = wb.pretrained("small-de-en")
    pairs = build_pronoun_pairs(model, tok, [("val", s) for s, _ in load_multi30k("val")], kinds=("possessive", "subject"))
    p = pairs[args.pair]
    clean, corrupt = torch.tensor([p.clean_src]), torch.tensor([p.corrupt_src])
    tgt = (torch.tensor([p.tgt]), torch.tensor([p.corrupt_tgt]))
    metric = LogitDiff(p.pos, p.good, p.bad)

    def full() -> None:
        pair = prepare_pair(model, clean, corrupt, tgt, metric)
        for family in ("enc.resid", "dec.memory", "dec.resid"):
            sweep_positions(model, clean, corrupt, tgt, metric, family=family, prepared=pair)

    pair = prepare_pair(model, clean, corrupt, tgt, metric)
    jobs = {
        "full_layer_x_position": full,
        "resid_enc": lambda: sweep_positions(model, clean, corrupt, tgt, metric, "enc.resid", prepared=pair),
        "memory": lambda: sweep_positions(model, clean, corrupt, tgt, metric, "dec.memory", prepared=pair),
        "resid_dec": lambda: sweep_positions(model, clean, corrupt, tgt, metric, "dec.resid", prepared=pair),
        "cross_heads": lambda: sweep_heads(model, clean, corrupt, tgt, metric, "dec.cross", prepared=pair),
        "path_patching": lambda: path_patching(model, clean, corrupt, tgt, metric, prepared=pair),
    }
    times: dict[str, dict[str, list[float]]] = {name: {str(t): [] for t in args.threads} for name in jobs}
    for name, job in jobs.items():
        for threads in args.threads:  # warm-up
            torch.set_num_threads(threads)
            job()
        for _ in range(args.repeats):
            for threads in args.threads:  # interleaved, so a change in the machine's load hits every count
                torch.set_num_threads(threads)
                start = time.perf_counter()
                job()
                times[name][str(threads)].append(time.perf_counter() - start)
    n_enc, n_dec = len(model.encoder_layers), len(model.decoder_layers)
    S, T = clean.shape[1], tgt[0].shape[1]
    result = {
        "what": "activation patching sweeps of one pronoun minimal pair, small-de-en, clean -> corrupted",
        "target_full_sweep_s": TARGET_S,
        "pair": {"clean": p.clean_text, "corrupted": p.corrupt_text, "kind": p.kind, "translation": p.translation,
                 "source_tokens": S, "target_prefix_tokens": T, "metric_position": p.pos},
        "cells": {"resid_enc": (n_enc + 1) * S, "memory": n_dec * S, "resid_dec": (n_dec + 1) * T,
                  "full_layer_x_position": (n_enc + 1) * S + n_dec * S + (n_dec + 1) * T,
                  "cross_heads": n_dec * model.cfg.n_heads,
                  "path_patching": n_enc * n_dec * model.cfg.n_heads ** 2},
        "median_s": {name: {t: statistics.median(v) for t, v in per.items()} for name, per in times.items()},
        "runs_s": times,
        "repeats": args.repeats,
        "load_average_1_5_15_before": load_before,
        "load_average_1_5_15_after": os.getloadavg(),
        **record,  # the provenance record at the top level, as in every bench report
    }
    best = min(result["median_s"]["full_layer_x_position"].values())
    result["full_sweep_within_target"] = best <= TARGET_S
    out = Path(args.out or f"bench/results/patching/sweep-{(record.get('commit') or 'nocommit')[:7]}.json")
    write_report(result, out)
    print(json.dumps({k: result[k] for k in ("pair", "cells", "median_s", "full_sweep_within_target")}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
