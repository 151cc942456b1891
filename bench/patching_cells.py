"""Where a patching lesson's time goes: the notebook executed once, each code cell's seconds.

    python bench/patching_cells.py [--smoke] [--json FILE] [--notebook notebooks/14_activation_patching.ipynb]

Executes ``notebooks/15_patching_analysis.ipynb``, the slower of the two patching lessons (or ``--notebook``: lesson
14, or an older commit's copy, with the package on ``PYTHONPATH``) with papermill in a temporary folder (the SMOKE
parameters with
``--smoke``), and prints the seconds papermill recorded for every code cell (its first line names it), the
notebook's own timings from its ``metrics.json`` (pairs, sweep, path patching, whole run), and the machine's load
average before and after. ``--json`` also writes them with the provenance record. Wall-clock times: on a shared
machine they move with the load, which is why the load is recorded beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import papermill

from workbench.tools.provenance import provenance, write_report

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "15_patching_analysis.ipynb"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="the SMOKE parameters (what CI runs)")
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    ap.add_argument("--notebook", default=str(NOTEBOOK), help="another copy of the lesson (e.g. an older commit's)")
    ap.add_argument("--label", default="", help="what this run is, recorded in the file (e.g. 'baseline: 2ae6bd5')")
    args = ap.parse_args()
    record = provenance(["python", "bench/patching_cells.py", *sys.argv[1:]])
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="patching-cells-") as tmp:
        out = Path(tmp) / Path(args.notebook).name
        t0 = time.perf_counter()
        papermill.execute_notebook(args.notebook, str(out), parameters={"SMOKE": args.smoke}, cwd=tmp,
                                   progress_bar=False)
        wall = time.perf_counter() - t0
        nb = nbformat.read(out, as_version=4)
        metrics = json.loads((Path(tmp) / "metrics.json").read_text())
    cells = [{"cell": i, "first_line": c.source.splitlines()[0] if c.source else "",
              "seconds": round(float(c.metadata.get("papermill", {}).get("duration") or 0.0), 2)}
             for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    import workbench

    report = {**record, "label": args.label, "notebook": args.notebook, "package": workbench.__file__,
              "smoke": args.smoke, "wall_seconds": round(wall, 1), "load_before": load_before,
              "load_after": os.getloadavg(),
              "notebook_seconds": {k: metrics.get(k) for k in ("pairs_seconds", "sweep_seconds", "path_seconds",
                                                              "seconds")},
              "pairs_by_kind": metrics.get("pairs_by_kind"), "n_heldout_pairs": metrics.get("n_heldout_pairs"),
              "findings": metrics.get("findings"), "head_findings": metrics.get("head_findings"),
              "number": metrics.get("number"),
              "cells": sorted(cells, key=lambda c: -c["seconds"])}
    for c in report["cells"][:8]:
        print(f"{c['seconds']:7.1f} s  cell {c['cell']:2d}  {c['first_line'][:70]}")
    print(f"wall {wall:.0f} s, load {load_before[0]:.1f} -> {report['load_after'][0]:.1f}; notebook's own: "
          + ", ".join(f"{k} {v:.0f}" for k, v in report["notebook_seconds"].items() if v is not None))
    write_report(report, args.json)


if __name__ == "__main__":
    main()
