"""Speed and memory figures on this machine: ``workbench bench`` prints a table and writes JSON (never a timed test).

    workbench bench [--quick] [--suite attention --suite train_step ...] [--json bench.json] [--device auto]

The JSON carries what a published figure needs: the provenance record of :mod:`workbench.tools.provenance`
(machine, CPU and its matmul flags, threads, torch version, device, the git commit and whether the tree had
uncommitted or untracked changes, the command line and the time). Every figure on the book's Benchmarks page comes
from such a file committed under ``bench/results/``.

Rivals are raced, not timed one after the other: each round runs every variant once, and the order alternates
from round to round (A B, B A, A B, ...) so drift of the machine and the cost of going first hit both alike. Each
figure is the median over at least :data:`MIN_ROUNDS` rounds; every round's times are in the JSON.

Suites:

* ``attention``  — self-attention forward+backward across sequence lengths: ours fused (SDPA), ours explicit
  (weights materialised, the path that returns them) and ``nn.MultiheadAttention``; peak memory of each.
* ``train_step`` — one training step (forward, label-smoothed loss, backward, Adam) of each preset vs
  ``nn.Transformer`` of the same sizes, parameter count and dropout placement
  (:class:`~workbench.tools.bench.rivals.NNTransformer`), as two ratios ours / nn. *As trained*: each side in its usual
  form: ours projects only the real target rows, fused with the loss (:func:`workbench.translation.objective.step_loss`),
  and draws its dropout masks more cheaply on the CPU (:mod:`workbench.translation.kernels`); the reference runs
  ``nn.Dropout`` and projects every position, ignoring padding in the loss. *Model only*
  (:data:`~workbench.tools.bench.suites.MODEL_ONLY`): our model with ``nn.Dropout`` and the reference's loss, so the
  two differ by the model code alone. *User loop* (:data:`~workbench.tools.bench.suites.USER_LOOP`):
  ``wb.use_kernels(wb.build_model(...))`` with the reference's loss, what a loop of one's own gets from that call.
  Analytic TFLOP/s and MFU (where the device's peak is known); peak memory of each.
* ``capture``    — what the hook points cost when nobody listens: our model vs the same model with its hook points
  removed (:func:`~workbench.tools.bench.rivals.without_hook_points`), and the price of capturing every pattern.
* ``decoding``   — greedy and beam-4 decoding with vs without the key/value cache, exactly 40 output tokens
  (the end-of-sentence token is made unreachable), sentences/s.
* ``e2e``        — end-to-end training tokens/s on real Multi30k batches through :func:`workbench.translation.train.fit`, and the
  padding fraction of those token-budget batches.
* ``sdpa``       — which scaled-dot-product kernels actually run in our model's forward and in the reference's
  (from the profiler).

Peak memory (:func:`workbench.lessons.measure.peak_memory`): on CUDA ``torch.cuda.max_memory_allocated``; on Linux CPUs
the growth of the resident set's high-water mark (reset through ``/proc/self/clear_refs``) over the resident set
before the call. Times come from :func:`workbench.lessons.measure.call_seconds`.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from typing import Any

from workbench.model.config import PRESETS
from workbench.runtime import cpu_bf16_units, resolve_device
from workbench.tools.bench.probes import suite_capture, suite_decoding, suite_e2e, suite_sdpa
from workbench.tools.bench.suites import (
    MODEL_ONLY,
    SUITES,
    USER_LOOP,
    measured_peaks,
    suite_attention,
    suite_precision,
    suite_train_step,
)
from workbench.tools.provenance import contended, provenance, utc_now, write_report
from workbench.translation.flops import peak_flops

log = logging.getLogger(__name__)

RUNNERS: dict[str, Any] = {  # suite name -> (device, quick) -> its report
    "attention": suite_attention,
    "train_step": suite_train_step,
    "capture": suite_capture,
    "decoding": suite_decoding,
    "e2e": suite_e2e,
    "sdpa": suite_sdpa,
    "precision": suite_precision,
}


def run(suites: list[str] | None = None, quick: bool = False, device: str = "auto",
        command: list[str] | None = None, presets: list[str] | None = None) -> dict[str, Any]:
    """Run the chosen suites (all by default) and return the report (``command`` defaults to ``sys.argv``).
    ``presets``: the model sizes the train_step suite races (default: the device's usual set)."""
    names = list(suites or SUITES)
    unknown = [s for s in names if s not in RUNNERS]
    if unknown:
        raise ValueError(f"unknown benchmark suite(s) {unknown}: choose from {list(SUITES)}")
    dev = resolve_device(device)
    report: dict[str, Any] = {
        **provenance(command, device=dev),
        "quick": quick,
        "suites": names,
        "peak_tflops": None if peak_flops(dev) is None else peak_flops(dev) / 1e12,
        "bf16_units": cpu_bf16_units() if dev.type == "cpu" else None,
        "load_average_start": _load_average(),  # a shared machine says so: runnable processes, 1/5/15 minutes
    }
    if any(n in ("train_step", "precision") for n in names):  # measured at the start, before the suites
        report["matmul_peak_tflops"] = {p: None if v is None else v / 1e12 for p, v in measured_peaks(dev).items()}
    for name in names:
        t0 = time.perf_counter()
        log.info("benchmark suite %s ...", name)
        report[name] = RUNNERS[name](dev, quick, presets) if name == "train_step" else RUNNERS[name](dev, quick)
        report[name]["suite_seconds"] = round(time.perf_counter() - t0, 1)
    report["load_average_end"] = _load_average()
    # other work shared the machine: its figures are published as contended
    report["contended"] = contended(report["load_average_start"], report["load_average_end"], report["threads"],
                                    report["cpu_count"])
    report["finished_utc"] = utc_now()
    return report


def _load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):  # not on this platform
        return None


# -- printing ------------------------------------------------------------------------------------------------------
def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


# (header, width) of the columns of the two tables, and the rivals in the order of their columns
ATTENTION_RIVALS = ("ours_fused", "ours_explicit", "nn.MultiheadAttention")
ATTENTION_COLUMNS = (("n", 6), ("fused", 9), ("explicit", 9), ("nn.MHA", 9), ("fused/nn", 9), ("mem fused", 10),
                     ("mem expl", 9), ("mem nn", 8))
TRAIN_STEP_RIVALS = ("ours", "nn.Transformer")
TRAIN_STEP_VARIANTS = ("ours", "nn.Transformer", "ours compiled", "nn.Transformer compiled", MODEL_ONLY, USER_LOOP)
TRAIN_STEP_COLUMNS = (("preset", 7), ("prec", 5), ("ours s", 8), ("nn s", 8), ("ours cmp", 9), ("nn cmp", 8), ("model s", 8),
                      ("user s", 8), ("as trained", 10), ("model only", 10), ("user loop", 9),
                      ("GFLOP/s", 8), ("MFU", 6), ("mem ours", 9), ("mem nn", 8))


def _table(columns: tuple[tuple[str, int], ...], rows: list[list[Any]]) -> list[str]:
    """A header line and one line per row, each cell right-aligned in its column's width."""
    return [" ".join(f"{cell!s:>{width}}" for cell, (_, width) in zip(row, columns, strict=True))
            for row in [[name for name, _ in columns], *rows]]


def _measured(report: dict[str, Any], key: str, label: str, lines: list[str]) -> dict[str, Any] | None:
    """The suite ``key``'s results, or None when it did not run or was skipped (then a line saying why joins ``lines``)."""
    result = report.get(key)
    if result is not None and "skipped" in result:
        lines += ["", f"{label}: skipped ({result['skipped']})"]
        return None
    return result


def format_table(report: dict[str, Any]) -> str:
    """A plain-text summary of a report, one block per suite."""
    commit = report.get("commit")
    lines = [f"{report['device']} ({report.get('cpu_model') or report['machine']}, {report['threads']} threads), "
             f"torch {report['torch']}, commit {commit[:10] if commit else 'unknown'}"
             f"{' (uncommitted changes)' if report.get('dirty') else ''}"]
    if report.get("load_average_start") and report.get("cpu_count"):
        load = report["load_average_start"][0]
        if load > report["cpu_count"]:
            lines.append(f"a busy machine: load average {load:.1f} on {report['cpu_count']} CPUs at the start")
    if report.get("matmul_peak_tflops"):
        peaks = report["matmul_peak_tflops"]
        lines.append("measured matrix-product peaks: " + ", ".join(
            f"{p} {1e3 * v:.0f} GFLOP/s" for p, v in peaks.items() if v is not None)
            + f" (bf16 units: {report.get('bf16_units') or 'none'})")
    if "attention" in report:
        a = report["attention"]
        lines += ["", f"attention fwd+bwd, d_model={a['d_model']}, h={a['n_heads']}, batch={a['batch']} (ms; peak MiB)"]
        lines += _table(ATTENTION_COLUMNS, [
            [r["n"], *(f"{r['ms'][k]:.2f}" for k in ATTENTION_RIVALS), f"{r['fused_over_nn']:.2f}",
             *(_fmt(r["peak_mib"][k]) for k in ATTENTION_RIVALS)] for r in a["rows"]])
    if "train_step" in report:
        t = report["train_step"]
        lines += ["", f"training step vs nn.Transformer (both in {' and '.join(t.get('precisions', ['fp32']))}, the same format each row; "
                      f"same dropout placement; MFU against the {t.get('peak', 'data-sheet')} peak; median of "
                      f"{min(len(r['rounds']) for r in t['rows'])}+ alternating rounds). As trained: ours with its "
                      "cheaper CPU dropout draws and fused loss over real rows against the stock loss, each side's "
                      "fastest of eager and torch.compile'd; model only: ours with nn.Dropout and the same stock loss, "
                      "eager; user loop: wb.use_kernels(wb.build_model(...)) and the same stock loss, eager"]
        lines += _table(TRAIN_STEP_COLUMNS, [
            [r["preset"], r.get("precision", "fp32"), *(_fmt(r["step_s"].get(k)) for k in TRAIN_STEP_VARIANTS), f"{r['ratio_ours_over_nn']:.2f}",
             _fmt(r.get("ratio_model_only")), _fmt(r.get("ratio_user_loop")),
             f"{1e3 * r['ours_tflops_per_s']:.1f}", "-" if r["ours_mfu"] is None else f"{r['ours_mfu']:.1%}",
             *(_fmt(r["peak_mib"][k]) for k in TRAIN_STEP_RIVALS)] for r in t["rows"]])
    if "capture" in report:
        c = report["capture"]
        lines += ["", f"capture ({c['preset']}): hook points with no hooks vs none, forward "
                      f"{c['inactive_overhead_pct']:+.2f} %, training step {c['inactive_train_overhead_pct']:+.2f} %; "
                      f"capturing all {c['active_overhead_pct']:+.1f} %"]
    if "decoding" in report:
        d = report["decoding"]
        lines += ["", f"decoding ({d['preset']}, {d['sentences']} sentences x {d['output_tokens']} tokens), sentences/s"]
        for name in ("greedy", "beam4"):
            lines.append(f"  {name:<7} cached {d[f'{name}_cached_sent_per_s']:.1f}  uncached "
                         f"{d[f'{name}_uncached_sent_per_s']:.1f}  speed-up {d[f'{name}_cache_speedup']:.1f}x")
    if (e := _measured(report, "e2e", "end-to-end", lines)) is not None:
        mfu = "" if e["mfu"] is None else f", MFU {e['mfu']:.1%}"
        lines += ["", f"end-to-end fit on Multi30k ({e['preset']}, {e['pairs']} pairs, {e.get('precision', 'fp32')}): "
                      f"{e['tokens_per_s']:.0f} tok/s, "
                      f"{1e3 * e['model_tflops_per_s']:.1f} GFLOP/s{mfu}; padding: source "
                      f"{e['src_padding_fraction']:.1%}, target {e['tgt_padding_fraction']:.1%}"]
        race = e.get("precision_race", {})
        if "bf16_speedup" in race:
            m = race["median_tokens_per_s"]
            lines.append(f"  the {race['recipe']} recipe, fp32 vs bf16 ({len(race['order'])} passes alternating): "
                         f"{m['fp32']:.0f} vs {m['bf16']:.0f} tok/s, bf16 speed-up {race['bf16_speedup']:.2f}x")
    if (pr := _measured(report, "precision", "bf16 vs fp32", lines)) is not None:
        lines += ["", "bf16 vs fp32, our training step (raced in one run; MFU against each format's measured peak)"]
        for r in pr["train_step"]:
            lines.append(f"  {r['preset']:<6} fp32 {r['step_s']['fp32']:.3f} s  bf16 {r['step_s']['bf16']:.3f} s  "
                         f"speed-up {r['bf16_speedup']:.2f}x  MFU fp32 {r['mfu']['fp32']:.1%} bf16 {r['mfu']['bf16']:.1%}")
        d = pr["beam4"]
        lines.append(f"  beam-4 decoding ({d['preset']}): fp32 {d['sent_per_s']['fp32']:.1f} sent/s, bf16 "
                     f"{d['sent_per_s']['bf16']:.1f} sent/s, speed-up {d['bf16_speedup']:.2f}x")
        lines.append(f"  --precision auto: {pr['auto']['precision']} ({pr['auto']['reason']})")
    if "sdpa" in report:
        lines += ["", "SDPA kernels (and dropout calls) dispatched:"] + [
            f"  {mode}: " + ", ".join(f"{k} x{v}" for k, v in kernels.items())
            for mode, kernels in report["sdpa"].items() if isinstance(kernels, dict)]
    return "\n".join(lines)


def main(suites: list[str] | None = None, quick: bool = False, out_json: str | None = "bench.json",
         device: str = "auto", as_json: bool = False, presets: list[str] | None = None) -> int:
    """Entry point of ``workbench bench``: prints the table (or the JSON), writes the JSON to ``out_json``."""
    report = run(suites, quick=quick, device=device, presets=presets)
    text = write_report(report, out_json or None)  # the one report writer (workbench.tools.provenance)
    print(text if as_json else format_table(report))
    if out_json:
        log.info("wrote %s", out_json)
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description="speed and memory benchmarks: print a table and write JSON")
    add_arguments(ap)
    return ap


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The benchmark's options (shared by ``workbench bench`` and ``bench/core.py``)."""
    ap.add_argument("--quick", action="store_true", help="tiny sizes and few repeats (a smoke run)")
    ap.add_argument("--suite", action="append", choices=SUITES, help="run only this suite (repeatable; default all)")
    ap.add_argument("--json", default="bench.json",
                    help="where to write the JSON report ('' for nowhere); figures for the README go to bench/results/")
    ap.add_argument("--print-json", action="store_true", help="print the JSON report instead of the table")
    ap.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    ap.add_argument("--preset", action="append", choices=list(PRESETS), dest="presets",
                    help="train_step: race only this model size (repeatable; default tiny, small, base on a CPU)")


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    a = build_parser().parse_args()
    sys.exit(main(a.suite, a.quick, a.json or None, a.device, a.print_json, a.presets))
