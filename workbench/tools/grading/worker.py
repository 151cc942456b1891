"""The grader's worker: the only place where a student's code runs, always inside :mod:`workbench.tools.grading.sandbox`.

``python -m workbench.tools.grading.worker JOB.json`` reads its job (written by :mod:`workbench.tools.grading.grader`) and

* ``"mode": "checks"``: executes the student's extracted definitions (imports, functions, classes, literal
  constants; nothing else) statement by statement in a fresh namespace, then calls
  :func:`workbench.lessons.exercises.observe` on each exercise's function and saves what it observed, one file per
  exercise (``obs-K.pt``, plain data for ``torch.load(weights_only=True)``), plus ``exec.json`` (the statements
  that raised, for the hints);
* ``"mode": "notebook"``: runs the student's notebook with papermill and saves ``run.json`` (status, error,
  seconds), so the gradebook can say whether it runs.

Nothing it writes decides a grade: the grader judges the observations with its own reference in its own process.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any


def run_checks(job: dict[str, Any], folder: Path) -> None:
    import torch

    from workbench.lessons import exercises as ex

    pid = os.getpid()
    namespace: dict[str, Any] = {"__name__": "__student__", "__builtins__": __builtins__}
    errors = []
    for statement in job["statements"]:
        try:
            exec(compile(statement["code"], statement["where"], "exec"), namespace)  # noqa: S102 (sandboxed)
        except BaseException as exc:  # noqa: BLE001 (a definition may raise anything, even SystemExit)
            text = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
            errors.append(f"{statement['where']}: {type(exc).__name__}: {text}")
    (folder / "exec.json").write_text(json.dumps(errors))
    for k, exercise_id in enumerate(job["exercises"]):
        name = ex.get(exercise_id).function_name
        fn = namespace.get(name)
        observation = ex.observe(exercise_id, fn, seed=job["seed"], time_limit=job["time_limit"])
        if os.getpid() != pid:  # a child forked by the student's function: it writes nothing
            os._exit(0)
        torch.save(observation, folder / f"obs-{k}.tmp")
        os.replace(folder / f"obs-{k}.tmp", folder / f"obs-{k}.pt")
        # as the lessons do: after a failed exercise, the later ones run with the package's function under its name
        # (this judgement only chooses that; the grade is judged again by the grader, outside the sandbox)
        if ex.judge(exercise_id, observation).status != ex.PASSED:
            namespace[name] = ex.get(exercise_id).reference


def run_notebook(job: dict[str, Any], folder: Path) -> None:
    from workbench.tools.book.runner import run_notebook as execute

    result = execute(folder / job["notebook"], folder / "run", smoke=job["smoke"], html_report=False, threads=1,
                     quiet=True)
    (folder / "run.json").write_text(json.dumps({k: result.get(k) for k in ("status", "error", "seconds")}))


def main(argv: list[str] | None = None) -> int:
    path = Path((argv if argv is not None else sys.argv[1:])[0])
    job = json.loads(path.read_text())
    {"checks": run_checks, "notebook": run_notebook}[job["mode"]](job, path.parent)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # threads the student's code left running do not keep the worker alive
