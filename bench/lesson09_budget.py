"""Can lesson 09 train for less? Its recipe with another step count, token budget, warm-up or seed, scored as the lesson
scores it: sacreBLEU on all of test_2016_flickr, greedy from the last weights, then greedy and beam 4 from the average
of the last snapshots.

    python bench/lesson09_budget.py --steps 400 --max-tokens 2048 --warmup 400 --seed 0 --json FILE

One run on one CPU thread (as a lesson in the book gets) into a fresh temporary cache, so nothing cached is reused.
The lesson asserts a beam-4 BLEU above 8 at its defaults (400 steps, 3,072 tokens, warm-up 400): a cheaper setting
is acceptable only if it keeps that margin over seeds. Needs the Multi30k files (``WORKBENCH_MULTI30K``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

import torch

import workbench as wb
from workbench.tools.provenance import provenance, write_report


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=400, help="optimizer steps (the lesson's TRAIN_STEPS)")
    ap.add_argument("--max-tokens", type=int, default=3072, help="token budget of a batch (the lesson's MAX_TOKENS)")
    ap.add_argument("--warmup", type=int, default=400, help="warm-up steps of the schedule")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the book gives each lesson one)")
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args(argv)

    from workbench.translation.checkpoint import average_last, load_model
    from workbench.translation.data import load_multi30k
    from workbench.translation.decode import translate
    from workbench.translation.metrics import corpus_bleu
    from workbench.translation.pipeline import get_translator

    torch.set_num_threads(args.threads)
    wb.set_seed(args.seed)
    run = wb.RunConfig.from_flat(preset="small", max_steps=args.steps, seed=args.seed, max_tokens=args.max_tokens,
                                 warmup_steps=args.warmup, checkpoint_every=150, eval_bleu=False, precision="fp32")
    with tempfile.TemporaryDirectory(prefix="lesson09-budget-") as cache:
        start = time.perf_counter()
        model, tok, state = get_translator(run, cache_dir=cache)
        train_s = time.perf_counter() - start
        test = load_multi30k("test_2016_flickr", "de", "en")
        sources, refs = [s for s, _ in test], [t for _, t in test]
        averaged = load_model(average_last(state["run_dir"], last=5))[0]
        report = {**provenance(), "steps": args.steps, "max_tokens": args.max_tokens, "warmup": args.warmup,
                  "seed": args.seed, "threads": args.threads, "train_seconds": round(train_s, 1),
                  "bleu_last_greedy": corpus_bleu(translate(model, tok, sources, beam=1), refs).score,
                  "bleu_averaged_greedy": corpus_bleu(translate(averaged, tok, sources, beam=1), refs).score,
                  "bleu_averaged_beam4": corpus_bleu(translate(averaged, tok, sources, beam=4), refs).score}
    sys.stdout.write(write_report(report, args.json))


if __name__ == "__main__":
    main()
