"""Running a student's function for a check: a time limit, the package's answer made unavailable while it runs
(:class:`PackageAnswerCalled`), and the gradients of its output with respect to its inputs."""

from __future__ import annotations

import contextlib
import copy
import functools
import random
import signal
import sys
import threading
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn


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


IMPORT_GRACE = 60.0  # seconds past the time limit that an import under way may take to finish before it is stopped


def _call_with_limit(fn: Callable[..., Any], args: tuple, seconds: float) -> Any:
    """``fn(*args)``, interrupted after ``seconds`` where an alarm signal can be used (the main thread on Unix)."""
    if seconds <= 0:
        raise _TimeLimit
    use_alarm = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not use_alarm:
        return fn(*args)

    grace = [IMPORT_GRACE]

    def on_alarm(_signum: int, frame: Any) -> None:
        # never inside an import: a module interrupted half-way stays broken in sys.modules for the whole kernel
        # (torch imports sympy on first use of some functions); stop just after the import instead
        while frame is not None and grace[0] > 0:
            if frame.f_code.co_filename.startswith("<frozen importlib"):
                grace[0] -= 0.2
                signal.setitimer(signal.ITIMER_REAL, 0.2)
                return
            frame = frame.f_back
        raise _TimeLimit

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn(*args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _run(ex: Any, fn: Callable[..., Any], args: tuple) -> Any:
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


def _trap_code(name: str) -> types.CodeType:
    """A code object that raises :class:`PackageAnswerCalled` naming ``name``, with no free variables, so it can
    replace a module-level function's ``__code__`` (it runs with that function's globals: it imports what it needs)."""
    source = ("def trap(*_args, **_kwargs):\n"
              "    from workbench.lessons.exercises.calling import PackageAnswerCalled\n"
              f"    raise PackageAnswerCalled({name!r})\n")
    namespace: dict[str, Any] = {}
    exec(compile(source, "<package answer trap>", "exec"), namespace)  # noqa: S102 (our own constant source)
    return namespace["trap"].__code__


def _mistake_helpers(ex: Any) -> list[types.FunctionType]:
    """The functions of the exercise modules that the planted mistakes call (``variants``' partials of one
    parametrised implementation, right at its defaults): a student must not reach the answer through them."""
    found: dict[int, types.FunctionType] = {}

    def add(fn: Any) -> None:
        while isinstance(fn, functools.partial):
            fn = fn.func
        if not (isinstance(fn, types.FunctionType) and fn.__module__.startswith("workbench.lessons.exercises.nb")):
            return
        if id(fn) in found:
            return
        found[id(fn)] = fn
        for name in fn.__code__.co_names:  # and what it calls in its own module (a parametrised helper, say,
            value = fn.__globals__.get(name)  # whose defaults give the right answer)
            if isinstance(value, types.FunctionType) and value.__module__ == fn.__module__:
                add(value)

    for mistake in getattr(ex, "mistakes", ()):
        add(mistake.fn)
    return list(found.values())


@contextlib.contextmanager
def _package_answer_unavailable(ex: Any, fn: Callable[..., Any]) -> Iterator[None]:
    """While the block runs, the package's answer (the exercise's reference, every name in ``ex.package`` and the
    functions its planted mistakes are written with, which give the right answer at their default settings) raises
    :class:`PackageAnswerCalled` wherever the student's code could reach it: in every ``workbench`` module that holds
    it (re-exports included), on its class, in the student's function's globals, and through any other alias (the
    function objects' code is swapped).

    This stops reuse of the package's answer, direct or through an alias; it is not a defence against deliberate
    circumvention (loading a second copy of a module from its file, digging the original code out of the garbage
    collector). Such code is plain to see in the notebook; the grader runs each exercise in a process of its own.
    """
    targets: list[tuple[str, Any]] = [(f"the exercise's own reference ({ex.id})", ex.reference)]
    resolved = [(dotted, *_resolve(dotted)) for dotted in ex.package]  # before anything is patched
    for dotted, _owner, _attr, value in resolved:
        targets.append((dotted, value))
    for helper in _mistake_helpers(ex):
        targets.append((f"{helper.__module__}.{helper.__qualname__}", helper))
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
    # the function objects themselves: an alias the namespaces do not show (a default argument, a closure, a list
    # made when the cell ran) still calls the same object, so its code raises too while the block runs
    swapped: list[tuple[Any, Any]] = []
    for key, value in originals.items():
        if isinstance(value, types.FunctionType) and not value.__code__.co_freevars:
            swapped.append((value, value.__code__))
            value.__code__ = _trap_code(names[key])
    reference = ex.reference
    object.__setattr__(ex, "reference", traps[id(reference)])  # ex.get(...).reference is unavailable too (frozen)
    try:
        yield
    finally:
        object.__setattr__(ex, "reference", reference)
        for function, code in reversed(swapped):
            function.__code__ = code
        for owner, key, value in reversed(patched):
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


def gradients(ex: Any, fn: Callable[..., Any], args: tuple) -> dict[str, Any]:
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


def _arg_names(ex: Any) -> list[str]:
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


def _requires_grad(x: Any, depth: int = 0) -> list[bool]:
    """``requires_grad`` of every tensor in ``x`` (tuples, lists and dict values, in order): plain data, so an
    observation records whether the function switched it on the caller's tensors."""
    if isinstance(x, Tensor):
        return [bool(x.requires_grad)]
    if depth > 8:
        return []
    items = x.values() if isinstance(x, dict) else x if isinstance(x, (tuple, list)) else ()
    return [flag for v in items for flag in _requires_grad(v, depth + 1)]
