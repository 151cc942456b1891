"""The paper's Table 3 at small scale: the variants, the paper's signs, and seeded results judged against their spread.

Notebook 12 trains every variant briefly, live; ``bench/table3.py`` trains the same variants for a budget at which the
base's validation loss has stopped falling, with several seeds per row, and commits the results under
``bench/results/table3/``. This module holds what both share: which variants there are (one change at a time around
a base :class:`~workbench.model.config.ModelConfig`), what the paper found for each, and how a seeded table is judged.

A seed fixes the initial weights, the batch order and the dropout draws, so runs of different rows with the same seed
are paired: the rows that change only the loss or dropout start from the base's very weights and see the same batches.
A trend is judged on the paired differences (variant minus base, seed by seed): its mean against
:data:`SPREAD_FACTOR` standard errors of that mean (:func:`judge_seeded`).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from workbench.errors import ConfigError
from workbench.lessons.verdicts import verdict
from workbench.model.config import ModelConfig

SPREAD_FACTOR = 2.0  # a trend counts when its mean paired difference exceeds this many standard errors of that mean
BASE = "base"
YARDSTICK = "base, other initial weights"  # notebook 12's single-seed noise yardstick: the base from seed + 1

# what the paper's Table 3 found, as the direction of the variant's validation log-perplexity against the base's
# (+1 higher, -1 lower, 0 the same); each claim names the variant (a key of :func:`variants`) it is about
PAPER_PPL_CLAIMS: dict[str, tuple[str, int]] = {
    "(A) one head is worse": ("(A) h=1, d_k=D", +1),
    "(B) smaller keys are worse": ("(B) d_k=D/8 (smaller keys)", +1),
    "(C) fewer layers are worse": ("(C) 1 layer", +1),
    "(D) no dropout is worse": ("(D) no dropout", +1),
    "(D) label smoothing raises perplexity": ("(D) no label smoothing", -1),
    "(E) learned positions are the same": ("(E) learned positions", 0),
}
# and in BLEU for the two regularisers: the paper's Table 3 has both raising BLEU (no dropout 24.6, no label smoothing
# 25.3, base 25.8), although label smoothing costs perplexity
PAPER_BLEU_CLAIMS: dict[str, tuple[str, int]] = {
    "(D) no dropout lowers BLEU": ("(D) no dropout", -1),
    "(D) no label smoothing lowers BLEU": ("(D) no label smoothing", -1),
}


def variants(base: ModelConfig) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Table 3's rows this series covers, around ``base``: ``{name: (ModelConfig overrides, TrainConfig overrides)}``.

    (A) varies the number of heads at constant computation (``d_k = d_model / h``), (B) shrinks the keys only (the
    values keep their size, as in the paper's row), (C) halves nothing but the depth (one layer each side), (D) removes
    dropout or label smoothing, (E) learns the positions instead of the sinusoids."""
    d_model = base.d_model
    if d_model % 8 or base.head_dim < d_model // 8:
        raise ConfigError(f"d_model={d_model} with d_head={base.head_dim}: Table 3's (A) and (B) rows need d_model "
                          "divisible by 8 and heads at least d_model/8 wide; use d_model = 64, 128, 256, ...")
    return {
        BASE: ({}, {}),
        "(A) h=1, d_k=D": ({"n_heads": 1}, {}),
        "(A) h=8, d_k=D/8": ({"n_heads": 8}, {}),
        "(B) d_k=D/8 (smaller keys)": ({"d_head": d_model // 8, "d_v": base.head_dim}, {}),
        "(C) 1 layer": ({"n_enc_layers": 1, "n_dec_layers": 1}, {}),
        "(D) no dropout": ({"dropout": 0.0}, {}),
        "(D) no label smoothing": ({}, {"label_smoothing": 0.0}),
        "(E) learned positions": ({"positional": "learned"}, {}),
    }


def _mean_sd(values: Sequence[float]) -> tuple[float, float]:
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else float("nan"))


def paired_differences(runs: Sequence[Mapping[str, Any]], variant: str, key: str, base: str = BASE) -> list[float]:
    """``variant - base`` of figure ``key``, one per seed both rows were run with (sorted by seed)."""
    by = {(r["row"], r["seed"]): r[key] for r in runs}
    seeds = sorted(s for (row, s) in by if row == variant and (base, s) in by)
    return [by[(variant, s)] - by[(base, s)] for s in seeds]


def judge_seeded(runs: Sequence[Mapping[str, Any]], claims: Mapping[str, tuple[str, int]], key: str,
                 base: str = BASE, factor: float = SPREAD_FACTOR) -> dict[str, dict[str, Any]]:
    """Every claim's verdict on figure ``key`` from seeded runs (``{"row", "seed", key}`` each).

    The trend is the mean of the paired differences (variant minus base, seed by seed); the margin is ``factor``
    standard errors of that mean (their standard deviation over the square root of the number of seeds). The verdict
    is :func:`~workbench.lessons.verdicts.verdict`'s with that margin; ``seeds_agreeing`` counts the seeds whose own
    difference goes the claim's way (for a "no difference" claim: lies within the margin)."""
    judged = {}
    for claim, (variant, direction) in claims.items():
        diffs = paired_differences(runs, variant, key, base)
        if len(diffs) < 2:
            raise ConfigError(f"{claim!r} needs {variant!r} and {base!r} run with at least 2 common seeds to measure "
                              f"a spread; found {len(diffs)}: run more seeds (bench/table3.py --seeds 0 1 2)")
        mean, sd = _mean_sd(diffs)
        margin = factor * sd / math.sqrt(len(diffs))
        agreeing = sum((abs(d) <= margin) if direction == 0 else (direction * d > 0) for d in diffs)
        judged[claim] = {"variant": variant, "delta": mean, "sd": sd, "margin": margin, "seeds": len(diffs),
                         "seeds_agreeing": agreeing, "verdict": verdict(mean, direction, margin)}
    return judged


def row_summary(runs: Sequence[Mapping[str, Any]], keys: Sequence[str] = ("val_loss", "val_bleu"),
                order: Sequence[str] = ()) -> list[dict[str, Any]]:
    """One line per row: seeds, and the mean and standard deviation of each key. Rows named in ``order`` come first,
    in that order (e.g. ``variants(base)``), the others after them in the order they first appear."""
    rows: dict[str, list[Mapping[str, Any]]] = {name: [] for name in order}
    for r in runs:
        rows.setdefault(r["row"], []).append(r)
    rows = {name: rs for name, rs in rows.items() if rs}
    out = []
    for name, rs in rows.items():
        line: dict[str, Any] = {"row": name, "seeds": len(rs), "params": rs[0].get("params")}
        for k in keys:
            line[k], line[k + "_sd"] = _mean_sd([r[k] for r in rs])
        out.append(line)
    return out


def load_results(path: str | Path) -> dict[str, Any]:
    """A ``bench/table3.py`` result file, checked for what the judging needs."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"no Table 3 results at {path}: run `python bench/table3.py --json {path}` to make them")
    data = json.loads(path.read_text())
    for k in ("runs", "budget", "base"):
        if k not in data:
            raise ConfigError(f"{path} lacks {k!r}: it is not a bench/table3.py result file")
    return data


def latest_results(folder: str | Path) -> Path | None:
    """The newest complete result file in ``folder`` (by its ``finished_utc``), None if there is none."""
    best: tuple[str, Path] | None = None
    for p in sorted(Path(folder).glob("table3-*.json")):
        try:
            done = json.loads(p.read_text()).get("finished_utc")
        except (OSError, json.JSONDecodeError):
            continue
        if done and (best is None or done > best[0]):
            best = (done, p)
    return best[1] if best else None
