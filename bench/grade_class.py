"""How long grading a class takes: 30 student copies of notebook 05, graded checks-only and in the full mode.

    python bench/grade_class.py [--students 30] [--jobs 2] [--modes checks full] [--timeout 300]

Builds a class of ``--students`` copies of notebook 05 (the student version; one in three with the master's
solutions, one in three with one wrong exercise, the rest left as stubs), grades it with
:func:`workbench.tools.grading.grader.grade_class` (the function ``workbench notebooks grade`` calls) in each mode, ``--jobs``
notebooks at a time, each sandboxed run with one thread, the full mode at SMOKE size, and prints the wall time, the
seconds per notebook and the statuses found. Writes the figures with their provenance (commit, CPU, threads, the
isolation that applied, the load before the run; "contended" when other work loaded the machine) to
``bench/results/grade/grade-class-<commit>.json``. The target (issue 45): a class of 30 at SMOKE size within
10 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import nbformat

from workbench.tools.book.assign import copy_student, solution_view
from workbench.tools.grading.gradebook import item_rows
from workbench.tools.grading.grader import GradeOptions, grade_class
from workbench.tools.provenance import provenance

REPO = Path(__file__).resolve().parents[1]
WRONG = "def causal_mask(T):\n    return torch.ones(T, T, dtype=torch.bool).tril(-1)  # the diagonal forgotten"


def make_class(root: Path, students: int) -> None:
    """``students`` folders of notebook 05: master solutions, one wrong exercise, or stubs, in turn."""
    master = nbformat.read(REPO / "notebooks" / "05_masked_attention.ipynb", as_version=4)
    solved = {i: solution_view(c.source) for i, c in enumerate(master.cells)
              if "exercise" in c.metadata.get("tags", [])}
    for k in range(students):
        folder = root / f"student{k:02d}"
        copy_student(folder, only=["05"])
        (folder / "05_masked_attention.py").unlink()
        if k % 3 == 2:
            continue  # stubs
        path = folder / "05_masked_attention.ipynb"
        nb = nbformat.read(path, as_version=4)
        for i, source in solved.items():
            nb.cells[i].source = WRONG if k % 3 == 1 and "def causal_mask(" in source else source
        nbformat.write(nb, path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--students", type=int, default=30)
    ap.add_argument("--jobs", type=int, default=2, help="notebooks graded at the same time")
    ap.add_argument("--modes", nargs="+", default=["checks", "full"], choices=["checks", "full"])
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per notebook")
    ap.add_argument("--json", default=None, help="result file (default: bench/results/grade/grade-class-<commit>.json)")
    args = ap.parse_args()
    record = provenance(["python", "bench/grade_class.py", *sys.argv[1:]])
    load_before = os.getloadavg()
    runs = []
    with tempfile.TemporaryDirectory(prefix="workbench-bench-grade-") as tmp:
        make_class(Path(tmp) / "class", args.students)
        for mode in args.modes:
            opts = GradeOptions(mode=mode, smoke=True, timeout=args.timeout, jobs=args.jobs)
            t0 = time.perf_counter()
            book = grade_class(Path(tmp) / "class", opts)
            wall = time.perf_counter() - t0
            counts = Counter(r["status"] for r in item_rows(book) if r["kind"] == "exercise")
            ran = Counter(r["ran"] for r in book["records"])
            runs.append({"mode": mode, "wall_s": round(wall, 1), "per_notebook_s": round(wall / args.students, 2),
                         "statuses": dict(counts), "ran": {str(k): v for k, v in ran.items()},
                         "within_10_min": wall <= 600, "load_1min_after": os.getloadavg()[0]})
            print(f"{mode:6s}  {args.students} notebooks in {wall:6.1f} s ({wall / args.students:.2f} s each, "
                  f"{args.jobs} at a time)  {dict(counts)}", flush=True)
    contended = load_before[0] > 0.5
    result = {**record, "students": args.students, "jobs": args.jobs, "notebook": "05_masked_attention",
              "smoke": True, "isolation": book["meta"]["isolation"], "isolation_text": book["meta"]["isolation_text"],
              "load_before": load_before, "contended": contended, "runs": runs}
    print(f"load average before: {load_before[0]:.2f}" + ("  (contended: other work was running)" if contended else ""))
    out = Path(args.json) if args.json else REPO / "bench" / "results" / "grade" / \
        f"grade-class-{(record.get('commit') or 'nocommit')[:7]}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
