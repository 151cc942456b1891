"""Seeding, device selection, the number format (fp32 or bf16, and the probe that chooses), autocast and parameter
counts."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import platform
import random
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, Union

import numpy as np
import torch
from torch import nn

from workbench.errors import ConfigError, PrecisionError

log = logging.getLogger(__name__)


def set_seed(seed: int) -> None:
    """Seed Python's ``random``, NumPy and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """Turn ``"auto"`` into CUDA, then MPS, else CPU; check an explicit choice exists.

    Honours ``WORKBENCH_DEVICE`` when ``device`` is ``"auto"``.
    """
    if isinstance(device, torch.device):
        return device
    if device == "auto":
        device = os.environ.get("WORKBENCH_DEVICE", "auto")
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        raise ConfigError(f"unknown device {device!r}: use 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'") from exc
    if dev.type not in ("cpu", "cuda", "mps"):  # meta, xpu, ...: torch knows them, the workbench does not run there
        raise ConfigError(f"device {device!r} cannot run the workbench: use 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {device!r} asked for but CUDA is not available: use device='auto' or 'cpu'")
    if dev.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ConfigError(f"device {device!r} asked for but MPS is not available: use device='auto' or 'cpu'")
    return dev


# the CPU flags of bf16 matrix instructions: AMX tiles (Intel Sapphire Rapids and later) first, then the AVX-512 bf16
# dot products (vdpbf16ps: Intel Cooper Lake, AMD Zen 4 and later), which oneDNN's bf16 matrix products use when
# there is no AMX; on an AMD EPYC with avx512_bf16 and no AMX they measured about twice the fp32 rate
BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")
PRECISIONS = ("auto", "fp32", "bf16")  # the number formats of a run (choose_precision)
PrecisionName = Literal["auto", "fp32", "bf16"]
PROBE_MARGIN = 0.95  # "auto" takes bf16 only when its probe time is below this fraction of fp32's (noise margin)


def cpu_flags() -> set[str]:
    """The processor's feature flags (``/proc/cpuinfo``; empty where that cannot be read)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_bf16_units() -> str | None:
    """The processor's bf16 matrix instructions (``"amx_bf16"`` or ``"avx512_bf16"``), or None without them (or
    when this torch's oneDNN cannot use them)."""
    flags = cpu_flags()
    unit = next((f for f in BF16_CPU_FLAGS if f in flags), None)
    if unit is None:
        return None
    supported = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    try:
        return unit if supported is None or supported() else None
    except RuntimeError:
        return None


@dataclass(frozen=True)
class Precision:
    """The number format a run computes in, and why it was chosen (one line, for the log and the run summary)."""

    name: str  # "fp32" or "bf16" (bf16: autocast products, fp32 master weights, loss and optimizer state)
    reason: str  # why: asked for, or what the probe measured

    @property
    def dtype(self) -> torch.dtype:
        return torch.bfloat16 if self.name == "bf16" else torch.float32

    def to_dict(self) -> dict[str, str]:
        return {"precision": self.name, "reason": self.reason}


# what every ``precision`` argument takes: a resolved :class:`Precision`, or a name (no bool, no empty string)
PrecisionLike = Union[Precision, PrecisionName]  # noqa: UP007 (an alias evaluated at import, on Python 3.10)


def check_precision(precision: object) -> None:
    if isinstance(precision, bool) or precision not in PRECISIONS:
        raise ConfigError(f"unknown precision {precision!r}: choose one of {PRECISIONS} (auto measures bf16 against "
                          "fp32 where the processor has bf16 matrix units)")


def probe_seconds(workload: Callable[[], Any], device: torch.device, rounds: int = 3) -> dict[str, float]:
    """Median seconds of ``workload()`` in fp32 and under bf16 autocast: one warm-up each, then ``rounds`` rounds
    alternating which goes first. The global random state is saved and restored around it."""
    names = ("fp32", "bf16")
    times: dict[str, list[float]] = {n: [] for n in names}
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        state = (random.getstate(), np.random.get_state())
        try:
            for n in names:
                with autocast(device, n):
                    workload()
            for r in range(rounds):
                for n in names if r % 2 == 0 else names[::-1]:
                    if device.type == "cuda":
                        torch.cuda.synchronize(device)
                    t = time.perf_counter()
                    with autocast(device, n):
                        workload()
                    if device.type == "cuda":
                        torch.cuda.synchronize(device)
                    times[n].append(time.perf_counter() - t)
        finally:
            random.setstate(state[0])
            np.random.set_state(state[1])
    return {n: statistics.median(v) for n, v in times.items()}


def choose_precision(precision: PrecisionLike, device: torch.device, probe: Callable[[], Any] | None = None,
                     what: str = "this model") -> Precision:
    """Turn ``"auto" | "fp32" | "bf16"`` into the format a run uses on ``device``, with the reason.

    * ``fp32``: fp32 everywhere.
    * ``bf16``: bf16 autocast on CUDA; on the CPU only where the processor has bf16 matrix units
      (:func:`cpu_bf16_units`), else :class:`PrecisionError` (never a silent fallback); not on MPS.
    * ``auto``: bf16 on CUDA (as before); fp32 on MPS; on the CPU bf16 only where the processor has bf16 matrix
      units *and* ``probe`` (the run's own work, e.g. one training step of the model on a batch of the recipe's
      size) runs at most :data:`PROBE_MARGIN` of its fp32 time under bf16 (:func:`probe_seconds`), else fp32.
      Without a probe, ``auto`` on the CPU is fp32.
    * a :class:`Precision`: already resolved, returned as it is.
    """
    if isinstance(precision, Precision):
        return precision
    check_precision(precision)
    if precision == "fp32":
        return Precision("fp32", "fp32 as asked")
    if device.type == "cuda":
        return Precision("bf16", "bf16 autocast on CUDA" + (" as asked" if precision == "bf16" else " (auto)"))
    if device.type != "cpu":
        if precision == "bf16":
            raise PrecisionError(f"--precision bf16 is not supported on {device.type}: run with --precision fp32")
        return Precision("fp32", f"auto: fp32 on {device.type}")
    unit = cpu_bf16_units()
    if precision == "bf16":
        if unit is None:
            raise PrecisionError(f"--precision bf16: this processor ({(cpu_model() or 'unknown CPU')}) has no bf16 matrix units (none "
                                 f"of {', '.join(BF16_CPU_FLAGS)} among its flags): run with --precision fp32, or "
                                 "--precision auto")
        return Precision("bf16", f"bf16 as asked (the CPU has {unit})")
    if unit is None:
        return Precision("fp32", f"auto: fp32, this CPU has no bf16 matrix units (none of {', '.join(BF16_CPU_FLAGS)})")
    if probe is None:
        return Precision("fp32", f"auto: fp32, the CPU has {unit} but nothing was measured")
    s = probe_seconds(probe, device)
    ratio = s["bf16"] / s["fp32"]
    name = "bf16" if ratio <= PROBE_MARGIN else "fp32"
    return Precision(name, f"auto: {name}, the CPU has {unit} and {what} took {1e3 * s['bf16']:.0f} ms in bf16 vs "
                           f"{1e3 * s['fp32']:.0f} ms in fp32 ({ratio:.2f}x; bf16 needs <= {PROBE_MARGIN})")


def cpu_model() -> str | None:
    """The processor's model name (``/proc/cpuinfo``; None where that cannot be read)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


@contextlib.contextmanager
def autocast(device: torch.device, precision: PrecisionLike = "auto") -> Iterator[None]:
    """The autocast a precision asks for on ``device``: bf16 autocast on CUDA and on the CPU for ``"bf16"`` (or a
    resolved bf16 :class:`Precision`), nothing for ``"fp32"``; ``"auto"`` without a probe is bf16 on CUDA only (as
    :func:`choose_precision` resolves it), nothing elsewhere. A bool or any other value is a :class:`ConfigError`.
    """
    name = precision.name if isinstance(precision, Precision) else precision
    check_precision(name)
    if (name == "bf16" and device.type in ("cuda", "cpu")) or (name == "auto" and device.type == "cuda"):
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            yield
    else:
        yield


# glibc malloc's fixed thresholds for keep_freed_memory(): requests up to this size come from its heap (32 MB is the
# largest glibc accepts on a 64-bit system), and this much freed memory may stay at the heap's top for reuse
MALLOC_MMAP_THRESHOLD = 32 << 20
MALLOC_TRIM_THRESHOLD = 256 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)


def keep_freed_memory() -> bool:
    """Have glibc's malloc keep freed memory for reuse instead of handing it back to the system at once.

    PyTorch's CPU allocator asks malloc for every tensor. glibc maps requests above a threshold afresh and unmaps them
    when freed, and the threshold only adapts after such a free, so a decoding loop, whose key/value caches grow a
    little every step, keeps faulting fresh pages in: tens of thousands of page faults for 256 sentences of beam-4
    decoding. Fixed thresholds (``MALLOC_MMAP_THRESHOLD``, ``MALLOC_TRIM_THRESHOLD``) let the heap serve and keep
    them; the process may then hold up to 256 MB of freed memory for its next tensors.

    Process-wide and not undoable, so the package never calls it on import: ``workbench translate`` and ``evaluate``
    call it for their own process, and a notebook that decodes a lot may call it once. Returns whether it took effect: False where the C library is not
    glibc, or when the environment says ``WORKBENCH_MALLOC=system``.
    """
    if os.environ.get("WORKBENCH_MALLOC", "").lower() == "system" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    # the mmap threshold first: setting either one turns glibc's adaptive thresholds off
    return bool(mallopt(_M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD,
                                                                                       MALLOC_TRIM_THRESHOLD))


@contextlib.contextmanager
def cpu_threads(threads: int | None = None) -> Iterator[None]:
    """PyTorch's CPU thread count set to ``threads`` inside (None: left as it is), and put back on leaving, whatever
    the block did to it (a ``ctranslate2.Translator`` sets the process's OpenMP count, which PyTorch shares)."""
    before = torch.get_num_threads()
    try:
        if threads:
            torch.set_num_threads(int(threads))
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def full_precision() -> Iterator[None]:
    """No autocast inside, on any device: what inspection runs in (attention capture, interventions, attribution),
    so its figures are fp32 whatever precision a surrounding run uses."""
    with contextlib.ExitStack() as stack:
        for device_type in ("cpu", "cuda"):
            if torch.is_autocast_enabled(device_type):
                stack.enter_context(torch.autocast(device_type=device_type, enabled=False))
        yield


def adam(params: Any, device: torch.device, **kwargs: Any) -> torch.optim.Adam:
    """``torch.optim.Adam(params, **kwargs)``, fused (one kernel per parameter, no temporaries) on CUDA and on the
    CPU where this torch has the fused CPU kernel (2.4 and later); the same update within fp32 rounding.

    On the ``small`` model the fused CPU step takes about 6 ms against 29 ms for the default one (2 cores).
    """
    if device.type in ("cuda", "cpu"):
        try:
            return torch.optim.Adam(params, fused=True, **kwargs)
        except (RuntimeError, TypeError) as exc:  # an older torch without the fused kernel on this device
            log.debug("fused Adam unavailable on %s (%s): the default implementation", device, exc)
    return torch.optim.Adam(params, **kwargs)


def count_parameters(module: nn.Module, trainable_only: bool = False) -> int:
    """Number of distinct parameters (tied weights counted once)."""
    seen: set[int] = set()
    total = 0
    for p in module.parameters():
        if id(p) in seen or (trainable_only and not p.requires_grad):
            continue
        seen.add(id(p))
        total += p.numel()
    return total


def init_distributed() -> bool:
    """Join the process group when launched by torchrun (WORLD_SIZE > 1): NCCL on CUDA, else gloo. Returns whether
    the process is one of several."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    import torch.distributed as dist

    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend=backend)
    return True
