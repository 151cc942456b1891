"""Toggle-to-figure latency of the head-intervention inspector (issue 17 target: <= 300 ms on a 2-core CPU).

    python bench/archive/intervention_latency.py [--checkpoint small-de-en] [--tokens 30] [--max-extra 50] [--threads 1]

Loads the shipped ``small-de-en`` translator (or a checkpoint file / run folder; ``--checkpoint random`` builds a
randomly initialised ``small`` model with a BPE tokenizer trained on Multi30k), opens :class:`workbench.viz.widgets.HeadInterventionInspector` on a validation sentence of
``--tokens`` subword tokens, switches heads (then whole layers) off and on again one at a time, and prints one
JSON document: the server-side time from each toggle to updated figures (wall clock and process CPU time), split
into model and figure time, with the machine's load average so that numbers taken on a busy machine are read
as such. The default of one torch thread is the fastest for a batch of one sentence on a small CPU.

A randomly initialised model never emits eos, so its "translation" runs to the length budget (source length +
``--max-extra``): the worst case for the re-decoding.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

from workbench import build_model, preset
from workbench.inspect.intervene import intervened_greedy
from workbench.tools.provenance import provenance
from workbench.translation.data import load_multi30k
from workbench.translation.shipped import load_any
from workbench.translation.tokenizer import SubwordTokenizer
from workbench.viz.widgets import HeadInterventionInspector


def _sentence(tok: SubwordTokenizer, pairs: list[tuple[str, str]], n_tokens: int) -> str:
    """A validation sentence with exactly ``n_tokens`` source tokens (eos included), else the closest one."""
    return min((s for s, _ in pairs), key=lambda s: (abs(len(tok.encode_src([s])[0]) - n_tokens), s))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", default="small-de-en",
                    help="shipped model name, checkpoint file or run folder; 'random' for an untrained small model")
    ap.add_argument("--tokens", type=int, default=30, help="source length in subword tokens (eos included)")
    ap.add_argument("--max-extra", type=int, default=50, help="greedy output budget beyond the source length")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (the target is a 2-core CPU)")
    ap.add_argument("--toggles", type=int, default=12, help="heads switched off and on again, one at a time")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    record = provenance()
    val = load_multi30k("val", "de", "en")
    if args.checkpoint != "random":
        model, tok, _ = load_any(args.checkpoint)
    else:
        tok = SubwordTokenizer.train(load_multi30k("train", "de", "en"), vocab_size=8000)
        torch.manual_seed(0)
        model = build_model(preset("small"), tok.src_vocab_size, tok.tgt_vocab_size)
    model.eval()
    sentence = _sentence(tok, val, args.tokens)
    insp = HeadInterventionInspector(model, tok, sentence=sentence, max_extra=args.max_extra)
    keys = list(insp.toggles)
    step = max(1, len(keys) // args.toggles)
    runs = []
    for key in keys[::step][: args.toggles]:
        for value in (True, False):
            wall, cpu = time.perf_counter(), time.process_time()
            insp.toggles[key].value = value
            runs.append({"head": key, "off": value, "wall_ms": (time.perf_counter() - wall) * 1000,
                         "cpu_ms": (time.process_time() - cpu) * 1000, "handler_ms": insp.last_update_ms,
                         **insp.timings, "translation_changed": insp.outcome.diverged_at is not None,
                         "output_tokens": len(insp.outcome.out_ids)})
    for kind, layer in insp.layer_buttons:  # whole layers: these change a translation more often than one head
        for value in (True, False):
            wall, cpu = time.perf_counter(), time.process_time()
            insp.layer_buttons[(kind, layer)].click()
            runs.append({"head": (kind, layer, "all"), "off": value, "wall_ms": (time.perf_counter() - wall) * 1000,
                         "cpu_ms": (time.process_time() - cpu) * 1000, "handler_ms": insp.last_update_ms,
                         **insp.timings, "translation_changed": insp.outcome.diverged_at is not None,
                         "output_tokens": len(insp.outcome.out_ids)})
    changed = [r for r in runs if r["translation_changed"]]
    # worst case for the model part: a translation that changes at its very first token is decoded in full
    ins, worst = insp.original, []
    reference = [ins.out_ids[0] + 1, *ins.out_ids[1:]]  # any first token the model will not pick
    for _ in range(5):
        wall, cpu = time.perf_counter(), time.process_time()
        out = intervened_greedy(model, ins.src_ids, reference, bos_id=tok.bos_id, eos_id=tok.eos_id,
                                max_extra=args.max_extra)
        worst.append({"wall_ms": (time.perf_counter() - wall) * 1000, "cpu_ms": (time.process_time() - cpu) * 1000,
                      "decoded_tokens": len(out.out_ids), "diverged_at": out.diverged_at})
    med = {k: statistics.median(r[k] for r in runs) for k in ("wall_ms", "cpu_ms", "model_ms", "figures_ms")}
    print(json.dumps({
        "what": "HeadInterventionInspector toggle-to-figure time (server side)",
        "model": args.checkpoint if args.checkpoint != "random" else "small preset, random init (seed 0)",
        "source_tokens": len(insp.original.src_ids), "original_output_tokens": len(insp.original.out_ids),
        "max_extra": args.max_extra, **record, "load_average_1_5_15": os.getloadavg(),
        "median": med, "max_wall_ms": max(r["wall_ms"] for r in runs),
        "median_when_translation_changed": {k: statistics.median(r[k] for r in changed) for k in ("wall_ms", "cpu_ms")}
        if changed else None, "n_changed": len(changed),
        "model_part_full_redecode": {"median_wall_ms": statistics.median(w["wall_ms"] for w in worst),
                                     "median_cpu_ms": statistics.median(w["cpu_ms"] for w in worst), "runs": worst},
        "runs": runs,
    }, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
