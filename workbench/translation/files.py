"""Atomic file writes: a temporary file in the same folder, flushed and fsynced, then renamed over the target,
so a crash never leaves a half-written checkpoint, tokenizer or summary behind."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Sequence
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


# -- manifests: the SHA-256 of a folder's files ---------------------------------------------------------------------
MANIFEST = "SHA256SUMS"  # the SHA-256 of a folder's files, in sha256sum's format


def sha256(path: str | Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_manifest(folder: str | Path, files: Sequence[str]) -> Path:
    """Write ``folder/SHA256SUMS``: the SHA-256 of each of ``files`` (names inside ``folder``), in the format of
    ``sha256sum`` (so ``sha256sum -c SHA256SUMS`` checks them too), atomically."""
    folder = Path(folder)
    lines = [f"{sha256(folder / name)}  {name}\n" for name in sorted(files)]
    return atomic_write_text(folder / MANIFEST, "".join(lines))


def verify_manifest(folder: str | Path, required: Sequence[str] = (), error: type[Exception] = ValueError,
                    fix: str = "restore the folder's files", only: Sequence[str] | None = None) -> dict[str, str]:
    """Check the files of ``folder`` against its ``SHA256SUMS`` (each listed file, or those of ``only``); returns
    name -> SHA-256.

    Raises:
        ``error``, in one line: the manifest is missing or does not list one of
        ``required``, a listed file is missing, or a file does not match its SHA-256 (left as it is).
    """
    folder = Path(folder)
    path = folder / MANIFEST
    if not path.is_file():
        raise error(f"{path} is missing: the folder's files (its card included) cannot be checked; {fix}")
    recorded: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        digest, _, name = line.partition("  ")
        if name:
            recorded[name.lstrip("*")] = digest
    for name in required:
        if name not in recorded:
            raise error(f"{path} records no SHA-256 for {name}: the manifest is incomplete; {fix}")
    for name in only if only is not None else recorded:
        file = folder / name
        if not file.is_file():
            raise error(f"{file} is missing; {fix}")
        actual = sha256(file)
        if actual != recorded.get(name):
            raise error(f"{file} does not match its recorded SHA-256 ({MANIFEST}: expected "
                        f"{str(recorded.get(name))[:12]}..., found {actual[:12]}...): the file was edited or "
                        f"truncated. It was left as it is; {fix}")
    return recorded
