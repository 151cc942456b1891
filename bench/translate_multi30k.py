"""Benchmark: train a translator on Multi30k with the README's recipe under a wall-clock budget, then report BLEU.

    python bench/translate_multi30k.py --out runs/bench-small [--json bench/results/NAME.json]

The defaults are the README's "benchmarked CPU recipe", and training runs through the same command:

    workbench train --preset small --src de --tgt en --out runs/small --max-minutes 41 \
        --max-tokens 3072 --warmup 800 --lr-factor 1.0 --checkpoint-every 150

(no epoch limit: the time budget ends the run). The run is a :class:`workbench.config.RunConfig` (:func:`run_config`),
and its command line is made from it (:func:`workbench.cli.run_argv`).

Readout, validation first, test once: the last checkpoint and the average of the last 5 are both decoded on the
validation split (beam 4); the one with the higher validation sacreBLEU is then decoded once on
test_2016_flickr (beam 4), and that is the headline. ``--full`` adds greedy decoding, on validation only.
Prints one JSON document (also written to ``OUT/bench_report.json`` and to ``--json``) with the machine, torch
version, commit and command line.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import logging
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

HEADLINE_SPLIT = "test_2016_flickr"
BEAM = 4


def build_parser() -> argparse.ArgumentParser:
    from workbench.model.config import PRESETS, RunConfig

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default=RunConfig.arch, choices=RunConfig.choices()["arch"])
    ap.add_argument("--preset", default="small", choices=list(PRESETS))
    ap.add_argument("--minutes", type=float, default=41.0, help="training budget (evaluation comes on top)")
    ap.add_argument("--out", default="runs/bench-small")
    ap.add_argument("--src", default=RunConfig.src)
    ap.add_argument("--tgt", default=RunConfig.tgt)
    ap.add_argument("--vocab-size", type=int, default=RunConfig.vocab_size)
    ap.add_argument("--max-tokens", type=int, default=3072)
    ap.add_argument("--lr-factor", type=float, default=1.0)
    ap.add_argument("--warmup", type=int, default=800)
    ap.add_argument("--checkpoint-every", type=int, default=150)
    ap.add_argument("--epochs", type=int, default=None, help="an epoch limit (default: none, the time budget ends the run)")
    ap.add_argument("--skip-train", action="store_true", help="only evaluate the run already in --out")
    ap.add_argument("--full", action="store_true", help="also decode greedily (validation only)")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--json", default=None, help="also write the report here (e.g. bench/results/NAME.json)")
    return ap


def run_config(args: argparse.Namespace) -> Any:
    """The training run this benchmark makes (a :class:`workbench.config.RunConfig`)."""
    from workbench.model.config import RunConfig

    return RunConfig.from_flat(arch=args.arch, preset=args.preset, src=args.src, tgt=args.tgt, data_dir=args.data_dir,
                               vocab_size=args.vocab_size, max_minutes=args.minutes, epochs=args.epochs,
                               max_tokens=args.max_tokens, warmup_steps=args.warmup, lr_factor=args.lr_factor,
                               checkpoint_every=args.checkpoint_every)


def train_argv(args: argparse.Namespace) -> list[str]:
    """The ``workbench train`` command line this benchmark runs: its :func:`run_config`, into ``--out``."""
    from workbench.tools.cli import run_argv

    return ["train", "--out", str(args.out), *run_argv(run_config(args))]


def readout(out: Path, data_dir: str | None = None, full: bool = False,
            evaluate: Callable[..., dict[str, Any]] | None = None,
            average: Callable[..., Path] | None = None) -> dict[str, Any]:
    """Choose the weights (last vs last-5 average) on validation, then decode the test split once with them."""
    if evaluate is None:
        from workbench.translation.pipeline import evaluate_checkpoint as evaluate
    if average is None:
        from workbench.translation.checkpoint import average_last as average
    candidates = {"averaged": Path(average(out, last=5)), "last": out / "last.pt"}
    val = []
    for name, ckpt in candidates.items():
        for beam in (BEAM, 1) if full else (BEAM,):
            res = evaluate(ckpt, split="val", beam=beam, data_dir=data_dir, device="auto")
            val.append({**res, "weights": name})
    scored = [r for r in val if r["beam"] == BEAM]
    chosen = max(scored, key=lambda r: r["bleu"])["weights"]  # a tie keeps the first: the averaged weights
    test = evaluate(candidates[chosen], split=HEADLINE_SPLIT, beam=BEAM, data_dir=data_dir, device="auto")
    return {"val": val, "chosen_on_val": chosen, "test": {**test, "weights": chosen}}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s")
    from workbench.tools.benchmark import git_state
    from workbench.tools.cli import main as workbench_main

    out = Path(args.out)
    t0 = time.perf_counter()
    report: dict[str, Any] = {
        "machine": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "device": "cuda" if torch.cuda.is_available() else "cpu",
        **git_state(),
        "command": list(sys.argv) if argv is None else ["bench/translate_multi30k.py", *argv],
        "started_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "args": vars(args),
    }
    if not args.skip_train:
        report["train_command"] = ["workbench", *train_argv(args)]
        with contextlib.redirect_stdout(sys.stderr):  # the train summary goes to the log; this report to stdout
            code = workbench_main(train_argv(args))
        if code != 0:
            return code
        report["train"] = json.loads((out / "summary.json").read_text())
        history = json.loads((out / "history.json").read_text())
        report["history"] = {k: history[k] for k in ("train_loss", "val_loss", "val_bleu", "tokens_per_s", "elapsed_s")}
    report.update(readout(out, args.data_dir, args.full))
    report["headline"] = {k: report["test"][k] for k in ("weights", "split", "beam", "bleu", "signature", "chrf")}
    report["wall_minutes_total"] = round((time.perf_counter() - t0) / 60, 1)
    text = json.dumps(report, indent=2)
    (out / "bench_report.json").write_text(text)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
