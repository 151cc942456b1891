"""The course's commands of ``workbench``: ``notebooks`` (run, copy, grade) and ``book`` (build, serve, slides)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from workbench.errors import WorkbenchError

JOBS_HELP = ("notebooks executed at the same time (default: 2 on a machine with 2 or more cores, or "
             "$WORKBENCH_NOTEBOOK_JOBS; 1 runs them one after the other)")
GRADE_DESCRIPTION = """\
Grade a class. GRADING EXECUTES STUDENT CODE: each student's exercise functions (and, without --checks-only, the
whole notebook) run in a child process. What isolates it on Linux: its own temporary folder as HOME, TMPDIR and
working folder; an environment reduced to an allow-list; limits on CPU seconds, memory (--memory-gb), file size
and processes; a time-out per notebook (--timeout) that kills all its processes; and where the system allows
(root with util-linux unshare and setpriv) no network, its own PID and mount namespaces (the class folder, the
gradebook folder and the master notebooks hidden, world-writable folders such as /run/lock hidden, the grader's
home replaced by an empty folder), an unprivileged user id of its own, so it cannot write the instructor's files or
model cache, a cgroup holding the memory of all its processes together, and a working folder of its own size (a
tmpfs), so it cannot fill the disk the others are graded on. It can still read world-readable files (the installed
packages, the workbench's source) and use CPU up to its limits. The gradebook records the isolation that applied.
For stronger isolation run the grader in a container, e.g.:

  docker run --rm --network none --memory 8g --pids-limit 512 --read-only --tmpfs /tmp \\
    -v "$PWD/class:/class:ro" -v "$PWD/gradebook:/gradebook" IMAGE \\
    workbench notebooks grade /class --out /gradebook --checks-only

(IMAGE: any image with this workbench installed.)

The grade is the grader's own: it takes from each notebook only the exercise cells' imports, definitions and
literal constants and the answer cells' literals (never running the rest), records what the functions return, and
judges that in its own process against the package. A forged metrics.json or a patched check changes nothing.
The checks inside the notebooks (ex.check) are formative: they help students while they work, and a student can
change them. For marks, the grader adds the sandbox, its own judgement, per-student random cases
(--seed-from-student), and a gradebook (CSV and JSON: student x exercise status, predictions, totals, the hints).
"""

def _port(text: str) -> int:
    """A TCP port for argparse: a whole number from 0 to 65535."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port: use a whole number from 0 to 65535, such as 8000")
    return port


def cmd_notebooks(args: argparse.Namespace) -> int:
    """``run``: one progress bar, then one line per notebook (and its error); ``--verbose`` also shows papermill's
    records and the kernels' start-up warnings. ``copy``: editable copies of the notebooks in a folder."""
    from workbench.tools.book.notebooks import copy_notebooks, notebooks_dir, parse_parameters
    from workbench.tools.book.runner import run_series

    if args.action == "grade":
        return cmd_grade(args)
    if args.action == "copy":
        if not str(args.target).strip():  # an unset $DEST: never the current folder by accident
            from workbench.errors import NotebookCopyError

            raise NotebookCopyError("the folder to copy into is empty: name it, e.g. `workbench notebooks copy "
                                    "my-notebooks` (use . for the current folder)")
        if args.student:
            from workbench.tools.book.assign import copy_student

            written = copy_student(args.target, only=args.only or None, force=args.force)
            done = (f"wrote {len(written)} student files (exercise solutions replaced by stubs, checks kept) from "
                    f"{notebooks_dir()}; grade them with `workbench notebooks grade {args.target}`")
        else:
            written = copy_notebooks(args.target, only=args.only or None, force=args.force)
            done = (f"copied {len(written)} files from {notebooks_dir()}; open them with `jupyter lab {args.target}`, "
                    f"run them with `workbench notebooks run --dir {args.target}`")
        print("\n".join([*map(str, written), done]))
        return 0

    quiet = not (args.verbose or args.debug)
    if quiet:
        logging.getLogger().setLevel(logging.WARNING)
        logging.getLogger("papermill").setLevel(logging.ERROR)  # its INFO records and parameter warnings
        logging.getLogger("workbench.tools.book.runner").setLevel(logging.ERROR)  # failures are in the table below
    params = parse_parameters(args.param or [])
    only = args.only or None
    out = Path(args.out).expanduser().resolve()  # the kernels run elsewhere: resolve where the user stands
    from workbench.tools.cli.run_options import check_data_dir

    check_data_dir(args.data_dir)  # a file or a missing folder: refused before any notebook starts
    data_dir = Path(args.data_dir).expanduser().resolve() if args.data_dir else None
    results = run_series(out_dir=out, smoke=args.smoke, only=only, parameters=params or None, data_dir=data_dir,
                         quiet=quiet, directory=args.dir, jobs=args.jobs)
    failed = [r for r in results if r.get("status") != "ok"]
    for r in results:
        print(f"{r['name']:40s} {r.get('status', '?'):6s} {r.get('seconds', 0):7.1f} s")
        if r.get("error"):
            print(f"    {r['error'].splitlines()[0][:300]}")
    print(f"report: {out / 'index.html'}")
    return 1 if failed else 0


def _check_grade_options(args: argparse.Namespace) -> None:
    """Refuse, before any grading, the options that would grade wrongly: limits that are not positive numbers, and a
    gradebook inside the class folder (the sandbox hides it from the students' code, so it hides part of the
    class)."""
    import math

    for name, value in (("--timeout", args.timeout), ("--memory-gb", args.memory_gb)):
        if not (isinstance(value, float) and math.isfinite(value) and value > 0):
            raise WorkbenchError(f"{name} {value}: give a positive number (the defaults are 300 seconds and 4 GB)")
    if args.jobs is not None and args.jobs < 1:
        raise WorkbenchError(f"--jobs {args.jobs}: grade at least 1 notebook at a time")
    target, out = Path(args.target).expanduser().resolve(), Path(args.out).expanduser().resolve()
    if out.exists() and not out.is_dir():
        raise WorkbenchError(f"--out {args.out} is a file: the gradebook is a folder (gradebook.csv, totals.csv, "
                             "gradebook.json); name a folder, new or one that holds an earlier gradebook")
    if out == target or out.is_relative_to(target):
        raise WorkbenchError(f"--out {args.out} lies inside the class folder {args.target}: write the gradebook "
                             "outside it (the default is ./gradebook)")


def cmd_grade(args: argparse.Namespace) -> int:
    """``notebooks grade CLASS_DIR``: grade every student's notebooks in the sandbox, write the gradebook, print a
    summary (or the exercise rows as JSON); exit 1 when an exercise did not pass."""
    from workbench.tools.book.runner import default_jobs
    from workbench.tools.grading.gradebook import summary_table, write_gradebook
    from workbench.tools.grading.grader import GradeOptions, grade_class
    from workbench.tools.grading.sandbox import Limits

    logging.getLogger("papermill").setLevel(logging.ERROR)
    _check_grade_options(args)
    limits = Limits(memory_bytes=int(args.memory_gb * 2**30))
    if any(not o.strip() for o in args.only or ()):
        raise WorkbenchError("--only '' is empty: give a lesson number such as 05 (an unset shell variable?)")
    only = tuple(f"{int(o):02d}" if o.strip().isdigit() else o.strip()[:2] for o in args.only or ())  # 5 is 05
    opts = GradeOptions(mode="checks" if args.checks_only else "full", smoke=args.smoke,
                        seed="student" if args.seed_from_student else args.seed, timeout=args.timeout,
                        limits=limits, jobs=args.jobs or default_jobs(), only=only)
    book = grade_class(args.target, opts, hide=[args.out])
    paths = write_gradebook(book, args.out)
    rows = [{"student": r["student"], "notebook": r["notebook"], "file": r["file"], **e}
            for r in book["records"] for e in r["exercises"]]
    print(json.dumps(rows, indent=1) if args.json else summary_table(book))
    print(f"gradebook: {paths['items']}, {paths['totals']}, {paths['json']}", file=sys.stderr)
    return 1 if any(r["status"] != "passed" for r in rows) else 0


def cmd_book(args: argparse.Namespace) -> int:
    from workbench.tools.book.build import build_book, serve
    from workbench.tools.book.notebooks import parse_parameters

    if args.action == "slides":
        from workbench.tools.book.slides import build_slides

        written = build_slides(args.from_reports, args.out, only=args.only or None)
        print("\n".join(map(str, written)))
        return 0
    if args.action == "serve":
        server = serve(args.dir, port=args.port, bind=args.bind)
        host, port = server.server_address[:2]
        print(f"serving {Path(args.dir).resolve()} at http://{host}:{port}/ (Ctrl-C to stop)", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
        return 0
    result = build_book(out=args.out, smoke=args.smoke, only=args.only or None, from_reports=args.from_reports,
                        reports=args.reports, parameters=parse_parameters(args.param or []) or None,
                        threads=args.threads, jobs=args.jobs, solutions=not args.no_solutions)
    for page in result.pages:
        took = f"{page.seconds:7.1f} s" if page.seconds is not None else "      – "
        print(f"{page.name:40s} {page.status:6s} {took}")
    print(f"notebooks {result.run_seconds:.0f} s, sphinx {result.sphinx_seconds:.0f} s, {len(result.warnings)} warnings")
    print(f"book: {result.index}  (read it offline, or: workbench book serve --dir {args.out})")
    return 0 if result.ok else 1


def add_course_commands(sub: argparse._SubParsersAction) -> None:
    """Add the ``notebooks`` and ``book`` commands to the ``workbench`` parser's subcommands."""
    p = sub.add_parser("notebooks", help="run the notebook series headless, copy it to edit (or as student versions), grade student copies")
    nsub = p.add_subparsers(dest="action", metavar="ACTION")
    r = nsub.add_parser("run", help="execute the notebooks with papermill and write HTML reports")
    r.add_argument("--smoke", action="store_true", help="tiny sizes (what CI runs)")
    r.add_argument("--only", action="append", help="run only notebooks whose number or name matches (repeatable)")
    r.add_argument("--out", default="reports", help="output folder (an index.html is written there)")
    r.add_argument("-p", "--param", action="append", help="NAME=VALUE parameter for every notebook (JSON values)")
    r.add_argument("--data-dir", default=None, help="local Multi30k folder (else $WORKBENCH_MULTI30K or the cache)")
    r.add_argument("--verbose", action="store_true", help="also show papermill's log and the kernels' warnings")
    r.add_argument("--dir", default=None, help="run the notebooks of this folder (e.g. your copies) instead of the "
                                              "package's")
    r.add_argument("--jobs", type=int, default=None, help=JOBS_HELP)
    r.set_defaults(func=cmd_notebooks)
    r = nsub.add_parser("copy", help="copy the notebooks (.ipynb with its paired .py) into a folder to edit them")
    r.add_argument("target", metavar="DIR", help="the folder to copy into (created if missing)")
    r.add_argument("--only", action="append", help="copy only notebooks whose number or name matches (repeatable)")
    r.add_argument("--force", action="store_true", help="overwrite files of the same names in DIR")
    r.add_argument("--student", action="store_true", help="student versions: each exercise's solution replaced by "
                                                          "its stub (otter-grader's solution markers), checks kept")
    r.set_defaults(func=cmd_notebooks)
    r = nsub.add_parser("grade", help="grade a class (a folder of student folders, or one folder of copies) in a "
                                      "sandbox and write a gradebook (exit 1 when an exercise did not pass)",
                        description=GRADE_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("target", metavar="CLASS_DIR", help="a folder of student folders (each holding that student's "
                                                       "NN_name.ipynb copies), or one folder of copies")
    r.add_argument("--out", default="gradebook", help="where gradebook.csv, totals.csv and gradebook.json go")
    r.add_argument("--checks-only", action="store_true", help="grade the exercise functions and predictions only, "
                                                              "without running each lesson (fast)")
    r.add_argument("--smoke", action="store_true", help="full mode: run the notebooks with SMOKE=True (tiny sizes)")
    r.add_argument("--timeout", type=float, default=300.0, help="seconds per notebook in the sandbox (default 300)")
    r.add_argument("--memory-gb", type=float, default=4.0, help="memory of each notebook's run: all its processes together where a cgroup can be made (the "
                                            "gradebook says), and the address space of each (default 4)")
    r.add_argument("--seed", type=int, default=0, help="seed of the checks' random cases, the same for everyone")
    r.add_argument("--seed-from-student", action="store_true", help="seed each student's random cases from the "
                                                                    "student's id (per-student variants)")
    r.add_argument("--only", action="append", help="grade only notebooks of this number (repeatable)")
    r.add_argument("--json", action="store_true", help="print the exercise rows as JSON (one object per student "
                                                       "and exercise)")
    r.add_argument("--jobs", type=int, default=None, help="notebooks graded at the same time (default: 2 on a "
                                                          "machine with 2 or more cores)")
    r.set_defaults(func=cmd_notebooks)

    p = sub.add_parser("book", help="the notebooks as a rendered, offline book (Sphinx + myst-nb)")
    bsub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    b = bsub.add_parser("build", help="execute the notebooks (or reuse executed ones) and build the book")
    b.add_argument("--smoke", action="store_true", help="run the notebooks with SMOKE=True (tiny sizes, as CI)")
    b.add_argument("--out", default="book", help="the book's folder (an earlier book there is replaced)")
    b.add_argument("--from-reports", default=None, metavar="DIR",
                   help="reuse the executed notebooks of `workbench notebooks run --out DIR` instead of running them")
    b.add_argument("--reports", default="reports", metavar="DIR", help="where the notebooks are executed")
    b.add_argument("--only", action="append", help="include only notebooks whose number or name matches (repeatable)")
    b.add_argument("-p", "--param", action="append", help="NAME=VALUE parameter for every notebook that has it")
    b.add_argument("--threads", type=int, default=None, help="torch threads in the notebook kernels")
    b.add_argument("--jobs", type=int, default=None, help=JOBS_HELP)
    b.add_argument("--no-solutions", action="store_true", help="show each exercise as the student's stub, not its "
                                                               "solution (for a course's public site)")
    b.set_defaults(func=cmd_book)
    b = bsub.add_parser("serve", help="serve a built book over HTTP on this machine")
    b.add_argument("--dir", default="book", help="the book's folder")
    b.add_argument("--port", type=_port, default=8000, help="TCP port, 0 to 65535 (0: any free one)")
    b.add_argument("--bind", default="127.0.0.1", help="address to listen on")
    b.set_defaults(func=cmd_book)
    b = bsub.add_parser("slides", help="one offline slide deck per lesson (its objectives, figures and checks) from "
                                       "executed notebooks")
    b.add_argument("--from-reports", required=True, metavar="DIR", help="a `workbench notebooks run --out DIR` folder")
    b.add_argument("--out", default="slides", help="where the decks go")
    b.add_argument("--only", action="append", help="lesson numbers or names (repeatable)")
    b.set_defaults(func=cmd_book)
