"""How long the book takes to build from nothing: the notebook series executed cold, then Sphinx.

    python bench/time_book.py [--smoke] [--jobs N] [--threads N] [--json FILE]

Runs ``workbench book build`` (the same :func:`workbench.tools.book.build.build_book` the command calls) with an empty model
cache (``WORKBENCH_CACHE`` set to a new temporary folder, so the one notebook that caches a trained model trains it
again) into temporary folders, and prints the wall time of the whole build, of the notebooks and of Sphinx, and each
notebook's own seconds. ``--json`` also writes them with the machine, torch version, commit and every notebook's
status. Needs the Multi30k files (``WORKBENCH_MULTI30K``) and the ``book`` extra. Run it on an idle machine: the
figures are wall-clock times.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from workbench.tools.book.build import build_book
from workbench.tools.book.runner import default_jobs, kernel_threads
from workbench.tools.provenance import provenance, write_report


def _per_kernel(threads: int | None, inherited: dict[str, str]) -> str:
    """How many threads each kernel had: set by the build, else inherited from this environment, else torch's."""
    if threads is not None:
        return f"{threads} thread(s) each"
    if inherited:
        return " ".join(f"{k}={v}" for k, v in inherited.items()) + " inherited from the environment"
    return "torch's default threads"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="the SMOKE series (what CI builds)")
    ap.add_argument("--jobs", type=int, default=None, help=f"notebooks at a time (default here: {default_jobs()})")
    ap.add_argument("--threads", type=int, default=None, help="torch threads per kernel (default: cores / jobs)")
    ap.add_argument("--only", action="append", help="time only these notebooks (number or name, repeatable)")
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    ap.add_argument("--keep", default=None, metavar="DIR",
                    help="keep the executed notebooks (and their metrics.json) in DIR/reports and the book in DIR/book")
    args = ap.parse_args()
    jobs = default_jobs() if args.jobs is None else args.jobs
    threads = kernel_threads(jobs, args.threads)
    inherited = {k: os.environ[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS") if k in os.environ}
    # the code that runs, read before the build (a commit made meanwhile is not this run's)
    record = provenance(["python", "bench/time_book.py", *sys.argv[1:]])
    with tempfile.TemporaryDirectory(prefix="workbench-time-book-") as tmp:
        os.environ["WORKBENCH_CACHE"] = str(Path(tmp) / "cache")  # cold: nothing trained before
        where = Path(args.keep).resolve() if args.keep else Path(tmp)
        t0 = time.perf_counter()
        result = build_book(out=where / "book", smoke=args.smoke, only=args.only, reports=where / "reports",
                            threads=args.threads, jobs=jobs)
        wall = time.perf_counter() - t0
    pages = [{"name": p.name, "status": p.status, "seconds": p.seconds} for p in result.pages]
    for p in pages:
        print(f"{p['name']:40s} {p['status']:6s} {p['seconds'] or 0:7.1f} s")
    print(f"whole build {wall:.0f} s ({wall / 60:.1f} min): notebooks {result.run_seconds:.0f} s, "
          f"sphinx {result.sphinx_seconds:.0f} s; {jobs} notebook(s) at a time, {_per_kernel(threads, inherited)}; "
          f"sum of the notebooks' own times {sum(p['seconds'] or 0 for p in pages):.0f} s")
    if args.json:
        report = {
            **record,
            "smoke": args.smoke, "jobs": jobs, "threads": args.threads, "kernel_threads": threads,
            "inherited_thread_env": inherited, "wall_seconds": round(wall, 1),
            "notebook_seconds": round(result.run_seconds, 1), "sphinx_seconds": round(result.sphinx_seconds, 1),
            "pages": pages, "ok": result.ok,
            "metrics": {p.name: p.metrics for p in result.pages},
        }
        write_report(report, args.json)
    sys.exit(0 if result.ok else 1)


if __name__ == "__main__":
    main()
