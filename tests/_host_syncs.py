"""Count host synchronisations on the CPU: every call that would make the host wait for an accelerator's queue.

On CUDA, ``torch.cuda.set_sync_debug_mode`` reports them; on the CPU nothing waits, so the tests patch the Python
entry points that read a tensor's values on the host (``item``, ``tolist``, ``bool()``, ``int()``, ``float()``,
``nonzero``, ``torch.equal``, boolean-mask indexing, ...) with counters. A step marker (a patched callable, such as
the decoder's stepper) splits the timeline into steps, so a test can assert at most one synchronisation per step.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

# Tensor methods that hand a value to the host (each waits for the device's queue on an accelerator)
_METHODS = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__", "nonzero", "numpy", "cpu",
            "masked_select", "unique")
# functions of the torch namespace that do
_FUNCTIONS = ("equal", "nonzero", "masked_select", "unique", "allclose", "is_nonzero")


def _bool_index(index: Any) -> bool:
    parts = index if isinstance(index, tuple) else (index,)
    return any(isinstance(p, torch.Tensor) and p.dtype == torch.bool for p in parts)


@dataclass
class SyncLog:
    """The timeline: ``"step"`` markers and the name of every synchronising call between them."""

    events: list[str] = field(default_factory=list)
    muted: int = 0  # > 0 while inside a call the test has declared exempt

    def per_step(self) -> list[int]:
        """Synchronisations from each step marker to the next (the last step's to the end of the run)."""
        counts: list[int] = []
        for e in self.events:
            if e == "step":
                counts.append(0)
            elif counts:
                counts[-1] += 1
        return counts

    def syncs(self) -> list[str]:
        return [e for e in self.events if e != "step"]


@contextlib.contextmanager
def count_host_syncs(monkeypatch: pytest.MonkeyPatch, step: tuple[Any, str],
                     exempt: tuple[tuple[Any, str], ...] = ()) -> Iterator[SyncLog]:
    """Patch the synchronising calls with counters and ``step`` (``(owner, attribute)``, a callable called once per
    step) with a marker. Calls made inside an ``exempt`` callable are not counted.

    Yields the :class:`SyncLog`; the patches are undone by ``monkeypatch`` at the end of the test (and here).
    """
    log = SyncLog()
    active = [True]

    def counted(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(real)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if active[0] and not log.muted:
                log.events.append(name)
            return real(*args, **kwargs)

        return wrapper

    with monkeypatch.context() as m:
        for name in _METHODS:
            m.setattr(torch.Tensor, name, counted(name, getattr(torch.Tensor, name)))
        for name in _FUNCTIONS:
            m.setattr(torch, name, counted(f"torch.{name}", getattr(torch, name)))
        real_where = torch.where

        def where(*args: Any, **kwargs: Any) -> Any:  # torch.where(cond) alone is nonzero
            if len(args) + len(kwargs) == 1 and active[0] and not log.muted:
                log.events.append("torch.where(cond)")
            return real_where(*args, **kwargs)

        m.setattr(torch, "where", where)
        for name in ("__getitem__", "__setitem__"):
            real = getattr(torch.Tensor, name)

            def indexer(self: torch.Tensor, index: Any, *rest: Any, _real: Any = real, _name: str = name) -> Any:
                if _bool_index(index) and active[0] and not log.muted:
                    log.events.append(f"boolean {_name}")
                return _real(self, index, *rest)

            m.setattr(torch.Tensor, name, indexer)
        owner, attr = step
        real_step = getattr(owner, attr)

        def marked(*args: Any, **kwargs: Any) -> Any:
            log.events.append("step")
            return real_step(*args, **kwargs)

        m.setattr(owner, attr, marked)
        for ex_owner, ex_attr in exempt:
            real_ex = getattr(ex_owner, ex_attr)

            def muted(*args: Any, _real: Any = real_ex, **kwargs: Any) -> Any:
                log.muted += 1
                try:
                    return _real(*args, **kwargs)
                finally:
                    log.muted -= 1

            m.setattr(ex_owner, ex_attr, muted)
        try:
            yield log
        finally:
            active[0] = False
