"""A training run judged on val only, as ``workbench pretrained build`` judges it, without scoring test.

    python bench/archive/val_choice.py RUN_DIR [--average 5 10 15 20] [--threads 1] [--json bench/results/NAME.json]

For comparing recipes (dropout, vocabulary size, epochs) before one of them is built and shipped: the issue's
rule is to choose on val and to decode test once, for the model that ships. The candidates are the same as the
build's (the last checkpoint and the average of the last k step snapshots for each k), each rounded to float16 as
shipped and decoded greedily on the whole of Multi30k val; the best one then gets the beam-4 length-penalty
sweep on val (``workbench.tools.release.choose_weights_on_val`` and ``choose_length_penalty``). Writes one JSON
document (the provenance record of :mod:`workbench.tools.provenance`, the run summary, every score) and prints it.
Test is never read.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository (this file is in bench/archive/)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--average", type=int, nargs="+", default=[5, 10, 15, 20], metavar="K",
                        help="candidate averages of the last K step snapshots (the build's default windows)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--data-dir", default=None, help="Multi30k folder (default: WORKBENCH_MULTI30K)")
    parser.add_argument("--json", type=Path, default=None, help="where to write the report")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")  # the candidates' val scores as they come

    import torch

    from workbench.tools.provenance import provenance
    from workbench.tools.release import choose_length_penalty, choose_weights_on_val, half_roundtrip
    from workbench.translation.checkpoint import load_model
    from workbench.translation.data import load_multi30k

    if args.threads:
        torch.set_num_threads(args.threads)
    record = provenance([Path(sys.executable).name, *sys.argv], cwd=ROOT)  # read before the long run
    started = time.perf_counter()
    run = args.run_dir
    if not (run / "last.pt").exists():
        parser.error(f"{run} has no last.pt: pass the folder a `workbench train --out` run wrote")
    _, _, state0 = load_model(run / "last.pt")
    extra = state0.get("extra") or {}
    val = load_multi30k("val", extra.get("src_lang", "de"), extra.get("tgt_lang", "en"), data_dir=args.data_dir)
    candidates, greedy, chosen = choose_weights_on_val(run, val, args.average)
    model, tok, _ = load_model(candidates[chosen])
    alpha, by_alpha = choose_length_penalty(half_roundtrip(model), tok, val)
    summary = json.loads((run / "summary.json").read_text()) if (run / "summary.json").exists() else {}
    history = json.loads((run / "history.json").read_text()) if (run / "history.json").exists() else {}
    report = {
        **record,
        "what": "a training run judged on Multi30k val only (the choices of `workbench pretrained build`; test unread)",
        "run": str(run), "steps": state0.get("step"), "epochs": summary.get("epochs_run"),
        "stopped_reason": summary.get("stopped_reason"),
        "dropout": (state0.get("model_cfg") or {}).get("dropout", summary.get("dropout")),
        "train_config": state0.get("train_cfg"),
        "val_loss_per_epoch": history.get("val_loss"), "val_bleu_per_epoch": history.get("val_bleu"),
        "tokens_per_s_per_epoch": history.get("tokens_per_s"),
        "val_greedy_bleu": greedy, "chosen": chosen, "val_beam4_bleu_by_alpha": by_alpha, "alpha": alpha,
        "val_beam4_bleu": by_alpha[f"{alpha:g}"],
        "seconds": round(time.perf_counter() - started, 1),
    }
    text = json.dumps(report, indent=1, default=float)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
