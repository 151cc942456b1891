"""The machinery of the exercises: an :class:`Exercise` (the package's function, the inputs it is tried on and a
catalogue of planted :class:`Mistake` s), :func:`check` (runs a student's function on every input and says in one
or two lines what is wrong) and :func:`predict` (compares a written prediction with the measured value).

A check never raises: a stub that raises ``NotImplementedError`` is "not attempted", any other exception, a NaN,
a wrong shape, dtype or device, or a run past :data:`TIME_LIMIT` seconds is "failed" with a one-line reason, and
:attr:`CheckResult.function` is the package's function unless the student's passed, so the cells after an
unfinished exercise keep working.

A wrong answer is first compared with every mistake of the exercise's catalogue (each a real wrong implementation,
run on the same inputs): when one gives the student's outputs on every input, the check names it and says how to
fix it. Otherwise it reports the first difference: shapes (both printed), dtype, device, NaN, or the largest
difference and where.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

TIME_LIMIT = 10.0  # seconds allowed to the student's function over all the inputs of one check

PASSED, NOT_ATTEMPTED, FAILED = "passed", "not attempted", "failed"


@dataclass(frozen=True)
class Case:
    """One input of a check: a short name shown in the report (``"batch 1"``, ``"fully masked row"``) and the
    positional arguments."""

    name: str
    args: tuple


@dataclass(frozen=True)
class Mistake:
    """A planted mistake: a real wrong implementation, recognised by name when a student's outputs equal its own."""

    name: str  # short and recognisable: "forgot to divide by sqrt(d_k)"
    hint: str  # one line: what it does wrong and how to fix it
    fn: Callable[..., Any]


@dataclass(frozen=True)
class Exercise:
    """An exercise of the series: the function the student writes, checked against ``reference``.

    ``cases`` builds the inputs (seeded: the same every call); ``mistakes`` is the catalogue recognised by name.
    """

    id: str  # "NN.function_name": the notebook number and the function the student writes
    title: str  # one line: what the function computes
    reference: Callable[..., Any]  # the package's function (or the lesson's own where the package has none)
    cases: Callable[[], list[Case]]
    mistakes: tuple[Mistake, ...] = ()
    driver: Callable[..., Any] | None = None  # driver(fn, *args) runs fn (e.g. step by step); None: fn(*args)
    atol: float = 1e-5
    rtol: float = 1e-4

    @property
    def notebook(self) -> str:
        return self.id.split(".", 1)[0]


def variants(wrong: Callable[..., Any], *rows: tuple[str, str, dict[str, Any]]) -> tuple[Mistake, ...]:
    """Planted mistakes that are one wrong implementation with different settings: each row ``(name, hint,
    settings)`` becomes ``Mistake(name, hint, wrong(*args, **settings))``, so a catalogue reads as a table of what
    each mistake changes.

    Raises:
        ValueError: a row with no settings (it would plant ``wrong`` as it is, which must be the right answer).
    """
    for name, _, settings in rows:
        if not settings:
            raise ValueError(f"planted mistake {name!r} changes no setting of {wrong.__name__}: name what it changes")
    return tuple(Mistake(name, hint, functools.partial(wrong, **settings)) for name, hint, settings in rows)


EXERCISES: dict[str, Exercise] = {}  # every exercise of the series, by id, in notebook order


def register(exercise: Exercise) -> Exercise:
    """Add ``exercise`` to :data:`EXERCISES` (ids are unique)."""
    if exercise.id in EXERCISES:
        raise ValueError(f"exercise {exercise.id!r} is registered twice: give each exercise its own id")
    names = [m.name for m in exercise.mistakes]
    if len(set(names)) != len(names):
        raise ValueError(f"exercise {exercise.id!r} has two planted mistakes of the same name: {sorted(names)}")
    EXERCISES[exercise.id] = exercise
    return exercise


def get(exercise_id: str) -> Exercise:
    """The exercise named ``exercise_id`` (e.g. ``"02.attention_weights"``)."""
    try:
        return EXERCISES[exercise_id]
    except KeyError:
        known = ", ".join(EXERCISES)
        raise KeyError(f"no exercise {exercise_id!r}: the exercises are {known}") from None


def exercises_of(notebook: str) -> list[Exercise]:
    """The exercises of notebook ``"NN"``, in order."""
    return [e for e in EXERCISES.values() if e.notebook == notebook]


# -- comparing outputs -------------------------------------------------------------------------------------------
def _describe(x: Any) -> str:
    if isinstance(x, Tensor):
        return f"a tensor of shape {tuple(x.shape)}"
    if isinstance(x, (tuple, list)):
        return f"a {type(x).__name__} of {len(x)} items"
    if isinstance(x, dict):
        return f"a dict with keys {sorted(x)}"
    return f"a {type(x).__name__} ({x!r:.40})"


def _where(path: str) -> str:
    return f" (in {path})" if path else ""


def difference(got: Any, want: Any, atol: float = 1e-5, rtol: float = 1e-4, path: str = "") -> str | None:
    """None when ``got`` equals ``want`` (tensors within tolerance, NaN where NaN), else a one-line description of
    the first difference: structure, shape, dtype, device, NaN, or the largest difference and where."""
    if isinstance(want, Tensor):
        if not isinstance(got, Tensor):
            return f"returned {_describe(got)}, expected a tensor of shape {tuple(want.shape)}{_where(path)}"
        if got.shape != want.shape:
            return f"shape {tuple(got.shape)}, expected {tuple(want.shape)}{_where(path)}"
        if got.dtype != want.dtype:
            return f"dtype {got.dtype}, expected {want.dtype}{_where(path)}"
        if got.device != want.device:
            return f"device {got.device}, expected {want.device}{_where(path)}"
        if not want.dtype.is_floating_point:
            if torch.equal(got, want):
                return None
            idx = tuple(int(i) for i in (got != want).nonzero()[0])
            return (f"{int((got != want).sum())} of {want.numel()} entries differ, first at {idx}: yours "
                    f"{got[idx].item()!r}, expected {want[idx].item()!r}{_where(path)}")
        g, w = got.detach().double(), want.detach().double()
        bad_nan = torch.isnan(g) & ~torch.isnan(w)
        if bool(bad_nan.any()):
            idx = tuple(int(i) for i in bad_nan.nonzero()[0])
            return f"NaN at {idx} where the expected value is {w[idx].item():.4g}{_where(path)}"
        if torch.allclose(g, w, atol=atol, rtol=rtol, equal_nan=True):
            return None
        err = (g - w).abs().nan_to_num(nan=math.inf)
        idx = tuple(int(i) for i in divmod_index(int(err.argmax()), tuple(w.shape)))
        return (f"largest difference {err[idx].item():.3g} at index {idx}: yours {g[idx].item():.4g}, "
                f"expected {w[idx].item():.4g}{_where(path)}")
    if isinstance(want, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(want):
            return f"returned {_describe(got)}, expected {_describe(want)}{_where(path)}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            d = difference(g, w, atol, rtol, f"{path}[{i}]")
            if d:
                return d
        return None
    if isinstance(want, dict):
        if not isinstance(got, dict) or set(got) != set(want):
            return f"returned {_describe(got)}, expected {_describe(want)}{_where(path)}"
        for k in want:
            d = difference(got[k], want[k], atol, rtol, f"{path}[{k!r}]")
            if d:
                return d
        return None
    if isinstance(want, float) or (isinstance(want, int) and not isinstance(want, bool)):
        if isinstance(got, Tensor) and got.numel() == 1:
            got = got.item()
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            return f"returned {_describe(got)}, expected a number ({want:.4g}){_where(path)}"
        if math.isnan(got) and not math.isnan(want):
            return f"NaN where the expected value is {want:.4g}{_where(path)}"
        if math.isclose(got, want, rel_tol=rtol, abs_tol=atol):
            return None
        return f"{got:.6g}, expected {want:.6g} (difference {abs(got - want):.3g}){_where(path)}"
    if got != want:
        return f"{got!r:.60}, expected {want!r:.60}{_where(path)}"
    return None


def divmod_index(flat: int, shape: tuple[int, ...]) -> list[int]:
    """The multi-index of position ``flat`` in a row-major tensor of ``shape``."""
    idx = []
    for size in reversed(shape):
        flat, r = divmod(flat, size)
        idx.append(r)
    return list(reversed(idx))


# -- running the student's function ------------------------------------------------------------------------------
class _TimeLimit(Exception):
    pass


def _fresh(args: tuple) -> tuple:
    """A deep copy of the inputs, so that a function that changes its arguments in place spoils nothing."""
    return copy.deepcopy(args)


def _call_with_limit(fn: Callable[..., Any], args: tuple, seconds: float) -> Any:
    """``fn(*args)``, interrupted after ``seconds`` where an alarm signal can be used (the main thread on Unix)."""
    if seconds <= 0:
        raise _TimeLimit
    use_alarm = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not use_alarm:
        return fn(*args)

    def on_alarm(_signum: int, _frame: Any) -> None:
        raise _TimeLimit

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn(*args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _run(ex: Exercise, fn: Callable[..., Any], args: tuple) -> Any:
    """``fn`` on ``args`` as the exercise calls it (through its driver, if any)."""
    return ex.driver(fn, *args) if ex.driver is not None else fn(*args)


def _outputs(ex: Exercise, fn: Callable[..., Any], cases: Sequence[Case]) -> list[Any] | None:
    """``fn`` on every case, or None when it raises on one (for the planted mistakes)."""
    out = []
    for case in cases:
        try:
            with torch.no_grad():
                out.append(_run(ex, fn, _fresh(case.args)))
        except Exception:
            return None
    return out


@dataclass
class CheckResult:
    """What :func:`check` found. ``function`` is the student's function when it passed, else the package's, so the
    lesson's next cells can always use it."""

    exercise: str
    status: str  # "passed", "not attempted" or "failed"
    message: str  # one or two lines for the student
    function: Callable[..., Any] = field(repr=False)
    mistake: str | None = None  # the planted mistake recognised, if any

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def to_dict(self) -> dict[str, Any]:
        return {"exercise": self.exercise, "status": self.status, "message": self.message, "mistake": self.mistake}

    def __repr__(self) -> str:
        mark = {PASSED: "✔", NOT_ATTEMPTED: "…", FAILED: "✘"}[self.status]
        return f"{mark} exercise {self.exercise}: {self.status}. {self.message}"


RESULTS: dict[str, Any] = {}  # the checks and predictions of this session (kernel), by id, latest wins


def check(exercise_id: str, fn: Callable[..., Any], time_limit: float = TIME_LIMIT) -> CheckResult:
    """Run the student's ``fn`` against the package's function on every input of the exercise.

    Never raises. The result is also recorded in :data:`RESULTS` (see :func:`summary`).
    """
    ex = get(exercise_id)
    with _rng_kept():
        result = _check(ex, fn, time_limit)
    RESULTS[exercise_id] = result
    return result


@contextlib.contextmanager
def _rng_kept() -> Iterator[None]:
    """Leave the lesson's random streams (torch, numpy, random) as they were, whatever the check draws: a lesson's
    numbers do not depend on whether an exercise passed."""
    py, np_state = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        try:
            yield
        finally:
            random.setstate(py)
            np.random.set_state(np_state)


def _check(ex: Exercise, fn: Callable[..., Any], time_limit: float) -> CheckResult:
    def failed(message: str, mistake: str | None = None) -> CheckResult:
        return CheckResult(ex.id, FAILED, message, ex.reference, mistake)

    if not callable(fn):
        return failed(f"{fn!r:.40} is not a function: pass the function itself (without calling it)")
    cases = ex.cases()
    wants = [_run(ex, ex.reference, _fresh(c.args)) for c in cases]
    gots = []
    start = time.perf_counter()
    for case in cases:
        remaining = time_limit - (time.perf_counter() - start)
        try:
            with torch.no_grad():
                gots.append(_call_with_limit(lambda *a: _run(ex, fn, a), _fresh(case.args), remaining))
        except NotImplementedError:
            return CheckResult(ex.id, NOT_ATTEMPTED, "the stub still raises NotImplementedError: write the function, "
                               "then run this cell again (the lesson goes on with the package's function)",
                               ex.reference)
        except _TimeLimit:
            return failed(f"ran past the time limit of {time_limit:.0f} s (on input '{case.name}'): look for a loop "
                          "over elements that a tensor operation could do")
        except Exception as exc:  # the student's code may raise anything: report it in one line
            text = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
            return failed(f"raised {type(exc).__name__}: {text} (on input '{case.name}')")
        if time.perf_counter() - start > time_limit:
            return failed(f"ran past the time limit of {time_limit:.0f} s (on input '{case.name}')")
    problems = [(c, difference(g, w, ex.atol, ex.rtol)) for c, g, w in zip(cases, gots, wants, strict=True)]
    problems = [(c, d) for c, d in problems if d]
    if not problems:
        return CheckResult(ex.id, PASSED, "matches the package on every input "
                           f"({'; '.join(c.name for c in cases)})", fn)
    for mistake in ex.mistakes:
        outs = _outputs(ex, mistake.fn, cases)
        if outs is not None and all(difference(g, o, ex.atol, ex.rtol) is None
                                    for g, o in zip(gots, outs, strict=True)):
            return failed(f"looks like '{mistake.name}': {mistake.hint}", mistake.name)
    case, problem = problems[0]
    return failed(f"on input '{case.name}': {problem}")


def recognised(exercise_id: str, mistake_name: str) -> CheckResult:
    """Check the planted mistake ``mistake_name`` as if a student had written it (what the tests do for each one)."""
    ex = get(exercise_id)
    mistake = next((m for m in ex.mistakes if m.name == mistake_name), None)
    if mistake is None:
        raise KeyError(f"exercise {exercise_id!r} has no planted mistake {mistake_name!r}: "
                       f"it has {[m.name for m in ex.mistakes]}")
    with _rng_kept():
        return _check(ex, mistake.fn, TIME_LIMIT)


# -- predictions ---------------------------------------------------------------------------------------------------
@dataclass
class PredictionResult:
    """A written prediction compared with what the lesson measured."""

    prompt: str
    status: str  # "no prediction", "right" or "off"
    message: str
    answer: Any = None
    measured: Any = None

    def to_dict(self) -> dict[str, Any]:
        measured = self.measured if isinstance(self.measured, (bool, int, float, str)) else repr(self.measured)
        answer = self.answer if isinstance(self.answer, (bool, int, float, str)) or self.answer is None else repr(self.answer)
        return {"prediction": self.prompt, "status": self.status, "message": self.message, "answer": answer,
                "measured": measured}

    def __repr__(self) -> str:
        mark = {"right": "✔", "off": "✘", "no prediction": "…"}[self.status]
        return f"{mark} prediction {self.prompt}: {self.message}"


def predict(prompt_id: str, answer: Any, measured: Any, explanation: str, rel_tol: float = 0.25) -> PredictionResult:
    """Compare the student's ``answer`` (None: nothing written) with ``measured`` and explain.

    Numbers are right within ``rel_tol`` (relative); anything else must be equal. Never raises.
    """
    if answer is None:
        result = PredictionResult(prompt_id, "no prediction",
                                  f"no prediction written; measured {_show(measured)}. {explanation}", None, measured)
    else:
        numeric = (isinstance(answer, (int, float)) and not isinstance(answer, bool)
                   and isinstance(measured, (int, float)) and not isinstance(measured, bool))
        right = math.isclose(answer, measured, rel_tol=rel_tol, abs_tol=1e-12) if numeric else answer == measured
        status = "right" if right else "off"
        verdict = "right" if right else "not what happened"
        result = PredictionResult(prompt_id, status, f"you predicted {_show(answer)}, measured {_show(measured)}: "
                                  f"{verdict}. {explanation}", answer, measured)
    RESULTS[f"predict:{prompt_id}"] = result
    return result


def _show(x: Any) -> str:
    return f"{x:.4g}" if isinstance(x, float) else repr(x)


def summary() -> dict[str, list[dict[str, Any]]]:
    """The session's checks and predictions as plain data, for a notebook's ``metrics.json``:
    ``{"exercises": [...], "predictions": [...]}``."""
    return {"exercises": [r.to_dict() for r in RESULTS.values() if isinstance(r, CheckResult)],
            "predictions": [r.to_dict() for r in RESULTS.values() if isinstance(r, PredictionResult)]}
