"""The machinery of the exercises: an :class:`Exercise` (the package's function, the inputs it is tried on, the
properties a right answer has and a catalogue of planted :class:`Mistake` s), :func:`check` (runs a student's
function and says in one line per property what holds and what does not) and :func:`predict` (compares a written
prediction with the measured value, by the rule registered for it in :data:`PREDICTIONS`).

A check is two halves, so that a grader can keep them in two processes:

* :func:`observe` runs the student's function in the current process on every input (the exercise's fixed cases
  and cases drawn at random from a seed, hypothesis-style) and records plain data only: the outputs, the inputs as
  they were left after the call, the gradients with respect to the inputs (for a differentiable exercise), or the
  error. While the student's function runs, the package's own answer is made unavailable: calling it is an error.
* :func:`judge` decides, in a process the student's code never ran in: it recomputes the package's answers and
  tests each property (values on every input; inputs unchanged; gradients that flow where the reference's flow,
  and equal them; the objects the function fills, e.g. a cache, after every call; its own work).

:func:`check` is ``judge(observe(...))`` in one process: what the lessons call (formative feedback). It never
raises: a stub that raises ``NotImplementedError`` is "not attempted", any other exception, a NaN, a wrong shape,
dtype or device, or a run past :data:`TIME_LIMIT` seconds is "failed" with one line saying why, and
:attr:`CheckResult.function` is the package's function unless the student's passed, so the cells after an
unfinished exercise keep working.

A wrong value is first compared with every mistake of the exercise's catalogue (each a real wrong implementation,
run on the same inputs): when one gives the student's outputs on every input, the check names it and says how to
fix it. Otherwise it names the first invariant of a right answer that the output breaks (rows that do not sum to
1, a masked weight that is not 0, no eos within the budget ...) and shows both outputs on the smallest input where
they differ.
"""

from __future__ import annotations

import contextlib
import functools
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from workbench.lessons.exercises.calling import (
    PackageAnswerCalled,
    _all_on_cpu,
    _arg_names,
    _argument,
    _call_with_limit,
    _fresh,
    _grad_label,
    _package_answer_unavailable,
    _requires_grad,
    _rng_kept,
    _run,
    _TimeLimit,
    gradients,
)
from workbench.lessons.exercises.compare import OPAQUE, _show_value, _size, difference, plain
from workbench.lessons.exercises.renumbered import current_id

TIME_LIMIT = 10.0  # seconds allowed to the student's function over all the inputs of one check
N_DRAWS = 4  # random cases drawn per check, beside the fixed ones

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
class Invariant:
    """A property every right answer has, named in the feedback when a wrong answer breaks it.

    ``test(args, output)`` returns None when the property holds on that input, else one line saying where it breaks
    (``"row (0, 2) sums to 0.73"``). It may assume nothing of the output: it must not raise on a wrong type or shape
    (return None then: shapes are reported separately).
    """

    name: str  # "every row of weights sums to 1"
    test: Callable[[tuple, Any], str | None]


@dataclass(frozen=True)
class Exercise:
    """An exercise of the series: the function the student writes, checked against ``reference``.

    ``cases`` builds the fixed inputs (seeded: the same every call), ``draw`` one more input from a random generator
    (other shapes, batch sizes, dtypes); ``mistakes`` is the catalogue recognised by name; ``invariants`` name what
    a wrong output breaks.
    """

    id: str  # "NN.function_name": the notebook number and the function the student writes
    title: str  # one line: what the function computes
    reference: Callable[..., Any]  # the package's function (or the lesson's own where the package has none)
    cases: Callable[[], list[Case]]
    mistakes: tuple[Mistake, ...] = ()
    driver: Callable[..., Any] | None = None  # driver(fn, *args) runs fn (e.g. step by step); None: fn(*args)
    atol: float = 1e-5
    rtol: float = 1e-4
    # float64 tensors are judged to these: atol/rtol excuse float32 rounding, and an answer that computes a float64
    # input in float32 and casts back is off by about 1e-7 (an exercise with cancellation in float64 sets its own)
    atol_float64: float = 1e-9
    rtol_float64: float = 1e-9
    draw: Callable[[random.Random], Case] | None = None  # one random input (shapes, sizes, dtypes) from a generator
    differentiable: bool = False  # gradients w.r.t. the floating-point inputs must flow and equal the reference's
    package: tuple[str, ...] = ()  # dotted names of the package's answer, unavailable while the student's fn runs
    invariants: tuple[Invariant, ...] = ()  # properties of every right output, named when a wrong one breaks them
    fills: tuple[str, ...] = ()  # keys of the driver's output that record an object the function fills (a cache)
    name: str = ""  # the function's name in the notebook, where it is not the id's ("to_heads" for 03.split_heads)

    @property
    def notebook(self) -> str:
        return self.id.split(".", 1)[0]

    @property
    def function_name(self) -> str:
        """The name of the function the student writes in the notebook (``name``, else the id after the number)."""
        return self.name or self.id.split(".", 1)[1]

    def all_cases(self, seed: int = 0, n_draws: int = N_DRAWS) -> list[Case]:
        """The fixed cases, then ``n_draws`` drawn from ``seed`` (the same for the same exercise and seed)."""
        fixed = self.cases()
        if self.draw is None or n_draws <= 0:
            return fixed
        rng = random.Random(f"{self.id}:{seed}")
        drawn = []
        for i in range(n_draws):
            case = self.draw(rng)
            drawn.append(Case(f"drawn {i + 1} (seed {seed}): {case.name}", case.args))
        return fixed + drawn


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
    """The exercise named ``exercise_id`` (e.g. ``"02.attention_weights"``); an id from before the lessons were
    renumbered gives the exercise under its new id, with a FutureWarning (:mod:`.renumbered`)."""
    try:
        return EXERCISES[current_id(exercise_id, EXERCISES)]
    except KeyError:
        known = ", ".join(EXERCISES)
        raise KeyError(f"no exercise {exercise_id!r}: the exercises are {known}") from None


def exercises_of(notebook: str) -> list[Exercise]:
    """The exercises of notebook ``"NN"``, in order."""
    return [e for e in EXERCISES.values() if e.notebook == notebook]


def observe(exercise_id: str, fn: Callable[..., Any], seed: int = 0, time_limit: float = TIME_LIMIT,
            n_draws: int = N_DRAWS, own_work: bool = True) -> dict[str, Any]:
    """Run the student's ``fn`` on every input of the exercise in this process and record what happened, as plain
    data (see :func:`plain`): ``{"exercise", "seed", "cases": [{"name", "output" | "error", "inputs_after",
    "grads"}], "stopped": None | {"kind", "text", "case"}}``.

    The package's answer is unavailable while ``fn`` runs (``own_work=False`` leaves it available: for the
    planted mistakes, which may use the package's helpers). Never raises (an error is recorded; the first one stops
    the run: the remaining cases are not tried).
    """
    ex = get(exercise_id)
    record: dict[str, Any] = {"exercise": exercise_id, "seed": int(seed), "n_draws": int(n_draws), "cases": [],
                              "stopped": None}
    if not callable(fn):
        record["stopped"] = {"kind": "not callable", "text": f"{fn!r:.40}", "case": ""}
        return record
    with _rng_kept():
        cases = ex.all_cases(seed, n_draws)
        start = time.perf_counter()
        for case in cases:
            remaining = time_limit - (time.perf_counter() - start)
            args = _fresh(case.args)
            entry: dict[str, Any] = {"name": case.name}
            try:
                with (_package_answer_unavailable(ex, fn) if own_work else contextlib.nullcontext()), \
                        torch.enable_grad():  # as in a notebook cell: an answer may take gradients itself
                    out = _call_with_limit(lambda *a: _run(ex, fn, a), args, remaining)
                entry["output"] = plain(out)
                entry["inputs_after"] = plain(args)
                entry["requires_grad_after"] = _requires_grad(args)
                if ex.differentiable and _all_on_cpu(out):  # a wrong device already fails: no backward on it
                    remaining = time_limit - (time.perf_counter() - start)
                    try:
                        with _package_answer_unavailable(ex, fn) if own_work else contextlib.nullcontext():
                            entry["grads"] = plain(_call_with_limit(lambda *a: gradients(ex, fn, a), case.args,
                                                                    remaining))
                    except Exception as exc:  # judged after the values and the inputs: see judge()
                        text = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
                        entry["grad_error"] = f"{type(exc).__name__}: {text}"
            except NotImplementedError:
                record["stopped"] = {"kind": "not implemented", "text": "", "case": case.name}
            except _TimeLimit:
                record["stopped"] = {"kind": "time limit", "text": f"{time_limit:.0f}", "case": case.name}
            except PackageAnswerCalled as exc:
                record["stopped"] = {"kind": "package answer", "text": exc.name, "case": case.name}
            except Exception as exc:  # the student's code may raise anything: record it in one line
                text = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
                record["stopped"] = {"kind": "exception", "text": f"{type(exc).__name__}: {text}", "case": case.name}
            record["cases"].append(entry)
            if record["stopped"] is not None:
                break
            if time.perf_counter() - start > time_limit:
                record["stopped"] = {"kind": "time limit", "text": f"{time_limit:.0f}", "case": case.name}
                break
    return record


def _outputs(ex: Exercise, fn: Callable[..., Any], cases: Sequence[Case]) -> list[Any] | None:
    """``fn`` on every case (as plain data), or None when it raises on one (for the planted mistakes)."""
    out = []
    for case in cases:
        try:
            with torch.enable_grad():  # the same mode as the student's answer runs in (observe)
                out.append(plain(_run(ex, fn, _fresh(case.args))))
        except Exception:
            return None
    return out


@dataclass
class Property:
    """One property a check tests, and what it found: ``held`` True, False, or None (not reached)."""

    name: str  # "values on 8 inputs (4 fixed, 4 drawn with seed 0)"
    held: bool | None
    detail: str = ""

    def line(self) -> str:
        mark = {True: "✔", False: "✘", None: "·"}[self.held]
        return f"  {mark} {self.name}" + (f": {self.detail}" if self.detail else "")


@dataclass
class CheckResult:
    """What :func:`check` found. ``function`` is the student's function when it passed, else the package's, so the
    lesson's next cells can always use it."""

    exercise: str
    status: str  # "passed", "not attempted" or "failed"
    message: str  # one line for the student: the first property that failed, or what passed
    function: Callable[..., Any] = field(repr=False)
    mistake: str | None = None  # the planted mistake recognised, if any
    properties: list[Property] = field(default_factory=list)  # one line each in the report
    seed: int = 0

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def to_dict(self) -> dict[str, Any]:
        return {"exercise": self.exercise, "status": self.status, "message": self.message, "mistake": self.mistake,
                "seed": self.seed,
                "properties": [{"name": p.name, "held": p.held, "detail": p.detail} for p in self.properties]}

    def __repr__(self) -> str:
        mark = {PASSED: "✔", NOT_ATTEMPTED: "…", FAILED: "✘"}[self.status]
        head = f"{mark} exercise {self.exercise}: {self.status}. {self.message}"
        return "\n".join([head, *(p.line() for p in self.properties)]) if self.properties else head


RESULTS: dict[str, Any] = {}  # the checks and predictions of this session (kernel), by id, latest wins


def check(exercise_id: str, fn: Callable[..., Any], time_limit: float = TIME_LIMIT, seed: int = 0) -> CheckResult:
    """Run the student's ``fn`` against the package's function on every input of the exercise and test every
    property (:func:`observe`, then :func:`judge`, in this process). ``seed`` chooses the drawn inputs.

    Never raises. The result is also recorded in :data:`RESULTS` (see :func:`summary`); ``result.function`` is
    ``fn`` when it passed, else the package's function.
    """
    exercise_id = current_id(exercise_id, EXERCISES)
    observation = observe(exercise_id, fn, seed=seed, time_limit=time_limit)
    result = judge(exercise_id, observation, seed=seed)
    if result.passed:
        result.function = fn
    RESULTS[exercise_id] = result
    return result


def _split(ex: Exercise, out: Any) -> tuple[Any, Any]:
    """(the output proper, the filled objects) of a driver's output, per :attr:`Exercise.fills`."""
    if ex.fills and isinstance(out, dict) and OPAQUE not in out:
        return ({k: v for k, v in out.items() if k not in ex.fills}, {k: out.get(k) for k in ex.fills})
    return out, None


def judge(exercise_id: str, observation: dict[str, Any], seed: int | None = None,
          n_draws: int | None = None) -> CheckResult:
    """Decide the check from an :func:`observation <observe>`: recompute the package's answers on the same inputs
    here and test every property. Run it in a process the student's code never ran in to trust the result.

    ``seed`` and ``n_draws`` must be those the observation was made with (None: the observation's own). A grader
    passes both itself: an observation written by a student's process could claim no drawn inputs at all, and then
    only the published fixed inputs would be judged. Never raises.
    """
    ex = get(exercise_id)
    try:
        with _rng_kept():
            return _judge(ex, observation, seed, n_draws)
    except Exception as exc:  # a malformed observation (e.g. from a grader's worker): one line, never a traceback
        return CheckResult(ex.id, FAILED, f"could not be judged: {type(exc).__name__}: {str(exc)[:160]}",
                           ex.reference)


def _judge(ex: Exercise, observation: dict[str, Any], seed: int | None, n_draws: int | None) -> CheckResult:
    if not isinstance(observation, dict) or observation.get("exercise") != ex.id:
        raise ValueError(f"the observation is not one of exercise {ex.id}")
    seed = int(observation.get("seed", 0)) if seed is None else int(seed)
    n_draws = int(observation.get("n_draws", N_DRAWS)) if n_draws is None else int(n_draws)
    cases = ex.all_cases(seed, n_draws)
    n_fixed = len(ex.cases())
    values_name = (f"values on {len(cases)} inputs ({n_fixed} fixed, {len(cases) - n_fixed} drawn with seed {seed})"
                   if len(cases) > n_fixed else f"values on {len(cases)} inputs")
    props: list[Property] = []

    def result(status: str, message: str, mistake: str | None = None) -> CheckResult:
        return CheckResult(ex.id, status, message, ex.reference, mistake, props, seed)

    stopped = observation.get("stopped")
    entries = observation.get("cases", [])
    if stopped is not None:
        kind, text, where = stopped.get("kind"), stopped.get("text", ""), stopped.get("case", "")
        if kind == "not implemented":
            return result(NOT_ATTEMPTED, "the stub still raises NotImplementedError: write the function, then run "
                          "this cell again (the lesson goes on with the package's function)")
        if kind == "not callable":
            return result(FAILED, f"{text} is not a function: pass the function itself (without calling it)")
        if kind == "package answer":
            props.append(Property("its own work", False, f"it called {text}"))
            return result(FAILED, f"calls the package's own answer ({text}) on input '{where}': write the "
                          "computation yourself (the check makes the package's answer unavailable while it runs)")
        if kind == "time limit":
            return result(FAILED, f"ran past the time limit of {text} s (on input '{where}'): look for a loop over "
                          "elements that a tensor operation could do")
        if kind == "process ended":  # the grader's process for this exercise (workbench.tools.grading.worker)
            return result(FAILED, f"stopped the check: its process {text}")
        return result(FAILED, f"raised {text} (on input '{where}')")
    if len(entries) != len(cases) or [e.get("name") for e in entries] != [c.name for c in cases]:
        raise ValueError("the observation's inputs are not this exercise's")

    # 1. values, and the objects the function fills
    wants = [plain(_run(ex, ex.reference, _fresh(c.args))) for c in cases]
    gots = [e.get("output") for e in entries]
    value_problems, fill_problems = [], []
    for c, g, w in zip(cases, gots, wants, strict=True):
        g_out, g_fill = _split(ex, g)
        w_out, w_fill = _split(ex, w)
        d = difference(g_out, w_out, ex.atol, ex.rtol, float64=(ex.atol_float64, ex.rtol_float64))
        if d:
            value_problems.append((c, d, g_out, w_out))
        if ex.fills:
            d = difference(g_fill, w_fill, ex.atol, ex.rtol, float64=(ex.atol_float64, ex.rtol_float64))
            if d:
                fill_problems.append((c, d))
    if value_problems or fill_problems:
        for mistake in ex.mistakes:
            outs = _outputs(ex, mistake.fn, cases)
            if outs is not None and all(difference(g, o, ex.atol, ex.rtol) is None
                                        for g, o in zip(gots, outs, strict=True)):
                props.append(Property(values_name if value_problems else "fills " + ", ".join(ex.fills), False,
                                      f"as '{mistake.name}'"))
                return result(FAILED, f"looks like '{mistake.name}': {mistake.hint}", mistake.name)
    if value_problems:
        props.append(Property(values_name, False, f"{len(value_problems)} of {len(cases)} inputs differ"))
        def rank(p: tuple) -> tuple[bool, int]:  # a shape, dtype or type problem first, then the smallest input
            return ("largest difference" in p[1] or "entries differ" in p[1], _size(p[0].args))

        case, problem, g_out, w_out = min(value_problems, key=rank)
        for inv in ex.invariants:
            broken = None
            for c, _, g, _ in value_problems:
                with contextlib.suppress(Exception):
                    broken = inv.test(_fresh(c.args), g)
                if broken:
                    return result(FAILED, f"breaks '{inv.name}': {broken} (on input '{c.name}'); on the smallest "
                                  f"input that differs ('{case.name}'): yours {_show_value(g_out)}, expected "
                                  f"{_show_value(w_out)}")
        return result(FAILED, f"on input '{case.name}': {problem}; yours {_show_value(g_out)}, expected "
                      f"{_show_value(w_out)}")
    # every right output has the invariants exactly (a fill of -100 for -inf: weight 1e-44, within tolerance, not 0)
    for inv in ex.invariants:
        for c, g in zip(cases, gots, strict=True):
            broken = None
            with contextlib.suppress(Exception):
                broken = inv.test(_fresh(c.args), _split(ex, g)[0])
            if broken:
                props.append(Property(values_name, False, f"breaks '{inv.name}'"))
                return result(FAILED, f"breaks '{inv.name}': {broken} (on input '{c.name}'), though its values are "
                              "within the tolerance")
    props.append(Property(values_name, True))
    if ex.fills:
        if fill_problems:
            case, problem = fill_problems[0]
            props.append(Property(f"fills {', '.join(ex.fills)} as the docstring says", False, problem))
            return result(FAILED, f"the object it fills is wrong after a call (on input '{case.name}'): {problem}")
        props.append(Property(f"fills {', '.join(ex.fills)} as the docstring says", True))

    # 2. the caller's inputs are unchanged
    for c, e in zip(cases, entries, strict=True):
        d = difference(e.get("inputs_after"), plain(c.args), 0.0, 0.0)
        if d:
            props.append(Property("the caller's inputs unchanged", False, d))
            which = d.split("(in ")[-1].rstrip(")") if "(in " in d else "an input"
            return result(FAILED, f"changes its inputs in place (on input '{c.name}', "
                          f"{_argument(which, _arg_names(ex))}): the "
                          "caller's tensors must be left as they were; work on new tensors (x = x * 2, not x *= 2 "
                          "or x.mul_(2))")
        flags = e.get("requires_grad_after")
        if flags is not None and flags != _requires_grad(c.args):
            which = next(i for i, (a, b) in enumerate(zip(flags, _requires_grad(c.args), strict=False)) if a != b)
            d = "sets requires_grad on the caller's tensor" if flags[which] else "turns off requires_grad of the caller's tensor"
            props.append(Property("the caller's inputs unchanged", False, d))
            return result(FAILED, f"{d} (on input '{c.name}', its tensor input {which + 1}): leave the caller's "
                          "tensors as they were; take gradients on a copy (x = x.detach().requires_grad_())")
    props.append(Property("the caller's inputs unchanged", True))

    # 3. gradients flow where the reference's flow, and equal them
    if ex.differentiable:
        for c, e in zip(cases, entries, strict=True):
            want = gradients(ex, ex.reference, c.args)
            if e.get("grad_error"):
                props.append(Property("gradients flow to the inputs and equal the package's", False, e["grad_error"]))
                return result(FAILED, f"gradients cannot flow through it (on input '{c.name}': {e['grad_error']}): "
                              "keep the computation in torch operations on the inputs, without torch.no_grad(), "
                              ".item(), .numpy(), in-place writes or torch.tensor(...) around a result")
            got = e.get("grads") or {}
            for name, w in want.items():
                if w is None or not bool((w != 0).any()):
                    continue
                g = got.get(name)
                name = _grad_label(name, _arg_names(ex))
                if g is None:
                    props.append(Property("gradients flow to the inputs and equal the package's", False,
                                          f"none reach {name}"))
                    return result(FAILED, f"no gradient reaches {name} (on input '{c.name}'), where the package's "
                                  "does: the result was cut from the graph (torch.no_grad(), .item(), .detach(), "
                                  ".numpy(), torch.tensor(...) or an in-place write into a new tensor)")
                d = difference(g, w, ex.atol * 10, ex.rtol * 10)
                if d:
                    props.append(Property("gradients flow to the inputs and equal the package's", False, d))
                    if isinstance(g, torch.Tensor) and g.is_floating_point() and not bool(g.isfinite().all()):
                        why = ("its gradient holds NaN or infinity where the package's is finite: an exp() that "
                               "overflows, or a 0/0 in a row with nothing to attend to (set such rows to zero with "
                               "torch.where, not by dividing)")
                    else:
                        why = ("the values match but the computation is not the same function (a constant, a "
                               "detached part or a non-differentiable step)")
                    return result(FAILED, f"the gradient with respect to {name} differs from the package's (on "
                                  f"input '{c.name}': {d}): {why}")
        props.append(Property("gradients flow to the inputs and equal the package's", True))
    props.append(Property("its own work (the package's answer unavailable while it ran)", True))
    return CheckResult(ex.id, PASSED, f"every property holds on {len(cases)} inputs", ex.reference, None, props, seed)


def recognised(exercise_id: str, mistake_name: str) -> CheckResult:
    """Check the planted mistake ``mistake_name`` as if a student had written it (what the tests do for each one)."""
    ex = get(exercise_id)
    mistake = next((m for m in ex.mistakes if m.name == mistake_name), None)
    if mistake is None:
        raise KeyError(f"exercise {exercise_id!r} has no planted mistake {mistake_name!r}: "
                       f"it has {[m.name for m in ex.mistakes]}")
    return judge(exercise_id, observe(exercise_id, mistake.fn, own_work=False))
