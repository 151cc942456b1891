"""Atomic file writes: a temporary file in the same folder, flushed and fsynced, then renamed over the target,
so a crash never leaves a half-written checkpoint, tokenizer or summary behind."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def _umask() -> int:
    """The process's file-creation mask, read without changing it (Linux ``/proc``), else the usual 0o022."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def _fsync_dir(folder: Path) -> None:
    """Make a rename inside ``folder`` durable; file systems that cannot fsync a folder (Windows) are skipped."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], Any]) -> Path:
    """Write a file so that ``path`` holds either its previous content or the complete new one, even after a
    crash or a power loss. Every file the workbench writes goes through here.

    ``write(f)`` fills a temporary file in the same folder; it is flushed and fsynced, renamed over ``path``
    (``os.replace``: atomic within one file system), then the folder is fsynced so that the rename itself is on
    disk. The file gets the usual permissions (0o666 minus the umask), not the temporary file's 0o600.
    On any error the temporary file is removed, ``path`` is untouched, and the error propagates.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~_umask())
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    return path


def atomic_write_text(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """:func:`atomic_write` for text (JSON summaries, histories, tokenizers)."""
    data = text.encode(encoding)
    return atomic_write(path, lambda f: f.write(data))
