"""Grading a class: every student's notebooks, each in a sandbox, into one gradebook (CSV and JSON).

**Grading executes student code.** For each student notebook the grader

1. reads it without running it (:mod:`workbench.tools.grading.submission`): the ``.ipynb`` or its newer ``.py`` twin; the
   definitions of the exercise cells, the notebook's imports, the predictions of the answer cells;
2. runs :mod:`workbench.tools.grading.worker` in a sandbox (:mod:`workbench.tools.grading.sandbox`: own folder, allow-listed
   environment, resource limits, time-out, and on Linux no network, own PID and mount namespaces and an
   unprivileged user id) which executes those definitions and records what each exercise's function returns on
   the check's inputs (:func:`workbench.lessons.exercises.observe`);
3. receives the observations over a pipe only the worker holds (never from a file in the sandbox), loads them as
   plain data (``torch.load(weights_only=True)``) and judges them in its own process against the package's
   reference (:func:`workbench.lessons.exercises.judge`) on every fixed and drawn input, whatever the observation
   claims: the grade never comes from a file or object the student's code wrote (a forged ``metrics.json`` or a
   monkeypatched ``check`` or ``observe`` changes nothing);
4. in the full mode, also runs the whole notebook in the sandbox to say whether it runs; the exercises of a
   notebook that stops are "not run", with the reason.

Predictions are read as literals and compared with the measured value by trusted code
(:func:`workbench.lessons.exercises.grade_prediction`). ``seed="student"`` draws each student's random cases from
their id (:func:`student_seed`), so answers cannot be passed round as numbers.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from workbench.errors import NotebookParameterError
from workbench.tools.grading import sandbox
from workbench.tools.grading.submission import Submission, extract, notebook_names, read_submission

NOT_RUN, MISSING = "not run", "missing"
OBSERVATION_BYTES = 64 * 2**20  # an observation file larger than this is not loaded
JUDGE_LOCK = threading.Lock()  # judge() draws the cases from torch's global random stream: one at a time
STARTUP_SECONDS = 60.0  # allowed to a worker to start (import torch and the package) before its first exercise
WORKER = [sys.executable, "-m", "workbench.tools.grading.worker"]  # the worker's command; its job file is appended


@dataclasses.dataclass(frozen=True)
class GradeOptions:
    """How a class is graded."""

    mode: str = "checks"  # "checks": the exercise functions only; "full": also run each notebook in the sandbox
    smoke: bool = True  # full mode: run the notebooks with SMOKE=True
    seed: int | str = 0  # the checks' random cases: an int for everyone, or "student" (from each student's id)
    timeout: float = 300.0  # seconds per notebook: all its sandboxed runs together
    time_limit: float = 10.0  # seconds each exercise's function may run over all its inputs (observe's limit)
    limits: sandbox.Limits = sandbox.Limits()
    jobs: int = 2  # notebooks graded at the same time
    only: tuple[str, ...] = ()  # notebook numbers ("05") to grade; () all that hold exercises or predictions

    def __post_init__(self) -> None:
        if self.mode not in ("checks", "full"):
            raise NotebookParameterError(f"grading mode {self.mode!r}: use 'checks' or 'full'")
        if not (isinstance(self.seed, int) or self.seed == "student"):
            raise NotebookParameterError(f"seed {self.seed!r}: give an integer, or 'student' for per-student seeds")
        if self.timeout <= 0 or self.jobs < 1 or self.time_limit <= 0:
            raise NotebookParameterError(f"timeout {self.timeout}, time_limit {self.time_limit} and jobs {self.jobs} "
                                         "must be positive")

    @property
    def stall_seconds(self) -> float:
        """How long the worker may go without finishing an exercise before it is stopped and replaced: the check's
        own limit three times over (its inputs, the gradients) and 15 s to spare."""
        return 3 * self.time_limit + 15


def student_seed(student: str) -> int:
    """The seed of a student's random cases: from the SHA-256 of the id (the same on every machine and run)."""
    return int.from_bytes(hashlib.sha256(student.encode("utf-8")).digest()[:4], "big") % 2**31


def class_folders(class_dir: str | Path) -> list[tuple[str, Path]]:
    """``(student id, folder)`` for a folder of student folders, or a single student's folder of notebooks (the
    folder's name is then the id).

    Raises:
        NotebookParameterError: no numbered notebook in the folder or in any folder under it.
    """
    root = Path(class_dir).expanduser().resolve()
    if not root.is_dir():
        raise NotebookParameterError(f"{root} is not a folder: give a folder of student folders, or of notebooks")
    if notebook_names(root):
        return [(root.name, root)]
    students = [(p.name, p) for p in sorted(root.iterdir()) if p.is_dir() and notebook_names(p)]
    if not students:
        raise NotebookParameterError(f"{root} holds no numbered notebook (NN_name.ipynb), nor folders that do: give "
                                     "the folder of student copies (`workbench notebooks copy --student DIR`)")
    return students


def _exercises(number: str) -> list[str]:
    from workbench.lessons import exercises as ex

    return [e.id for e in ex.exercises_of(number)]


def _predictions(number: str) -> dict[str, str]:
    """Prediction id -> the notebook's answer variable, for notebook ``number``."""
    from workbench.lessons import exercises as ex

    return {pid: p.variable for pid, p in ex.PREDICTIONS.items() if pid.split(".", 1)[0] == number}


def _row(exercise: str, status: str, message: str, mistake: str | None = None) -> dict[str, Any]:
    return {"exercise": exercise, "status": status, "message": message, "mistake": mistake}


def _job_folder(tmp: Path, tag: str, opts: GradeOptions) -> Path:
    return sandbox.make_run_folder(tmp, tag, opts.limits)


class _Channel:
    """The pipe on which the worker sends its results (:func:`workbench.tools.grading.worker.send`): the grader reads
    it in a thread of its own; the worker's children close their end before any student code runs."""

    def __init__(self, limit: int) -> None:
        self.read_fd, self.write_fd = os.pipe()
        self.limit = limit
        self.data = bytearray()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        with os.fdopen(self.read_fd, "rb", buffering=0) as pipe:
            while chunk := pipe.read(1 << 16):
                if len(self.data) < 4 * self.limit:  # past that, drained and dropped: the run is judged broken
                    self.data += chunk

    def frames(self) -> dict[int, bytes]:
        """The complete messages received so far, by index."""
        from workbench.tools.grading.worker import read_frames

        return read_frames(bytes(self.data), self.limit)[0]

    def close(self) -> dict[int, bytes]:
        """All complete messages, once the run has ended (its processes gone, so the pipe's end comes)."""
        self.thread.join(timeout=10)
        return self.frames()


def _observe(sub: Submission, statements: list[dict[str, str]], ids: list[str], seed: int, opts: GradeOptions,
             tmp: Path, hide: Sequence[Path]) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """Run the worker on ``ids`` until each has an observation or a reason: a worker that dies (memory, exit) or
    stalls on one exercise (:attr:`GradeOptions.stall_seconds`) blames the exercise it was on, and a new one goes on
    with the rest, within the notebook's time-out."""
    import torch

    observed: dict[str, Any] = {}
    reasons: dict[str, str] = {}
    errors: list[str] = []
    todo = list(ids)
    retried: set[str] = set()  # exercises whose worker was killed once: each gets one more, fresh worker
    deadline = time.monotonic() + opts.timeout
    while todo:
        left = deadline - time.monotonic()
        if left < 1:
            for exercise_id in todo:
                reasons[exercise_id] = (f"not run: the notebook's time-out of {opts.timeout:.0f} s was spent by "
                                        "the exercises before it")
            break
        folder = _job_folder(tmp, f"{sub.student}-{sub.number}", opts)
        job = {"mode": "checks", "statements": statements, "exercises": todo, "seed": seed,
               "time_limit": opts.time_limit}
        channel = _Channel(OBSERVATION_BYTES)
        result, limits = _work(job, folder, opts, hide, left, channel, _stall_watch(channel, opts))
        frames = channel.close()
        text = sandbox.read_run_file(folder / "exec.json", 2**20)  # a file the run wrote: no link followed
        if text is not None:
            try:
                errors = [str(e)[:240] for e in json.loads(text)][:20]
            except (ValueError, UnicodeDecodeError, TypeError, RecursionError):
                pass
        done = 0
        for k, exercise_id in enumerate(todo):
            if k not in frames:  # only what the worker sent counts: never a file in the run's folder
                break
            try:
                observed[exercise_id] = torch.load(io.BytesIO(frames[k]), weights_only=True)
            except Exception as exc:  # plain data from the worker; still, never trust a load to succeed
                reasons[exercise_id] = f"its observations could not be read as plain data ({type(exc).__name__})"
            done = k + 1
        sandbox.remove_tree(folder)
        if done < len(todo) and result.killed and todo[done] not in retried:
            # a kill can come from outside the student's code (the machine's out-of-memory killer): once more, then
            # the exercise is blamed
            retried.add(todo[done])
        elif done < len(todo):
            why = result.reason(limits) + (", twice" if todo[done] in retried else "")
            reasons[todo[done]] = f"the grader's worker {why}" + ("" if result.stopped_by else " while this exercise ran")
            done += 1
        todo = todo[done:]
    return observed, reasons, errors


def _stall_watch(channel: _Channel, opts: GradeOptions) -> Callable[[], str | None]:
    """A watch for :func:`sandbox.run`: a reason once no new observation has arrived for ``opts.stall_seconds``
    (the first one also gets :data:`STARTUP_SECONDS` to import torch)."""
    state = {"count": 0, "since": time.monotonic() + STARTUP_SECONDS}

    def watch() -> str | None:
        count = len(channel.frames())
        if count != state["count"]:
            state.update(count=count, since=time.monotonic())
        elif time.monotonic() - state["since"] > opts.stall_seconds:
            return f"was stopped after {opts.stall_seconds:.0f} s on this exercise with no answer"
        return None

    return watch


def _work(job: dict[str, Any], folder: Path, opts: GradeOptions, hide: Sequence[Path], seconds: float,
          channel: _Channel, watch: Callable[[], str | None] | None = None) -> tuple[sandbox.RunResult, sandbox.Limits]:
    """Write ``job`` into ``folder`` and run the worker on it in the sandbox for at most ``seconds``, handing it the
    write end of ``channel``."""
    # in its own PID namespace the worker may end whatever a child left running (it reaches nothing outside)
    (folder / "job.json").write_text(json.dumps({**job, "own_pid_namespace": sandbox.probe().namespaces,
                                                 "channel_fd": channel.write_fd}))
    limits = dataclasses.replace(opts.limits, wall_seconds=seconds, cpu_seconds=int(seconds) + 1)
    argv = [*WORKER, sandbox.inside(folder / "job.json", folder)]
    return sandbox.run(argv, folder, limits, hide=hide, watch=watch, pass_fds=(channel.write_fd,)), limits


def _run_notebook(sub: Submission, folder: Path, opts: GradeOptions, tmp: Path,
                  hide: Sequence[Path]) -> str | None:
    """Full mode: run the student's notebook in the sandbox; None when it ran to the end, else why not (one line)."""
    import nbformat

    work = _job_folder(tmp, f"{sub.student}-{sub.number}-run", opts)
    try:
        source = folder / sub.file
        if source.suffix == ".py":
            import jupytext

            nbformat.write(jupytext.read(source), str(work / f"{sub.name}.ipynb"))
        else:
            shutil.copy2(source, work / f"{sub.name}.ipynb")
        job = {"mode": "notebook", "notebook": f"{sub.name}.ipynb", "smoke": opts.smoke}
        channel = _Channel(2**20)
        result, limits = _work(job, work, opts, hide, opts.timeout, channel)
        from workbench.tools.grading.worker import RUN_INDEX

        try:
            ran = json.loads(channel.close().get(RUN_INDEX, b"{}").decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            ran = {}
        if result.timed_out or result.returncode != 0 or not isinstance(ran, dict) or "status" not in ran:
            return f"the notebook {result.reason(limits)}"
        if ran.get("status") != "ok":
            return f"the notebook stopped: {str(ran.get('error') or 'unknown error').splitlines()[0][:200]}"
        return None
    finally:
        sandbox.remove_tree(work)


def grade_notebook(student: str, folder: Path, name: str, opts: GradeOptions, tmp: Path,
                   hide: Sequence[Path] = ()) -> dict[str, Any]:
    """Grade one student notebook (see the module docstring). Never raises on what the notebook holds.

    Returns:
        ``{"student", "notebook", "file", "note", "seed", "ran", "exercises": [row], "predictions": [row]}``;
        an exercise row is ``{"exercise", "status", "message", "mistake"}`` with status "passed", "failed",
        "not attempted", "not run" or "missing"; ``ran`` is None in the checks-only mode.
    """
    from workbench.lessons import exercises as ex
    from workbench.lessons.exercises.renumbered import held_ids, lessons_of

    sub = read_submission(student, folder, name)
    numbers, renamed = lessons_of(name)  # a notebook named before the renumbering: the lessons that hold it now
    if renamed:
        warnings.warn(renamed, FutureWarning, stacklevel=2)
    held = held_ids(name)  # an old copy holds only the exercises and prompts of its time
    all_ids = [i for n in numbers for i in _exercises(n)]
    all_predictions = {k: v for n in numbers for k, v in _predictions(n).items()}
    ids = [i for i in all_ids if held is None or i in held]
    predictions = {k: v for k, v in all_predictions.items() if held is None or k in held}
    seed = student_seed(student) if opts.seed == "student" else int(opts.seed)
    note = "; ".join(x for x in (sub.note, renamed) if x)
    record: dict[str, Any] = {"student": student, "notebook": name, "file": sub.file, "note": note, "seed": seed,
                              "ran": None, "exercises": [], "predictions": []}
    if not sub.readable:
        record["exercises"] = [_row(i, NOT_RUN, sub.note) for i in ids]
        record["predictions"] = [{"prediction": p, "status": NOT_RUN, "message": sub.note, "answer": None,
                                  "measured": None} for p in predictions]
        return record
    got = extract(sub, [_function_name(i) for i in all_ids], list(all_predictions.values()))
    if held is not None:  # what it holds decides, not its name: a current copy under an old name is graded in full
        ids = [i for i in all_ids if i in held or _function_name(i) not in got.missing]
        predictions = {k: v for k, v in all_predictions.items()
                       if k in held or v in got.answers or v in got.unreadable_answers}
    for pid, variable in predictions.items():
        if variable in got.unreadable_answers:
            record["predictions"].append({"prediction": pid, "status": "unreadable",
                                          "message": got.unreadable_answers[variable], "answer": None,
                                          "measured": None})
        elif variable not in got.answers:
            record["predictions"].append({"prediction": pid, "status": MISSING, "answer": None, "measured": None,
                                          "message": f"no cell tagged 'answer' assigns {variable}"})
        else:
            with JUDGE_LOCK:
                record["predictions"].append(ex.grade_prediction(pid, got.answers[variable]).to_dict())
    stopped = None
    if opts.mode == "full":
        stopped = _run_notebook(sub, folder, opts, tmp, hide)
        record["ran"] = stopped or "ran to the end"
    present = [i for i in ids if _function_name(i) not in got.missing]
    observed, reasons, errors = ({}, {}, []) if stopped or not present else _observe(
        sub, got.statements, present, seed, opts, tmp, hide)
    for exercise_id in ids:
        fn_name = _function_name(exercise_id)
        if fn_name in got.missing:
            record["exercises"].append(_row(exercise_id, MISSING, got.missing[fn_name]))
        elif stopped:
            record["exercises"].append(_row(exercise_id, NOT_RUN, stopped))
        elif exercise_id in observed:
            with JUDGE_LOCK:
                row = ex.judge(exercise_id, observed[exercise_id], seed=seed, n_draws=ex.N_DRAWS).to_dict()
            if row["status"] != "passed":
                blamed = [e for e in errors if f"def {fn_name}" in e or fn_name in e]
                if blamed:
                    row["message"] += f" (the grader could not define it: {blamed[0]})"
            record["exercises"].append(row)
        else:
            why = reasons.get(exercise_id, "no observation")
            if why.startswith("not run: "):
                record["exercises"].append(_row(exercise_id, NOT_RUN, why.removeprefix("not run: ")))
            else:
                record["exercises"].append(_row(exercise_id, "failed", why))
    return record


def _one_notebook_per_lesson(tasks: list[tuple[str, Path, str]]) -> tuple[list[tuple[str, Path, str]],
                                                                           list[dict[str, Any]]]:
    """Each student's notebooks to grade, one per lesson, and a record with no items for each other notebook of a
    lesson already graded (extra copies would otherwise each count, the last one deciding the columns). The one
    graded is the one with the lesson's own name, else the first by name."""
    from workbench.lessons.exercises.renumbered import lessons_of
    from workbench.tools.book.notebooks import list_notebooks

    try:
        own_names = {p.stem for p in list_notebooks()}
    except Exception:  # noqa: BLE001 (no master notebooks installed: the first by name is graded)
        own_names = set()
    kept: list[tuple[str, Path, str]] = []
    extra: list[dict[str, Any]] = []
    by_student: dict[str, list[tuple[str, Path, str]]] = {}
    for task in tasks:
        by_student.setdefault(task[0], []).append(task)
    for student, mine in by_student.items():
        ranked = sorted(mine, key=lambda t: (t[2] not in own_names, t[2]))
        taken: dict[str, str] = {}
        for task in ranked:
            numbers = lessons_of(task[2])[0]
            clash = next((taken[n] for n in numbers if n in taken), None)
            if clash is None:
                kept.append(task)
                taken.update(dict.fromkeys(numbers, task[2]))
            else:
                extra.append({"student": student, "notebook": task[2], "file": "", "seed": None, "ran": None,
                              "note": f"{task[2]} not graded: {clash} is graded for the same lesson (hand in one "
                                      "copy of each lesson)", "exercises": [], "predictions": []})
    kept.sort(key=lambda t: tasks.index(t))
    return kept, extra


def _ungraded(student: str, _folder: Path, name: str, why: str) -> dict[str, Any]:
    """The record of a notebook the grader failed on: its exercises and predictions "not run", with the reason."""
    from workbench.lessons.exercises.renumbered import lessons_of

    try:
        numbers = lessons_of(name)[0]
    except Exception:  # noqa: BLE001
        numbers = [name[:2]]
    return {"student": student, "notebook": name, "file": "", "note": why, "seed": None, "ran": None,
            "exercises": [_row(i, NOT_RUN, why) for n in numbers for i in _exercises(n)],
            "predictions": [{"prediction": p, "status": NOT_RUN, "message": why, "answer": None, "measured": None}
                            for n in numbers for p in _predictions(n)]}


def _function_name(exercise_id: str) -> str:
    """The name the notebook gives the exercise's function (``to_heads`` for ``03.split_heads``)."""
    from workbench.lessons import exercises as ex

    return ex.get(exercise_id).function_name


def grade_class(class_dir: str | Path, options: GradeOptions | None = None,
                hide: Sequence[str | Path] = ()) -> dict[str, Any]:
    """Grade every student of ``class_dir`` (:func:`class_folders`); see the module docstring.

    Args:
        class_dir: a folder of student folders, or one student's folder of notebooks.
        options: mode, seeds, time-out, limits, parallel jobs, notebooks.
        hide: more folders the students' code must not see (the class folder always is hidden).

    Returns:
        The gradebook: ``{"meta": {...}, "records": [grade_notebook(...) for each student and notebook]}``.
    """
    from workbench.tools.provenance import git_state, utc_now

    opts = options or GradeOptions()
    students = class_folders(class_dir)
    graded = {e.split(".", 1)[0] for e in _all_exercises()} | {p.split(".", 1)[0] for p in _all_predictions()}
    tasks, extra = _one_notebook_per_lesson([(s, folder, n) for s, folder in students for n in notebook_names(folder)
                                             if n[:2] in graded and (not opts.only or n[:2] in opts.only)])
    if not tasks:
        raise NotebookParameterError(f"no notebook with exercises in {class_dir}"
                                     + (f" among {list(opts.only)}" if opts.only else ""))
    hidden = [Path(class_dir).expanduser().resolve(), *(Path(h).expanduser().resolve() for h in hide),
              *_master_folders()]  # the masters hold the solutions: a student's code must not read them
    iso = sandbox.probe()
    lock = threading.Lock()
    records: list[dict[str, Any]] = []
    tmp = Path(tempfile.mkdtemp(prefix="workbench-grade-"))
    try:
        def one(task: tuple[str, Path, str]) -> None:
            try:
                record = grade_notebook(*task, opts, tmp, hidden)
            except Exception as exc:  # noqa: BLE001 (one notebook's trouble must not lose the class's grades)
                record = _ungraded(*task, f"the grader could not grade it ({type(exc).__name__}: {str(exc)[:160]})")
            with lock:
                records.append(record)

        with ThreadPoolExecutor(max_workers=opts.jobs) as pool:
            list(pool.map(one, tasks))
    finally:
        sandbox.remove_tree(tmp)  # whatever a run left there, however deep
    records += extra
    student_order = {s: i for i, (s, _) in enumerate(students)}
    records.sort(key=lambda r: (student_order[r["student"]], r["notebook"]))
    meta = {"mode": opts.mode, "smoke": opts.smoke if opts.mode == "full" else None,
            "seed": "per student (sha256 of the id)" if opts.seed == "student" else opts.seed,
            "timeout_s": opts.timeout, "limits": dataclasses.asdict(opts.limits), "isolation": dataclasses.asdict(iso),
            "isolation_text": iso.describe(), **git_state(), "graded_utc": utc_now(), "students": len(students)}
    return {"meta": meta, "records": records}


def _master_folders() -> list[Path]:
    """The folders that hold the master notebooks (the source checkout's and the copy inside the package)."""
    from workbench.tools.book.notebooks import notebooks_dir, packaged_notebooks_dir

    return sorted({p.resolve() for p in (notebooks_dir(), packaged_notebooks_dir()) if p.is_dir()})


def _all_exercises() -> list[str]:
    from workbench.lessons import exercises as ex

    return list(ex.EXERCISES)


def _all_predictions() -> list[str]:
    from workbench.lessons import exercises as ex

    return list(ex.PREDICTIONS)
