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
import copy
import functools
import math
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

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
OPAQUE = "__opaque__"  # key of the plain-data stand-in for an object that is not plain data (see plain())


def _describe(x: Any) -> str:
    if isinstance(x, dict) and OPAQUE in x:
        return str(x[OPAQUE])
    if isinstance(x, Tensor):
        return f"a tensor of shape {tuple(x.shape)}"
    if isinstance(x, (tuple, list)):
        return f"a {type(x).__name__} of {len(x)} items"
    if isinstance(x, dict):
        return f"a dict with keys {sorted(map(str, x))}"
    return f"a {type(x).__name__} ({x!r:.40})"


def _where(path: str) -> str:
    return f" (in {path})" if path else ""


def difference(got: Any, want: Any, atol: float = 1e-5, rtol: float = 1e-4, path: str = "") -> str | None:
    """None when ``got`` equals ``want`` (tensors within tolerance, NaN where NaN), else a one-line description of
    the first difference: structure, shape, dtype, device, NaN, or the largest difference and where."""
    if isinstance(got, dict) and OPAQUE in got and not (isinstance(want, dict) and OPAQUE in want):
        if isinstance(want, Tensor) and "device" in got:
            return f"device {got['device']}, expected {want.device}{_where(path)}"
        return f"returned {got[OPAQUE]}, expected {_describe(want)}{_where(path)}"
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


def plain(x: Any, depth: int = 0) -> Any:
    """``x`` as plain data (tensors on the CPU, lists, tuples, dicts with string keys, numbers, strings, None), so
    an observation can cross to another process and be read back with ``torch.load(weights_only=True)``.

    A module becomes its ``state_dict``, an object its attributes; anything else becomes ``{OPAQUE: description}``.
    """
    if depth > 8:
        return {OPAQUE: "a structure nested more than 8 levels deep"}
    if isinstance(x, Tensor):
        if x.device.type != "cpu":
            return {OPAQUE: f"a tensor of shape {tuple(x.shape)} on device {x.device}", "device": str(x.device)}
        if x.is_sparse or x.layout != torch.strided:
            return {OPAQUE: f"a {x.layout} tensor"}
        return x.detach().clone()
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if isinstance(x, tuple):
        return tuple(plain(v, depth + 1) for v in x)
    if isinstance(x, list):
        return [plain(v, depth + 1) for v in x]
    if isinstance(x, dict):
        return {str(k): plain(v, depth + 1) for k, v in x.items()}
    if isinstance(x, nn.Module):
        return {"__module__": type(x).__name__, **{k: plain(v, depth + 1) for k, v in x.state_dict().items()}}
    if isinstance(x, np.ndarray):
        return {OPAQUE: f"a numpy array of shape {x.shape} (return a torch tensor)"}
    if isinstance(x, (np.integer, np.floating)):
        return x.item()
    attrs = getattr(x, "__dict__", None)
    if (isinstance(attrs, dict) and not callable(x)) or type(x).__module__.startswith("workbench"):
        return {"__object__": type(x).__name__, **{str(k): plain(v, depth + 1) for k, v in (attrs or {}).items()}}
    return {OPAQUE: f"a {type(x).__name__}"}


# -- running the student's function ------------------------------------------------------------------------------
class _TimeLimit(Exception):
    pass


class PackageAnswerCalled(BaseException):  # noqa: N818 (a BaseException: a student's `except Exception` cannot hide it)
    """Raised when a student's function calls the package's own answer while it is being checked."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


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


def _resolve(dotted: str) -> tuple[Any, str, Any]:
    """(owner, attribute, value) of a dotted name ``"package.module.Class.attr"``."""
    import importlib

    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:-1]:
            owner = getattr(owner, name)
        return owner, parts[-1], getattr(owner, parts[-1])
    raise ValueError(f"cannot resolve {dotted!r}: name a module attribute such as 'workbench.model.masks.causal_mask'")


@contextlib.contextmanager
def _package_answer_unavailable(ex: Exercise, fn: Callable[..., Any]) -> Iterator[None]:
    """While the block runs, the package's answer (the exercise's reference and every name in ``ex.package``) raises
    :class:`PackageAnswerCalled` wherever the student's code could reach it: in every ``workbench`` module that holds
    it (re-exports included), on its class, and in the student's function's globals."""
    targets: list[tuple[str, Any]] = [(f"the exercise's own reference ({ex.id})", ex.reference)]
    resolved = [(dotted, *_resolve(dotted)) for dotted in ex.package]  # before anything is patched
    for dotted, _owner, _attr, value in resolved:
        targets.append((dotted, value))
    originals = {id(v): v for _, v in targets}
    names = {id(v): n for n, v in targets}

    def trap_for(name: str) -> Callable[..., Any]:
        def trap(*_args: Any, **_kwargs: Any) -> Any:
            raise PackageAnswerCalled(name)

        return trap

    traps = {k: trap_for(names[k]) for k in originals}
    patched: list[tuple[Any, str, Any]] = []

    def patch_namespace(owner: Any, namespace: dict) -> None:
        for key, value in list(namespace.items()):
            if id(value) in originals and value is originals[id(value)]:
                patched.append((owner, key, value))
                setattr(owner, key, traps[id(value)])

    for module_name, module in list(sys.modules.items()):
        if module is not None and (module_name == "workbench" or module_name.startswith("workbench.")):
            patch_namespace(module, vars(module))
    for _dotted, owner, attr, value in resolved:
        if isinstance(owner, type):
            patch_namespace(owner, dict(vars(owner)))
        elif getattr(owner, attr, None) is value:  # e.g. a torch function: patched where it is defined
            patched.append((owner, attr, value))
            setattr(owner, attr, traps[id(value)])
    student_globals = getattr(fn, "__globals__", None)
    if isinstance(student_globals, dict):
        for key, value in list(student_globals.items()):
            if id(value) in originals and value is originals[id(value)]:
                patched.append((student_globals, key, value))
                student_globals[key] = traps[id(value)]
    reference = ex.reference
    object.__setattr__(ex, "reference", traps[id(reference)])  # ex.get(...).reference is unavailable too
    patched.append((ex, "reference", reference))
    try:
        yield
    finally:
        for owner, key, value in reversed(patched):
            if isinstance(owner, Exercise):
                object.__setattr__(owner, key, value)
                continue
            if isinstance(owner, dict):
                owner[key] = value
            else:
                setattr(owner, key, value)


def _float_leaves(x: Any) -> list[Tensor]:
    """The floating-point tensors of a structure, in order."""
    if isinstance(x, Tensor):
        return [x] if x.is_floating_point() else []
    if isinstance(x, (tuple, list)):
        return [t for v in x for t in _float_leaves(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _float_leaves(v)]
    return []


def _grad_inputs(args: tuple) -> tuple[tuple, list[tuple[str, Tensor]]]:
    """A copy of ``args`` whose floating-point tensors (and modules' floating parameters) require gradients, and the
    list of those leaves with their names (``"argument 2"``, ``"argument 3: weight"``)."""
    args = _fresh(args)
    leaves: list[tuple[str, Tensor]] = []
    out = []
    for i, a in enumerate(args):
        if isinstance(a, Tensor) and a.is_floating_point():
            a = a.detach().clone().requires_grad_(True)
            leaves.append((f"argument {i + 1}", a))
        elif isinstance(a, nn.Module):
            for name, p in a.named_parameters():
                if p.is_floating_point():
                    p.requires_grad_(True)
                    leaves.append((f"argument {i + 1}: {name}", p))
        elif isinstance(a, (list, tuple)) and any(isinstance(v, (Tensor, dict)) for v in a):
            a = type(a)(_grad_container(v, f"argument {i + 1}[{j}]", leaves) for j, v in enumerate(a))
        out.append(a)
    return tuple(out), leaves


def _grad_container(v: Any, name: str, leaves: list[tuple[str, Tensor]]) -> Any:
    if isinstance(v, Tensor) and v.is_floating_point():
        v = v.detach().clone().requires_grad_(True)
        leaves.append((name, v))
        return v
    if isinstance(v, dict):
        return {k: _grad_container(x, f"{name}[{k!r}]", leaves) for k, x in v.items()}
    return v


def _cotangent(t: Tensor, i: int) -> Tensor:
    """A fixed random weighting of output leaf ``i`` (the same in every process), so that the gradient of
    Σ (output · weight) tests every entry of the Jacobian's rows at once."""
    g = torch.Generator().manual_seed(1000 + i)
    return torch.randn(t.shape, generator=g, dtype=torch.float64).to(t.dtype)


def _all_on_cpu(x: Any) -> bool:
    """Are all the tensors of a structure on the CPU?"""
    if isinstance(x, Tensor):
        return x.device.type == "cpu"
    if isinstance(x, (tuple, list)):
        return all(_all_on_cpu(v) for v in x)
    if isinstance(x, dict):
        return all(_all_on_cpu(v) for v in x.values())
    return True


def gradients(ex: Exercise, fn: Callable[..., Any], args: tuple) -> dict[str, Any]:
    """The gradients of Σ (output · fixed weights) with respect to every floating-point input of ``fn`` on ``args``:
    ``{"argument 1": tensor or None, ...}`` (None: no gradient reaches that input)."""
    grad_args, leaves = _grad_inputs(args)
    with torch.enable_grad():
        out = _run(ex, fn, grad_args)
        outs = [t for t in _float_leaves(out) if t.requires_grad]
        if not outs or not leaves:
            return {name: None for name, _ in leaves}
        loss = sum((t * _cotangent(t, i)).sum() for i, t in enumerate(outs))
        grads = torch.autograd.grad(loss, [leaf for _, leaf in leaves], allow_unused=True)
    return {name: (g.detach().clone() if g is not None else None) for (name, _), g in zip(leaves, grads, strict=True)}


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
                        torch.no_grad():
                    out = _call_with_limit(lambda *a: _run(ex, fn, a), args, remaining)
                entry["output"] = plain(out)
                entry["inputs_after"] = plain(args)
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
            with torch.no_grad():
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
    observation = observe(exercise_id, fn, seed=seed, time_limit=time_limit)
    result = judge(exercise_id, observation, seed=seed)
    if result.passed:
        result.function = fn
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


def _size(args: tuple) -> int:
    """How big an input is (the number of tensor entries and list items), to show the smallest failing case."""
    total = 0
    for a in args:
        if isinstance(a, Tensor):
            total += a.numel()
        elif isinstance(a, (list, tuple)):
            total += _size(tuple(a)) + len(a)
        elif isinstance(a, dict):
            total += _size(tuple(a.values()))
        elif isinstance(a, nn.Module):
            total += sum(p.numel() for p in a.parameters())
        else:
            total += 1
    return total


def _show_value(x: Any, limit: int = 160) -> str:
    """A compact one-line rendering of an output, for the feedback."""
    if isinstance(x, Tensor):
        with np.printoptions(precision=3, suppress=True, threshold=24, edgeitems=2, linewidth=10_000):
            body = np.array2string(x.detach().double().numpy() if x.is_floating_point() else x.numpy(),
                                   separator=", ").replace("\n", " ")
        text = f"{body} {tuple(x.shape)}"
    elif isinstance(x, dict) and OPAQUE in x:
        text = str(x[OPAQUE])
    elif isinstance(x, (list, tuple)):
        text = "[" + ", ".join(_show_value(v, 60) for v in x) + "]"
    elif isinstance(x, dict):
        text = "{" + ", ".join(f"{k}: {_show_value(v, 60)}" for k, v in x.items()) + "}"
    else:
        text = repr(x)
    return " ".join(text.split())[:limit] + ("…" if len(text) > limit else "")


def _split(ex: Exercise, out: Any) -> tuple[Any, Any]:
    """(the output proper, the filled objects) of a driver's output, per :attr:`Exercise.fills`."""
    if ex.fills and isinstance(out, dict) and OPAQUE not in out:
        return ({k: v for k, v in out.items() if k not in ex.fills}, {k: out.get(k) for k in ex.fills})
    return out, None


def judge(exercise_id: str, observation: dict[str, Any], seed: int | None = None) -> CheckResult:
    """Decide the check from an :func:`observation <observe>`: recompute the package's answers on the same inputs
    here and test every property. Run it in a process the student's code never ran in to trust the result.

    ``seed`` must be the seed the observation was made with (None: the observation's own). Never raises.
    """
    ex = get(exercise_id)
    try:
        with _rng_kept():
            return _judge(ex, observation, seed)
    except Exception as exc:  # a malformed observation (e.g. from a grader's worker): one line, never a traceback
        return CheckResult(ex.id, FAILED, f"could not be judged: {type(exc).__name__}: {str(exc)[:160]}",
                           ex.reference)


def _judge(ex: Exercise, observation: dict[str, Any], seed: int | None) -> CheckResult:
    if not isinstance(observation, dict) or observation.get("exercise") != ex.id:
        raise ValueError(f"the observation is not one of exercise {ex.id}")
    seed = int(observation.get("seed", 0)) if seed is None else int(seed)
    n_draws = int(observation.get("n_draws", N_DRAWS))
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
        d = difference(g_out, w_out, ex.atol, ex.rtol)
        if d:
            value_problems.append((c, d, g_out, w_out))
        if ex.fills:
            d = difference(g_fill, w_fill, ex.atol, ex.rtol)
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
    props.append(Property("the caller's inputs unchanged", True))

    # 3. gradients flow where the reference's flow, and equal them
    if ex.differentiable:
        for c, e in zip(cases, entries, strict=True):
            want = gradients(ex, ex.reference, c.args)
            if e.get("grad_error"):
                props.append(Property("gradients flow to the inputs and equal the package's", False, e["grad_error"]))
                return result(FAILED, f"gradients cannot flow through it (on input '{c.name}': {e['grad_error']}): "
                              "keep the computation in torch operations on the inputs, without .item(), .numpy(), "
                              "in-place writes or torch.tensor(...) around a result")
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
                                  "does: the result was cut from the graph (.item(), .detach(), .numpy(), "
                                  "torch.tensor(...) or an in-place write into a new tensor)")
                d = difference(g, w, ex.atol * 10, ex.rtol * 10)
                if d:
                    props.append(Property("gradients flow to the inputs and equal the package's", False, d))
                    return result(FAILED, f"the gradient with respect to {name} differs from the package's (on "
                                  f"input '{c.name}': {d}): the values match but the computation is not the same "
                                  "function (a constant, a detached part or a non-differentiable step)")
        props.append(Property("gradients flow to the inputs and equal the package's", True))
    props.append(Property("its own work (the package's answer unavailable while it ran)", True))
    return CheckResult(ex.id, PASSED, f"every property holds on {len(cases)} inputs", ex.reference, None, props, seed)


def _arg_names(ex: Exercise) -> list[str]:
    """The names of the arguments the cases hold (the reference's parameters, or the driver's after ``fn``)."""
    import inspect

    try:
        params = list(inspect.signature(ex.driver or ex.reference).parameters)
    except (TypeError, ValueError):
        return []
    return params[1:] if ex.driver is not None else params


def _argument(path: str, names: Sequence[str] = ()) -> str:
    """``"[1]['w']"`` -> ``"argument 2 (`H`), ['w']"``: where a difference in the inputs lies, for the student."""
    if path.startswith("["):
        head, _, rest = path[1:].partition("]")
        if head.isdigit():
            i = int(head)
            label = f"argument {i + 1}" + (f" (`{names[i]}`)" if i < len(names) else "")
            return label + (f", {rest}" if rest else "")
    return path


def _grad_label(name: str, names: Sequence[str]) -> str:
    """``"argument 2: weight"`` -> ``"argument 2 (`norm`): weight"``."""
    head, sep, rest = name.partition(":")
    parts = head.split()
    if len(parts) == 2 and parts[0] == "argument" and parts[1].split("[")[0].isdigit():
        i = int(parts[1].split("[")[0]) - 1
        if i < len(names):
            return f"{head} (`{names[i]}`){sep}{rest}"
    return name


def recognised(exercise_id: str, mistake_name: str) -> CheckResult:
    """Check the planted mistake ``mistake_name`` as if a student had written it (what the tests do for each one)."""
    ex = get(exercise_id)
    mistake = next((m for m in ex.mistakes if m.name == mistake_name), None)
    if mistake is None:
        raise KeyError(f"exercise {exercise_id!r} has no planted mistake {mistake_name!r}: "
                       f"it has {[m.name for m in ex.mistakes]}")
    return judge(exercise_id, observe(exercise_id, mistake.fn, own_work=False))


# -- predictions ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Prediction:
    """A predict-then-run prompt: how a written answer is compared with the measured value.

    ``kind`` "count": an exact integer; "number": within ``tolerance`` (relative); "choice": one of ``choices``
    (strings compared without case or surrounding spaces). ``wrong`` lists planted wrong answers ``(name, value)``
    that the rule must reject (a test checks it). ``expected(parameters)`` computes the right answer with trusted
    code from the lesson's parameters (a grader uses it); None when only the lesson's run can tell.
    """

    id: str  # "05.causal_true"
    question: str  # one line
    variable: str  # the notebook's answer variable: "PREDICT_CAUSAL_TRUE"
    kind: str  # "count", "number" or "choice"
    tolerance: float = 0.0  # relative, for "number"
    choices: tuple[Any, ...] = ()  # for "choice"
    wrong: tuple[tuple[str, Any], ...] = ()  # planted wrong answers: (what it forgets, value)
    expected: Callable[[dict[str, Any]], Any] | None = None  # the right answer from the lesson's parameters

    def __post_init__(self) -> None:
        if self.kind not in ("count", "number", "choice"):
            raise ValueError(f"prediction {self.id!r}: kind {self.kind!r} is not one of 'count', 'number', 'choice'")
        if self.kind == "number" and not 0 < self.tolerance < 1:
            raise ValueError(f"prediction {self.id!r}: a 'number' needs a relative tolerance in (0, 1), "
                             f"got {self.tolerance}")
        if self.kind == "choice" and not self.choices:
            raise ValueError(f"prediction {self.id!r}: a 'choice' needs its choices")

    def matches(self, answer: Any, measured: Any) -> bool:
        """Is ``answer`` right against ``measured`` by this prediction's rule?"""
        if self.kind == "choice":
            def norm(x: Any) -> Any:
                return " ".join(str(x).lower().split()) if isinstance(x, str) else x

            return norm(answer) == norm(measured)
        if isinstance(answer, bool) or not isinstance(answer, (int, float)) or isinstance(measured, bool):
            return False
        if self.kind == "count":
            return float(answer).is_integer() and int(answer) == int(round(float(measured)))
        return math.isclose(float(answer), float(measured), rel_tol=self.tolerance, abs_tol=1e-12)


PREDICTIONS: dict[str, Prediction] = {}  # every registered prediction, by id


def register_prediction(prediction: Prediction) -> Prediction:
    """Add ``prediction`` to :data:`PREDICTIONS` (ids are unique)."""
    if prediction.id in PREDICTIONS:
        raise ValueError(f"prediction {prediction.id!r} is registered twice")
    PREDICTIONS[prediction.id] = prediction
    return prediction


@dataclass
class PredictionResult:
    """A written prediction compared with what the lesson measured."""

    prompt: str
    status: str  # "no prediction", "right", "off" or "not graded"
    message: str
    answer: Any = None
    measured: Any = None

    def to_dict(self) -> dict[str, Any]:
        def simple(x: Any) -> Any:
            return x if isinstance(x, (bool, int, float, str)) or x is None else repr(x)

        return {"prediction": self.prompt, "status": self.status, "message": self.message,
                "answer": simple(self.answer), "measured": simple(self.measured)}

    def __repr__(self) -> str:
        mark = {"right": "✔", "off": "✘", "no prediction": "…", "not graded": "·"}[self.status]
        return f"{mark} prediction {self.prompt}: {self.message}"


def _rule(prompt_id: str, measured: Any) -> Prediction:
    """The registered rule of ``prompt_id``, or a strict default for an unregistered one (exact for integers and
    words, 5 % for other numbers)."""
    if prompt_id in PREDICTIONS:
        return PREDICTIONS[prompt_id]
    if isinstance(measured, bool) or not isinstance(measured, (int, float)):
        return Prediction(prompt_id, "", "", "choice", choices=(measured,))
    if isinstance(measured, int):
        return Prediction(prompt_id, "", "", "count")
    return Prediction(prompt_id, "", "", "number", tolerance=0.05)


def _tolerance_text(rule: Prediction) -> str:
    if rule.kind == "number":
        return f" (right within {rule.tolerance:.0%})"
    return " (exactly)" if rule.kind == "count" else ""


def predict(prompt_id: str, answer: Any, measured: Any, explanation: str) -> PredictionResult:
    """Compare the student's ``answer`` (None: nothing written) with ``measured`` by the rule registered for
    ``prompt_id`` (:data:`PREDICTIONS`), and explain. Never raises."""
    try:
        rule = _rule(prompt_id, measured)
        result = _compare(rule, prompt_id, answer, measured, explanation)
    except Exception as exc:  # a strange answer (an object that cannot be compared): one line
        result = PredictionResult(prompt_id, "off", f"your answer {answer!r:.40} could not be compared with the "
                                  f"measurement ({type(exc).__name__}); measured {_show(measured)}. {explanation}",
                                  answer, measured)
    RESULTS[f"predict:{prompt_id}"] = result
    return result


def _compare(rule: Prediction, prompt_id: str, answer: Any, measured: Any, explanation: str) -> PredictionResult:
    if answer is None:
        return PredictionResult(prompt_id, "no prediction", f"no prediction written; measured {_show(measured)}. "
                                f"{explanation}", None, measured)
    right = rule.matches(answer, measured)
    verdict = "right" if right else "not what happened"
    return PredictionResult(prompt_id, "right" if right else "off", f"you predicted {_show(answer)}, measured "
                            f"{_show(measured)}{_tolerance_text(rule)}: {verdict}. {explanation}", answer, measured)


def grade_prediction(prompt_id: str, answer: Any, parameters: dict[str, Any] | None = None) -> PredictionResult:
    """Grade a written ``answer`` with trusted code: the right answer comes from the prediction's ``expected``
    at the lesson's ``parameters`` (its defaults when None), never from the student's run. Never raises; a
    prediction that only the lesson's run can measure is "not graded"."""
    rule = PREDICTIONS.get(prompt_id)
    if rule is None:
        return PredictionResult(prompt_id, "not graded", f"no prediction {prompt_id!r} is registered", answer)
    if rule.expected is None:
        return PredictionResult(prompt_id, "not graded", "only the lesson's run measures this (run the lesson "
                                "to see it)", answer)
    try:
        measured = rule.expected(dict(parameters or {}))
    except Exception as exc:
        return PredictionResult(prompt_id, "not graded", f"the expected value could not be computed: "
                                f"{type(exc).__name__}: {str(exc)[:120]}", answer)
    return _compare(rule, prompt_id, answer, measured, rule.question)


def _show(x: Any) -> str:
    return f"{x:.4g}" if isinstance(x, float) else repr(x)


def summary() -> dict[str, list[dict[str, Any]]]:
    """The session's checks and predictions as plain data, for a notebook's ``metrics.json``:
    ``{"exercises": [...], "predictions": [...]}``."""
    return {"exercises": [r.to_dict() for r in RESULTS.values() if isinstance(r, CheckResult)],
            "predictions": [r.to_dict() for r in RESULTS.values() if isinstance(r, PredictionResult)]}
