"""Measurement probes shared by the notebooks, Table 1 and the benchmark: wall-clock time, counted FLOPs, peak memory.

* :func:`median_seconds`: the median of repeated timed calls after warm-up (device work included on CUDA);
  :func:`call_seconds`, each call's time (the benchmark races rivals call by call with it);
* :func:`peak_memory`: how far the process's memory rose while a function ran (CUDA allocator, or the resident
  set's high-water mark on Linux), as the benchmark reports it;
* :func:`counted_flops`: the FLOPs PyTorch's ``FlopCounterMode`` sees while a function runs (matrix products,
  convolutions, attention kernels; element-wise operations are not counted);
* :func:`peak_tensor_bytes`: the peak bytes of the tensors a function creates, measured by intercepting every
  operation, so it works on the CPU too, where torch keeps no allocator statistics.

Analytic FLOP counts of whole models (and MFU) live in :mod:`workbench.translation.flops`.
"""

from __future__ import annotations

import statistics
import time
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


def _sync(device: torch.device | str | None) -> None:
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def call_seconds(fn: Callable[[], Any], repeats: int = 1, device: torch.device | str | None = None) -> list[float]:
    """Wall-clock seconds of each of ``repeats`` calls of ``fn()`` (no warm-up).

    On a CUDA ``device`` each call is bracketed by synchronisations, so the time includes the queued GPU work.
    """
    times = []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return times


def median_seconds(fn: Callable[[], Any], repeats: int = 5, warmup: int = 1,
                   device: torch.device | str | None = None) -> float:
    """Median wall-clock seconds of ``fn()`` over ``repeats`` calls, after ``warmup`` untimed calls
    (device work included, as in :func:`call_seconds`)."""
    for _ in range(warmup):
        fn()
    return statistics.median(call_seconds(fn, max(1, repeats), device))


def _proc_status_bytes(field: str) -> int | None:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``) in bytes; None where there is none."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def peak_memory(fn: Callable[[], Any], device: torch.device | str) -> int | None:
    """Bytes by which the memory in use rose above its level before ``fn()`` at its peak while it ran.

    On CUDA the caching allocator's statistics (``torch.cuda.max_memory_allocated``); on Linux CPUs the growth of
    the process's resident-set high-water mark (``VmHWM``, reset through ``/proc/self/clear_refs``) over the
    resident set before the call. None where neither can be read. Unlike :func:`peak_tensor_bytes` it counts
    everything the process allocates (workspaces, allocator caches), as a benchmark reports it.
    """
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak resident set size (VmHWM) to the current one
    except OSError:
        return None
    before = _proc_status_bytes("VmRSS")
    fn()
    peak = _proc_status_bytes("VmHWM")
    return None if before is None or peak is None else max(peak - before, 0)


def counted_flops(fn: Callable[[], Any]) -> int:
    """FLOPs of the matrix products, convolutions and attention kernels ``fn()`` runs, counted by
    ``torch.utils.flop_counter.FlopCounterMode`` while it runs (element-wise ops are not counted)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter, torch.no_grad():
        fn()
    return int(counter.get_total_flops())


class _PeakTensorBytes(TorchDispatchMode):
    """Counts the bytes of the tensor storages that operations create while it is active, and their peak."""

    def __init__(self, existing: set[int]) -> None:
        super().__init__()
        self.existing = existing  # storages that were there before (inputs, parameters): not counted
        self.live: dict[int, list[int]] = {}  # storage data_ptr -> [bytes, tensors alive that use it]
        self.current = 0
        self.peak = 0

    def _release(self, key: int) -> None:
        entry = self.live.get(key)
        if entry is not None:
            entry[1] -= 1
            if entry[1] == 0:
                self.current -= entry[0]
                del self.live[key]

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, Tensor):
                continue
            storage = t.untyped_storage()
            key = storage.data_ptr()
            if key in self.existing or storage.nbytes() == 0:
                continue
            if key in self.live:
                self.live[key][1] += 1
            else:
                self.live[key] = [storage.nbytes(), 1]
                self.current += storage.nbytes()
                self.peak = max(self.peak, self.current)
            weakref.finalize(t, self._release, key)
        return out


def peak_tensor_bytes(fn: Callable[[], Any], *keep: Tensor | nn.Module) -> int:
    """Peak bytes of the tensors ``fn()`` allocates while it runs (measured by intercepting every operation).

    Storages of the tensors and modules in ``keep`` (inputs, parameters) existed before and are not counted.
    Works on any device; on the CPU, where torch keeps no allocator statistics, this is the way to see that
    self-attention materialises n x n matrices while the other layers keep O(n d) activations.
    """
    existing: set[int] = set()
    for item in keep:
        tensors = list(item.parameters()) + list(item.buffers()) if isinstance(item, nn.Module) else [item]
        existing.update(t.untyped_storage().data_ptr() for t in tensors)
    with torch.no_grad(), _PeakTensorBytes(existing) as mode:
        fn()
    return mode.peak


class _CountOperations(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.count += 1
        return func(*args, **(kwargs or {}))


def count_operations(fn: Callable[[], Any]) -> int:
    """Number of tensor operations (ATen kernels) ``fn()`` runs, counted by intercepting each one.

    A layer whose count does not grow with the sequence length runs O(1) sequential operations (Table 1's middle
    column): everything it does is batched over positions. The recurrent layer's count grows by a fixed number
    of operations per position.
    """
    with torch.no_grad(), _CountOperations() as mode:
        fn()
    return mode.count


def matmul_peaks(device: torch.device | str, dtypes: tuple[torch.dtype, ...] = (torch.float32,),
                 sizes: tuple[int, ...] | None = None, rounds: int = 5) -> dict[torch.dtype, float]:
    """The machine's matrix-product peak in FLOP/s for each of ``dtypes``: square products of each size (default
    512, 1024 and 2048 on a CPU; 4096 and 8192 on CUDA), the formats alternating call by call for ``rounds``
    rounds after one warm-up each, and each format's fastest call over all sizes and rounds (a peak: the best the
    machine gave; alternating keeps a busy moment of a shared machine from falling on one format only).
    What a model's FLOP/s is compared against (MFU) when no data-sheet peak is known.
    """
    device = torch.device(device)
    sizes = sizes or ((4096, 8192) if device.type == "cuda" else (512, 1024, 2048))
    best = dict.fromkeys(dtypes, 0.0)
    for n in sizes:
        pairs = {dt: (torch.randn(n, n, device=device).to(dt), torch.randn(n, n, device=device).to(dt)) for dt in dtypes}
        for a, b in pairs.values():
            torch.mm(a, b)  # warm-up
        for r in range(rounds):
            for dt in dtypes if r % 2 == 0 else dtypes[::-1]:
                a, b = pairs[dt]
                (seconds,) = call_seconds(lambda a=a, b=b: torch.mm(a, b), 1, device)
                best[dt] = max(best[dt], 2 * n**3 / seconds)
    return best
