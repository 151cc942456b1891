"""The grader's worker: the only place where a student's code runs, always inside :mod:`workbench.tools.grading.sandbox`.

``python -m workbench.tools.grading.worker JOB.json`` reads its job (written by :mod:`workbench.tools.grading.grader`) and

* ``"mode": "checks"``: for each exercise, a child process of its own (forked before any student code runs)
  closes the worker's channel to the grader, makes the package's answer to that exercise unavailable for its whole
  life, executes the student's extracted definitions (imports, functions, classes, literal constants; nothing else)
  statement by statement in a fresh namespace, calls :func:`workbench.lessons.exercises.observe` on the exercise's
  function and leaves what it observed (plain data for ``torch.load(weights_only=True)``) in ``child-K.pt``; once
  that child has ended (and whatever it started), the worker reads that file, and only that one, and sends the
  observation to the grader over the channel, plus ``exec.json`` (the statements that raised, for the hints);
* ``"mode": "notebook"``: runs the student's notebook with papermill and sends its status, error and seconds over
  the channel, so the gradebook can say whether it runs.

The channel (``job["channel_fd"]``, a pipe the grader reads) is the only way a result reaches the grader: no file a
student's process could write is read as one. The worker makes itself non-dumpable, so a process of the same user id
can neither open the channel through ``/proc`` nor trace the worker; it can only kill it, which loses its own
exercise's result and nothing else.
Nothing it writes decides a grade: the grader judges the observations with its own reference in its own process.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

CHILD_BYTES = 64 * 2**20  # a child's observation larger than this is not loaded (the grader's own cap)
FRAME_MAGIC = b"WBO1"  # each message on the channel: magic, index (4 bytes), length (8 bytes), then the payload
RUN_INDEX = 2**32 - 1  # the index of the notebook mode's one message


def send(fd: int, index: int, payload: bytes) -> None:
    """One framed message on the channel (see :func:`read_frames`)."""
    data = FRAME_MAGIC + index.to_bytes(4, "big") + len(payload).to_bytes(8, "big") + payload
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def read_frames(data: bytes | bytearray, limit: int) -> tuple[dict[int, bytes], str | None]:
    """The complete messages in ``data`` by index, and what was wrong with the rest (None: nothing, or only an
    unfinished last message, as when the worker was stopped while it wrote)."""
    frames: dict[int, bytes] = {}
    at = 0
    while len(data) - at >= 16:
        if data[at:at + 4] != FRAME_MAGIC:
            return frames, "the channel held something that is not a message"
        index, size = int.from_bytes(data[at + 4:at + 8], "big"), int.from_bytes(data[at + 8:at + 16], "big")
        if size > limit:
            return frames, f"a message of {size} bytes (over {limit})"
        if len(data) - at - 16 < size:
            break
        frames[index] = bytes(data[at + 16:at + 16 + size])
        at += 16 + size
    return frames, None


def _not_dumpable() -> None:
    """PR_SET_DUMPABLE 0: processes of the same user id (the student's) cannot open /proc/PID/fd of this one or
    trace it (Linux; elsewhere nothing changes)."""
    if sys.platform != "linux":
        return
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def run_checks(job: dict[str, Any], folder: Path) -> None:
    """Observe each exercise in a child process of its own, forked before any student code runs here.

    This process never executes the student's code: it forks one child per exercise, and judges each child's
    observation (plain data) only to choose, as the lessons do, whether later exercises run with the package's
    function under that name. A child makes the package's answer to *its* exercise unavailable (it raises) for its
    whole life, before it executes the student's definitions: so code that runs at definition time, or a function
    that patches the recorder (``observe``, ``plain``, ``torch.save``), does not find the answer by its name. Code
    that digs further can still reach it (the objects the unavailability keeps, found through ``gc``; a second copy
    of the package's module loaded from its file; torch's own kernels): a forged observation then passes, because
    the judge compares values. What the check proves is that the values are right, not who computed them; the
    course's solutions policy (the book's Teaching page) says so.
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # no OpenMP worker threads in this process: forking stays safe
    try:
        _fork_per_exercise(job, folder, threads)
    finally:
        torch.set_num_threads(threads)


def _fork_per_exercise(job: dict[str, Any], folder: Path, threads: int) -> None:
    import io

    import torch

    from workbench.lessons import exercises as ex

    channel = int(job["channel_fd"])
    failed: list[str] = []
    if not job["exercises"]:
        _write_no_link(folder / "exec.json", b"[]")
    for k, exercise_id in enumerate(job["exercises"]):
        _clear_handoffs(folder)  # nothing an earlier child left can pass for this child's observation
        child = os.fork()
        if child == 0:  # the child: observe one exercise, write child-K.pt, never return
            code = 1
            try:
                os.close(channel)  # before any student code: the child cannot speak to the grader
                signal.signal(signal.SIGINT, signal.default_int_handler)  # as in any Python process
                torch.set_num_threads(threads)
                _observe_one(job, folder, k, exercise_id, failed)
                code = 0
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(child, 0)
        if job.get("own_pid_namespace"):
            _end_leftovers()  # what the child started (a process that could outlive it) ends with it
        observation = _child_observation(folder, k, exercise_id, job["seed"], status, torch)
        buffer = io.BytesIO()
        torch.save(observation, buffer)
        send(channel, k, buffer.getvalue())  # this process's own copy, read from the child that observed it
        try:
            passed = ex.judge(exercise_id, observation, seed=job["seed"], n_draws=ex.N_DRAWS).status == ex.PASSED
        except Exception:  # noqa: BLE001 (not this exercise's observation: the grader says so; here it only failed)
            passed = False
        if not passed:
            failed.append(exercise_id)
    _clear_handoffs(folder)


def _end_leftovers() -> None:
    """Kill every other process of the sandbox's PID namespace and reap them (the worker is its PID 1 there, so this
    reaches the sandbox's processes only: never call it outside the namespace)."""
    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:
        pass
    while True:
        try:
            pid, _ = os.waitpid(-1, 0)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _ended(status: int) -> str:
    """How a child ended, in words, from its ``waitpid`` status."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        hint = " (the memory or CPU limit?)" if sig in (signal.SIGKILL, signal.SIGXCPU, signal.SIGSEGV) else ""
        return f"was killed by {name}{hint} before recording what the function did"
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else status
    return (f"ended with exit status {code} before recording what the function did (does it call sys.exit or "
            "os._exit?)")


def _child_observation(folder: Path, k: int, exercise_id: str, seed: int, status: int, torch: Any) -> dict[str, Any]:
    """The observation child ``k`` handed over, or one saying why there is none (it crashed, was killed, left, or
    wrote something too large or not plain data): every exercise gets an observation, so one crash fails only its own
    exercise and the grader names why."""
    import io
    import stat

    path = folder / f"child-{k}.pt"
    why = None
    try:  # the child's file may be anything: a link (not followed), a named pipe (not waited on), unreadable
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        fd = None
        why = _ended(status)
    if fd is not None:
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                why = _ended(status)
            elif info.st_size > CHILD_BYTES:
                why = f"recorded an observation over {CHILD_BYTES // 2**20} MB (outputs far larger than the reference's?)"
            else:
                try:
                    return torch.load(io.BytesIO(f.read(CHILD_BYTES + 1)), weights_only=True)
                except Exception as exc:  # noqa: BLE001 (the child's file: it may hold anything)
                    why = f"recorded an observation that is not plain data ({type(exc).__name__})"
    from workbench.lessons.exercises.core import N_DRAWS

    return {"exercise": exercise_id, "seed": int(seed), "n_draws": N_DRAWS, "cases": [],
            "stopped": {"kind": "process ended", "text": why, "case": ""}}


def _write_no_link(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` unless something the run made is there: a link, a named pipe (writing would wait
    for a reader for ever)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
    except OSError:
        return
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _clear_handoffs(folder: Path) -> None:
    """Remove every ``child-*`` entry: a child can reach the answers of other exercises than its own, and could have
    written a later exercise's file."""
    for stray in folder.glob("child-*"):
        try:
            if stray.is_dir() and not stray.is_symlink():
                stray.chmod(0o700)  # a folder the child made unreadable is removed all the same
                shutil.rmtree(stray, ignore_errors=True)
            else:
                stray.unlink(missing_ok=True)
        except (OSError, RecursionError):
            os.rename(stray, folder / f".stray-{os.getpid()}-{id(stray)}")  # out of the way of the next child


def _observe_one(job: dict[str, Any], folder: Path, k: int, exercise_id: str, failed: list[str]) -> None:
    import torch

    from workbench.lessons import exercises as ex
    from workbench.lessons.exercises.calling import _package_answer_unavailable

    exercise = ex.get(exercise_id)
    # the inputs are drawn before the answer is made unavailable (a few draws use the package's helpers), and the
    # observation reuses them
    cases = exercise.all_cases(job["seed"], ex.N_DRAWS)
    object.__setattr__(exercise, "all_cases", lambda *_a, **_k: cases)
    fallbacks = {ex.get(j).function_name: ex.get(j).reference for j in failed}
    pid = os.getpid()
    with _package_answer_unavailable(exercise, lambda: None):  # for the rest of this child's life
        namespace: dict[str, Any] = {"__name__": "__student__", "__builtins__": __builtins__}
        errors = []
        for statement in job["statements"]:
            try:
                exec(compile(statement["code"], statement["where"], "exec"), namespace)  # noqa: S102 (sandboxed)
            except BaseException as exc:  # noqa: BLE001 (a definition may raise anything, even SystemExit)
                text = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
                errors.append(f"{statement['where']}: {type(exc).__name__}: {text}")
        if k == 0:
            _write_no_link(folder / "exec.json", json.dumps(errors).encode())
        # as the lessons do: after a failed exercise, the later ones run with the package's function under its name
        namespace.update(fallbacks)
        observation = ex.observe(exercise_id, namespace.get(exercise.function_name), seed=job["seed"],
                                 time_limit=job["time_limit"])
        if os.getpid() != pid:  # a child forked by the student's function: it writes nothing
            os._exit(0)
        torch.save(observation, folder / f"child-{k}.tmp")
        os.replace(folder / f"child-{k}.tmp", folder / f"child-{k}.pt")


def run_notebook(job: dict[str, Any], folder: Path) -> None:
    from workbench.tools.book.runner import run_notebook as execute

    channel = int(job["channel_fd"])
    os.set_inheritable(channel, False)  # the kernel and whatever it starts never hold it
    result = execute(folder / job["notebook"], folder / "run", smoke=job["smoke"], html_report=False, threads=1,
                     quiet=True)
    send(channel, RUN_INDEX, json.dumps({k: result.get(k) for k in ("status", "error", "seconds")}).encode())


def main(argv: list[str] | None = None) -> int:
    path = Path((argv if argv is not None else sys.argv[1:])[0])
    job = json.loads(path.read_text())
    _not_dumpable()
    if job.get("own_pid_namespace"):
        # the PID namespace's first process: a signal it leaves at its default action is not delivered from inside
        # the namespace, so a student's process cannot stop it (the grader's time-out still can, from outside)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
                    signal.SIGALRM):
            signal.signal(sig, signal.SIG_DFL)
    {"checks": run_checks, "notebook": run_notebook}[job["mode"]](job, path.parent)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # threads the student's code left running do not keep the worker alive
