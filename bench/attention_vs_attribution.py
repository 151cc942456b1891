"""Attention as explanation, measured: does cross-attention rank the source tokens as attributions do?

    python bench/attention_vs_attribution.py [--limit N] [--steps 32] [--align-pairs 10000] \
        [--json bench/results/attention-vs-attribution-NAME.json]

The measurement of notebook 13, over the whole of Multi30k test_2016_flickr (or its first ``--limit`` sentences
after a seeded shuffle) with the shipped ``small-de-en`` translator (``--checkpoint`` for another):

* per output token, the Spearman rank correlation between |attribution| (saliency, input x gradient,
  integrated gradients from the token's log-probability to the source embeddings) and three attention
  summaries (last layer's cross-attention averaged over heads, all layers averaged, decoder-to-source rollout),
  averaged per sentence; beside it the same correlation with random scores and with a position-only diagonal
  prior (the baselines), and the per-sentence gap above the random baseline in standard errors;
* how often the most attributed / attended source word is the IBM Model 1 aligner's (trained by EM on the first
  ``--align-pairs`` training pairs), against a random word, a uniform guess and the diagonal prior;
* integrated gradients' completeness (sum of scores against f(input) - f(baseline)) at ``--steps`` steps;
* head intervention: the cross-attention heads ranked by their agreement with integrated gradients on one half
  of the sentences; the ``--ablate`` most and least agreeing heads (and ``--random-sets`` random sets of as many)
  switched off (zero ablation) and the mean reference-token log-probability measured on the other half; the
  layer-matched control switches off the least agreeing heads of the layers the most agreeing ones sit in.

Writes one JSON document (machine, torch version, git commit, command line, every figure) to ``--json``
(default ``bench/results/attention-vs-attribution-<cpu|gpu>-<commit>.json``) and prints it. Progress goes to
stderr. A full run is long on a CPU (about 4 s per sentence on one core at 32 steps).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
SPLIT = "test_2016_flickr"
HEAD_METHOD = "integrated_gradients"  # the heads are ranked by their agreement with this attribution


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", default="small-de-en", help="shipped model name, checkpoint file or run folder")
    ap.add_argument("--limit", type=int, default=None, help="only this many sentences (after the seeded shuffle)")
    ap.add_argument("--steps", type=int, default=32, help="integration steps of integrated gradients")
    ap.add_argument("--align-pairs", type=int, default=10000, help="training pairs for the IBM Model 1 aligner")
    ap.add_argument("--ablate", type=int, default=4, help="heads switched off in each group")
    ap.add_argument("--random-sets", type=int, default=20, help="random head sets of the same size (the baseline)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    ap.add_argument("--data-dir", default=None, help="Multi30k folder (default: WORKBENCH_MULTI30K)")
    ap.add_argument("--json", default=None, help="where to write the report (default under bench/results/)")
    return ap


def _ablation(model: Any, tok: Any, rows: list[dict[str, Any]], pairs: list[tuple[str, str]], n_ablate: int,
              random_sets: int, seed: int) -> dict[str, Any]:
    """Rank cross heads on the first half of the sentences, measure the damage of ablating them on the other."""
    from workbench.inspect.attribution import head_agreement
    from workbench.inspect.intervene import ablate_heads
    from workbench.translation.batching import make_batch, token_batches
    from workbench.translation.train import evaluate

    half = len(rows) // 2
    agreement = head_agreement(rows[:half], HEAD_METHOD)  # (L, H)
    L, H = agreement.shape
    flat = agreement.flatten()
    heads = [("dec.cross", i // H, i % H) for i in range(L * H)]
    order = [heads[i] for i in torch.argsort(flat, descending=True, stable=True).tolist()
             if math.isfinite(float(flat[i]))]
    held = pairs[half:]
    src, tgt = tok.encode_src([s for s, _ in held]), tok.encode_tgt([t for _, t in held])
    idx = token_batches([len(s) for s in src], [len(t) for t in tgt], 1500, shuffle=False)
    batches = [make_batch([src[i] for i in b], [tgt[i] for i in b], tok.pad_id) for b in idx]
    device = next(model.parameters()).device
    batches = [b.to(device) for b in batches]

    def logprob(ablated: list[tuple[str, int, int]]) -> float:
        with ablate_heads(model, ablated):
            return -evaluate(model, batches, tok.pad_id)["loss"]  # mean log p(reference token)

    gen = torch.Generator().manual_seed(seed)
    random_heads = [[heads[i] for i in torch.randperm(len(heads), generator=gen)[:n_ablate].tolist()]
                    for _ in range(random_sets)]
    full = logprob([])
    most, least = order[:n_ablate], order[::-1][:n_ablate]
    matched = []  # per layer of the most agreeing set, as many of that layer's least agreeing heads (not in that set)
    for layer in sorted({h[1] for h in most}):
        count = sum(h[1] == layer for h in most)
        matched += [h for h in order[::-1] if h[1] == layer and h not in most][:count]
    drop = {"most agreeing": full - logprob(most), "least agreeing": full - logprob(least),
            "layer-matched, least agreeing": full - logprob(matched) if len(matched) == len(most) else math.nan}
    random_drops = [full - logprob(r) for r in random_heads]
    return {
        "ranked_on_sentences": half, "measured_on_sentences": len(held), "method": HEAD_METHOD,
        "head_agreement": agreement.tolist(), "most_agreeing_heads": [list(h) for h in most],
        "least_agreeing_heads": [list(h) for h in least], "layer_matched_heads": [list(h) for h in matched],
        "logprob_all_heads": full,
        "logprob_drop": drop, "logprob_drop_random_sets": random_drops,
        "logprob_drop_random_mean": float(np.mean(random_drops)) if random_drops else math.nan,
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from workbench.inspect.align import ibm1
    from workbench.inspect.attribution import (
        METHODS,
        completeness,
        measure_agreement,
        paired_gap,
        summarise_agreement,
    )
    from workbench.runtime import resolve_device
    from workbench.tools.provenance import provenance
    from workbench.translation.data import load_multi30k
    from workbench.translation.shipped import load_any

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.data_dir:
        os.environ["WORKBENCH_MULTI30K"] = str(Path(args.data_dir).expanduser().resolve())
    started = time.perf_counter()
    device = resolve_device(args.device)
    model, tok, info = load_any(args.checkpoint, device=device)
    model.eval()
    test = load_multi30k(SPLIT, "de", "en")
    order = np.random.default_rng(args.seed).permutation(len(test))
    pairs = [test[i] for i in order[: args.limit]]
    t0 = time.perf_counter()
    t_prob = ibm1(load_multi30k("train", "de", "en", limit=args.align_pairs), iterations=5)
    align_s = time.perf_counter() - t0
    # the code this run measures: read before the long run, not when it ends
    record = provenance([Path(sys.executable).name, *sys.argv], cwd=ROOT, device=device)
    t0 = time.perf_counter()
    rows = measure_agreement(model, tok, [s for s, _ in pairs], t_prob, methods=METHODS, n_steps=args.steps,
                             progress=True, baselines=True, per_head=True, seed=args.seed)
    measure_s = time.perf_counter() - t0
    summaries = ("cross last", "cross mean", "rollout")
    gaps = {f"{m}/{a}": paired_gap(rows, f"spearman/{m}/{a}", f"spearman/{m}/random") for m in METHODS for a in summaries}
    align_gaps = {name: paired_gap(rows, f"align/{name}", "align/uniform") for name in (*summaries, *METHODS)}
    t0 = time.perf_counter()
    ablation = _ablation(model, tok, rows, pairs, args.ablate, args.random_sets, args.seed)
    ablation_s = time.perf_counter() - t0
    return {
        "what": "attention vs attribution agreement (notebook 13's measurement) on Multi30k " + SPLIT,
        "model": args.checkpoint, "model_card_bleu": info.get("card", {}).get("bleu", {}).get(SPLIT),
        "model_sha256": info.get("card", {}).get("sha256", {}).get("model.safetensors"),  # which weights were measured
        "sentences": len(pairs), "split": SPLIT, "ig_steps": args.steps, "align_pairs": args.align_pairs,
        "seed": args.seed, **record,
        "seconds": {"total": round(time.perf_counter() - started, 1), "ibm1": round(align_s, 1),
                    "agreement": round(measure_s, 1), "ablation": round(ablation_s, 1)},
        "agreement": summarise_agreement(rows),
        "spearman_gap_over_random": gaps,
        "alignment_gap_over_uniform": align_gaps,
        "ig_completeness": completeness(rows),
        "ablation": ablation,
    }


def main(argv: list[str] | None = None) -> int:
    from workbench.tools.provenance import write_report

    args = build_parser().parse_args(argv)
    report = measure(args)
    tag = "gpu" if report["device"] != "cpu" else "cpu"
    path = Path(args.json) if args.json else (
        ROOT / "bench" / "results" / f"attention-vs-attribution-{tag}-{(report['commit'] or 'nocommit')[:7]}.json")
    print(write_report(report, path), end="")
    print(f"written: {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
