"""Where a result comes from: one record (machine, CPU, threads, torch, git, command, time) for every result file.

Every benchmark report, every ``bench/`` script's JSON and every model card carries :func:`provenance`'s record,
with the same key names everywhere:

    machine       platform.machine() ("x86_64", "arm64")
    cpu_model     the CPU's model name from /proc/cpuinfo (None where there is none)
    cpu_flags     the CPU features that decide which matmul kernels run (AVX-512 BF16, AMX, ...), sorted
    cpu_count     logical CPUs of the machine
    threads       torch's intra-op threads when the record was made
    python, torch versions
    device        "cpu" or the CUDA device's name
    commit        the git commit of the checkout the package runs from (None outside a checkout)
    dirty         True when that checkout has changes, untracked files included (None outside a checkout)
    command       the command line
    started_utc   when the record was made (make it before the work, so a commit made meanwhile is not the run's)

:func:`write_report` is the one way a benchmark writes its report: it refuses a report without the record.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from workbench.runtime import cpu_flags as all_cpu_flags
from workbench.runtime import cpu_model
from workbench.translation.files import atomic_write_text

PACKAGE_DIR = Path(__file__).resolve().parents[1]
# the CPU flags that decide which matrix-product kernels oneDNN/MKL pick (bf16 and int8 paths, AMX tiles)
MATMUL_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni", "avx_vnni", "amx_bf16",
                "amx_fp16", "amx_int8", "amx_tile", "asimd", "sve", "bf16", "i8mm")


def cpu_flags() -> list[str]:
    """The CPU features among :data:`MATMUL_FLAGS` this machine has (empty where /proc/cpuinfo is missing)."""
    have = all_cpu_flags()
    return sorted(f for f in MATMUL_FLAGS if f in have)


def git_state(cwd: str | Path | None = None) -> dict[str, Any]:
    """``{"commit": sha or None, "dirty": bool or None}`` of the checkout at ``cwd`` (default: the package's).

    Untracked files that git does not ignore count as changes: a result made with a new, uncommitted module is
    not the commit's result."""
    where = Path(cwd) if cwd is not None else PACKAGE_DIR
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=10)
        if sha.returncode != 0:
            return {"commit": None, "dirty": None}
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=normal"], cwd=where,
                                capture_output=True, text=True, timeout=10)
        return {"commit": sha.stdout.strip(), "dirty": bool(status.stdout.strip()) if status.returncode == 0 else None}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def utc_now() -> str:
    """The time now, UTC, ISO 8601 to the second."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def provenance(command: list[str] | None = None, cwd: str | Path | None = None,
               device: str | torch.device = "cpu") -> dict[str, Any]:
    """The record of where a result comes from (the keys of this module's docstring).

    Args:
        command: the command line to record (default: the running program's, ``sys.argv``).
        cwd: the checkout whose git state to record (default: the package's).
        device: the device the work runs on; a CUDA device is recorded by its name.
    """
    dev = torch.device(device)
    return {
        "machine": platform.machine(),
        "cpu_model": cpu_model(),
        "cpu_flags": cpu_flags(),
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else dev.type,
        **git_state(cwd),
        "command": list(sys.argv) if command is None else [str(c) for c in command],
        "started_utc": utc_now(),
    }


def hardware_line(record: dict[str, Any]) -> str:
    """One line for a model card: CPU model, cores, threads, torch, device."""
    return (f"{record.get('cpu_model') or record.get('machine')}, {record.get('cpu_count')} cores, "
            f"{record.get('threads')} threads, torch {record.get('torch')}, {record.get('device')}")


# the record's keys a published figure needs: what ran (commit, command), where (CPU model, threads), with what torch
REPORT_KEYS = ("cpu_model", "threads", "torch", "commit", "command")


def write_report(report: Mapping[str, Any], path: str | Path | None = None) -> str:
    """The JSON text of a benchmark's report, written atomically to ``path`` (its folder made) when one is given.

    One format for every ``bench/`` script and ``workbench bench``: one-space indents, NumPy and torch scalars as
    floats, a final newline. A report without :func:`provenance`'s record (any of :data:`REPORT_KEYS` missing) is
    refused with a :class:`ValueError`: a figure nobody can trace to a CPU and a commit is not written.
    """
    missing = [k for k in REPORT_KEYS if k not in report]
    if missing:
        raise ValueError(f"the report lacks {missing} of the provenance record: start it with "
                         "{**workbench.tools.provenance.provenance(...), ...}")
    text = json.dumps(report, indent=1, default=float) + "\n"
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)
    return text


# a 1-minute load average above this, beside the run's own threads, means other work shared the machine: the project's
# machine has 2 CPUs, where 1.5 leaves less than one core to a benchmark's two threads
CONTENDED_LOAD = 1.5


def contended(load_start: list[float] | None, load_end: list[float] | None = None, threads: int | None = None,
              cpu_count: int | None = None) -> bool | None:
    """Whether other work loaded the machine during a run, from the load averages recorded at its start and end
    (``os.getloadavg()``): the 1-minute figure above :data:`CONTENDED_LOAD` (scaled to ``cpu_count`` / 2 CPUs) at the
    start, or at the end once the run's own ``threads`` are taken off. None where no load was recorded."""
    if not load_start:
        return None
    limit = CONTENDED_LOAD * max(cpu_count or 2, 2) / 2
    own = threads or 1
    return load_start[0] > limit or (bool(load_end) and load_end[0] - own > limit)
