"""Benchmark: train a translator on Multi30k with a named recipe under its wall-clock budget, then report BLEU.

    python bench/translate_multi30k.py --out runs/bench-small [--json bench/results/NAME.json]

The run is the recipe ``cpu-small`` of :data:`workbench.translation.run.RECIPES` (the shipped small-de-en's: the
command of the book's command-line page, workbench/book_src/command-line.md), trained through the same command::

    workbench train --recipe cpu-small --out runs/bench-small

``--recipe cpu-gru`` trains the GRU baseline's; ``--minutes M`` changes only the budget and ``--precision
fp32|bf16`` only the number format of training (the readout decodes every run alike, float16-rounded weights in
fp32, as shipped).

Readout, validation first, test once, by the release's rules (:mod:`workbench.tools.release`): the weights are
chosen on val (:func:`~workbench.tools.release.choose_weights_on_val`: the last checkpoint or the average of the
last k snapshots, float16 as shipped, greedy), then beam 4's length penalty on val; test_2016_flickr is decoded
once with both choices, and its beam-4 score is the headline
(:func:`~workbench.tools.release.score_val_and_test`). Prints one JSON document (also written to
``OUT/bench_report.json`` and to ``--json``) with the provenance record (:mod:`workbench.tools.provenance`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

HEADLINE_SPLIT = "test_2016_flickr"
BEAM = 4


def build_parser() -> argparse.ArgumentParser:
    from workbench.runtime import PRECISIONS
    from workbench.translation.run import RECIPES

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", default="cpu-small", choices=list(RECIPES), help="the named run to train")
    ap.add_argument("--minutes", type=float, default=None,
                    help="training budget instead of the recipe's (evaluation comes on top)")
    ap.add_argument("--precision", default=None, choices=list(PRECISIONS),
                    help="training's number format instead of the recipe's (auto)")
    ap.add_argument("--out", default="runs/bench-small")
    ap.add_argument("--average", type=int, nargs="+", default=[5, 10, 15, 20], metavar="K",
                    help="candidate averages of the last K snapshots (the shipped models' build windows)")
    ap.add_argument("--skip-train", action="store_true", help="only evaluate the run already in --out")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--json", default=None, help="also write the report here (e.g. bench/results/NAME.json)")
    return ap


def run_config(args: argparse.Namespace) -> Any:
    """The training run this benchmark makes: the recipe, with ``--minutes`` and ``--data-dir`` if given."""
    from workbench.translation.run import recipe

    overrides: dict[str, Any] = {"max_minutes": args.minutes} if args.minutes is not None else {}
    if args.precision is not None:
        overrides["precision"] = args.precision
    return recipe(args.recipe, data_dir=args.data_dir, **overrides)


def train_argv(args: argparse.Namespace) -> list[str]:
    """The ``workbench train`` command line this benchmark runs: the recipe's name and what ``--minutes`` and
    ``--data-dir`` change."""
    argv = ["train", "--out", str(args.out), "--recipe", args.recipe]
    if args.minutes is not None:
        argv += ["--max-minutes", str(args.minutes)]
    if args.precision is not None:
        argv += ["--precision", args.precision]
    if args.data_dir:
        argv += ["--data-dir", str(args.data_dir)]
    return argv


def readout(out: Path, src: str = "de", tgt: str = "en", data_dir: str | None = None,
            average: tuple[int, ...] = (5,)) -> dict[str, Any]:
    """The run judged as the release judges it: weights chosen on val, beam 4's length penalty chosen on val, then
    test decoded once with both (:func:`workbench.tools.release.choose_weights_on_val`, ``score_val_and_test``)."""
    from workbench.tools import release
    from workbench.translation import checkpoint, data

    val = data.load_multi30k("val", src, tgt, data_dir=data_dir)
    test = data.load_multi30k(HEADLINE_SPLIT, src, tgt, data_dir=data_dir)
    candidates, greedy, chosen = release.choose_weights_on_val(out, val, average)
    model, tokenizer, _ = checkpoint.load_model(candidates[chosen])
    scores, decoding = release.score_val_and_test(release.half_roundtrip(model), tokenizer, val, test)
    best = scores[HEADLINE_SPLIT]["beam4"]
    return {"val_greedy_bleu": greedy, "chosen_on_val": chosen, "decoding": decoding, "scores": scores,
            "headline": {"weights": chosen, "split": HEADLINE_SPLIT, "beam": BEAM, "alpha": decoding["alpha"],
                         **{k: best[k] for k in ("bleu", "signature", "chrf")}}}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s")
    from workbench.tools.cli.main import main as workbench_main
    from workbench.tools.provenance import provenance

    out = Path(args.out)
    t0 = time.perf_counter()
    command = None if argv is None else ["bench/translate_multi30k.py", *argv]
    report: dict[str, Any] = {**provenance(command), "args": vars(args)}
    if not args.skip_train:
        report["train_command"] = ["workbench", *train_argv(args)]
        with contextlib.redirect_stdout(sys.stderr):  # the train summary goes to the log; this report to stdout
            code = workbench_main(train_argv(args))
        if code != 0:
            return code
        report["train"] = json.loads((out / "summary.json").read_text())
        history = json.loads((out / "history.json").read_text())
        report["history"] = {k: history[k] for k in ("train_loss", "val_loss", "val_bleu", "tokens_per_s", "elapsed_s")}
    run = run_config(args)
    report["run_config"] = run.to_flat()
    report.update(readout(out, run.src, run.tgt, args.data_dir, tuple(args.average)))
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
