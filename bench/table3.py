"""The paper's Table 3 rows at small scale, trained until the base stops improving, several seeds per row.

    python bench/table3.py [--d-model 64] [--train-pairs 10000] [--seeds 0 1 2] [--jobs 2] [--budget auto|STEPS]
                           [--json bench/results/table3/table3-COMMIT.json]

Step 1 (``--budget auto``): the base model (seed 0) trains with early stopping on Multi30k val, an epoch at a time,
until its validation loss has not fallen for ``--patience`` epochs; the budget is the optimizer step of its best epoch.
Its whole validation-loss curve is kept in the result. Step 2: every row of :func:`workbench.lessons.table3.variants`
trains from every seed for exactly that many steps, with the same learning-rate schedule (the paper's, warm-up
``--warmup`` steps), on the first ``--train-pairs`` Multi30k training pairs with the same batches for every row of a seed, one thread per
run, ``--jobs`` runs at a time. Each run records the validation loss and perplexity (no label smoothing, the whole of
val), the mean entropy of its next-token distributions, and greedy sacreBLEU on the whole of val (the paper reports
Table 3 on its development set; test is never read).

The result file carries the provenance record (:mod:`workbench.tools.provenance`), the settings, the budget curve and
every run, and is rewritten after every run: an interrupted invocation with the same ``--json`` resumes, skipping the
runs it holds (only when the settings match). Notebook 12 reads the newest complete file in ``bench/results/table3/``.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
log = logging.getLogger("table3")


def _setup(settings: dict[str, Any]) -> tuple[Any, Any, Any, Any]:
    """Data, tokenizer and base config, the same in every process (the tokenizer's training is deterministic)."""
    import torch

    import workbench as wb
    from workbench.translation.data import load_multi30k
    from workbench.translation.tokenizer import SubwordTokenizer

    torch.set_num_threads(1)
    train = load_multi30k("train", "de", "en", data_dir=settings["data_dir"], limit=settings["train_pairs"])
    val = load_multi30k("val", "de", "en", data_dir=settings["data_dir"])
    tok = SubwordTokenizer.train(train, vocab_size=settings["vocab_size"])
    d = settings["d_model"]
    base = wb.preset("small", d_model=d, n_heads=settings["n_heads"], d_ff=4 * d, n_enc_layers=settings["layers"],
                     n_dec_layers=settings["layers"], dropout=settings["dropout"], max_len=128)
    return train, val, tok, base


def _train(settings: dict[str, Any], row: str, seed: int, steps: int | None, patience: int | None) -> dict[str, Any]:
    """One run: ``row`` from ``seed`` for ``steps`` optimizer steps (or, with ``patience``, until val stops falling)."""
    import workbench as wb
    from workbench.lessons.table3 import variants
    from workbench.translation.batching import make_batch
    from workbench.translation.decode import translate
    from workbench.translation.metrics import corpus_bleu
    from workbench.translation.train import evaluate, fit

    train, val, tok, base = _setup(settings)
    model_kw, train_kw = variants(base)[row]
    wb.set_seed(seed)
    cfg = wb.ModelConfig(**{**base.to_dict(), **model_kw})
    model = wb.build_model(cfg, tok.src_vocab_size, tok.tgt_vocab_size)
    tcfg = wb.TrainConfig(**{"epochs": 1000 if steps is None else None, "max_steps": steps, "patience": patience,
                             "warmup_steps": settings["warmup"], "max_tokens": settings["max_tokens"],
                             "eval_bleu": False, "seed": seed, "device": "cpu", "precision": "fp32", **train_kw})
    step = {"n": 0}
    epoch_steps: list[int] = []
    callbacks = {"on_step": lambda s, loss: step.__setitem__("n", s),
                 "on_epoch_end": lambda epoch, history: epoch_steps.append(step["n"])}
    t0 = time.perf_counter()
    hist = fit(model, tok, train, val, tcfg, callbacks=callbacks)
    seconds = time.perf_counter() - t0
    model.eval()
    val_src, val_tgt = tok.encode_src([s for s, _ in val]), tok.encode_tgt([t for _, t in val])
    batches = [make_batch(val_src[i:i + 100], val_tgt[i:i + 100], tok.pad_id) for i in range(0, len(val), 100)]
    ev = evaluate(model, batches, tok.pad_id)
    bleu = corpus_bleu(translate(model, tok, [s for s, _ in val], beam=1), [t for _, t in val])
    return {"row": row, "seed": seed, "steps": step["n"], "params": wb.count_parameters(model),
            "val_loss": ev["loss"], "val_ppl": ev["ppl"], "val_entropy": ev["entropy"], "val_bleu": bleu.score,
            "bleu_signature": bleu.signature,
            "train_seconds": seconds, "stopped": hist.stopped_reason, "best_epoch": hist.best_epoch,
            "epoch_val_loss": hist.val_loss, "epoch_steps": epoch_steps}


def _write(path: Path, report: dict[str, Any]) -> None:
    from workbench.tools.provenance import write_report

    write_report(report, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--d-model", type=int, default=64, help="the base's width (d_ff = 4 d_model, as the paper's)")
    ap.add_argument("--n-heads", type=int, default=4, help="the base's heads")
    ap.add_argument("--layers", type=int, default=2, help="the base's layers on each side")
    ap.add_argument("--dropout", type=float, default=0.1, help="the base's P_drop (the paper's base: 0.1)")
    ap.add_argument("--train-pairs", type=int, default=10000,
                    help="the first N Multi30k training pairs (fewer pairs: the base stops improving sooner)")
    ap.add_argument("--vocab-size", type=int, default=4000, help="joint BPE vocabulary")
    ap.add_argument("--max-tokens", type=int, default=2000, help="tokens per batch (source + target)")
    ap.add_argument("--warmup", type=int, default=400, help="warm-up steps of the paper's schedule")
    ap.add_argument("--budget", default="auto",
                    help="optimizer steps per run, or 'auto': the base's best epoch under early stopping")
    ap.add_argument("--patience", type=int, default=3, help="epochs without a lower val loss that end the budget run")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--rows", nargs="+", default=None, help="only these rows (default: all)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="runs at a time, one thread each")
    ap.add_argument("--data-dir", default=None, help="Multi30k folder (default: WORKBENCH_MULTI30K or the cache)")
    ap.add_argument("--json", type=Path, required=True, help="the result file (resumed when it exists)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    sys.path.insert(0, str(ROOT))

    from workbench.lessons.table3 import BASE, variants
    from workbench.tools.provenance import provenance, utc_now

    settings = {"d_model": args.d_model, "n_heads": args.n_heads, "layers": args.layers, "dropout": args.dropout,
                "train_pairs": args.train_pairs, "vocab_size": args.vocab_size, "max_tokens": args.max_tokens, "warmup": args.warmup,
                "data_dir": args.data_dir, "patience": args.patience}
    report: dict[str, Any] = {}
    if args.json.exists():
        report = json.loads(args.json.read_text())
        if report.get("settings") != settings:
            raise SystemExit(f"{args.json} holds runs made with other settings ({report.get('settings')}): "
                             "give another --json, or the same settings to resume")
        log.info("resuming %s: %d runs done", args.json, len(report.get("runs", [])))
    else:
        report = {**provenance(["python", "bench/table3.py", *(argv if argv is not None else sys.argv[1:])]),
                  "benchmark": "table3", "settings": settings, "seeds": args.seeds, "runs": []}
    _, _, _, base = _setup(settings)
    report["base"] = base.to_dict()
    rows = args.rows or list(variants(base))

    if "budget" not in report:
        if args.budget == "auto":
            log.info("finding the budget: the base (seed %d) until its val loss stops falling", args.seeds[0])
            probe = _train(settings, BASE, args.seeds[0], None, args.patience)
            best = probe["best_epoch"]
            report["budget_run"] = probe
            report["budget"] = probe["epoch_steps"][best - 1]
            log.info("budget: %d steps (epoch %d of %d, val loss %s)", report["budget"], best,
                     len(probe["epoch_val_loss"]), [round(v, 3) for v in probe["epoch_val_loss"]])
        else:
            report["budget"] = int(args.budget)
        _write(args.json, report)
    budget = report["budget"]
    done = {(r["row"], r["seed"]) for r in report["runs"]}
    todo = [(row, seed) for seed in args.seeds for row in rows if (row, seed) not in done]
    log.info("%d runs of %d steps to do, %d at a time", len(todo), budget, args.jobs)
    os.environ["OMP_NUM_THREADS"] = "1"  # one thread per run; the spawned workers inherit it
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(_train, settings, row, seed, budget, None): (row, seed) for row, seed in todo}
        for fut in as_completed(futures):
            run = fut.result()
            report["runs"].append(run)
            _write(args.json, report)
            log.info("%s seed %d: val loss %.4f, BLEU %.2f (%.0f s)", run["row"], run["seed"], run["val_loss"],
                     run["val_bleu"], run["train_seconds"])
    have = {(r["row"], r["seed"]) for r in report["runs"]}
    if all((row, seed) in have for row in variants(base) for seed in args.seeds):
        report["finished_utc"] = utc_now()  # every row from every seed: a complete table
    _write(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
