"""A run folder is owned: ``workbench train --out RUN`` never writes over another run unless asked.

A run folder holds ``run.json`` (written when the run starts: the folder holds a run), the checkpoints
(``ckpt_stepNNNNNNN.pt``, ``best.pt``, ``last.pt``), ``history.json``, ``summary.json`` and, written last,
``complete.json`` (the run finished as asked: its settings and step count). While a training writes the folder it
holds an exclusive lock on ``train.lock`` (``flock``: the kernel releases it when the process dies, even by
SIGKILL), so a second training into the same folder is refused instead of interleaving its files.

:func:`plan` decides what a training may do with a folder, changing nothing (so a refusal, or a later error such as
missing data, loses nothing); :func:`open_run` then takes the folder: moves an old run aside when asked
(``--overwrite``: renamed to ``RUN.replaced-YYYYmmdd-HHMMSS``, never deleted), creates it, locks it, clears the
temporary files an interrupted write left, and records the run.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from workbench.errors import RunFolderError
from workbench.translation.files import atomic_write_text

log = logging.getLogger(__name__)

RUN_RECORD = "run.json"  # written first: this folder holds a run
COMPLETE_RECORD = "complete.json"  # written last: the run finished as asked
LOCK_FILE = "train.lock"
# the files whose presence means "a run lives here"
RUN_FILES = (RUN_RECORD, "last.pt", "best.pt", "history.json", "summary.json", "averaged.pt", COMPLETE_RECORD)


def holds_run(folder: str | Path) -> bool:
    """True when ``folder`` holds (part of) a training run: any of :data:`RUN_FILES` or a numbered checkpoint."""
    folder = Path(folder)
    if not folder.is_dir():
        return False
    return any((folder / name).exists() for name in RUN_FILES) or any(folder.glob("ckpt_step*.pt"))


def check_writable_folder(out: str | Path, option: str = "--out") -> Path:
    """Refuse, in one line, an ``out`` that is a file, lies under a file, or cannot be written; returns it."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise RunFolderError(f"{option} {out} is a file, not a folder: choose a folder")
    existing = out
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        raise RunFolderError(f"{option} {out}: {existing} is a file, not a folder: choose a folder")
    try:  # os.access says yes to root everywhere: try it (an empty folder, removed at once)
        if not os.access(existing, os.W_OK | os.X_OK):
            raise PermissionError(errno.EACCES, "permission denied")
        os.rmdir(tempfile.mkdtemp(prefix=".workbench-probe-", dir=existing))
    except OSError as exc:
        raise RunFolderError(f"{option} {out}: cannot write into {existing} ({(exc.strerror or str(exc)).lower()}): "
                             "choose a folder you can write to") from exc
    return out


def aside_name(out: Path) -> Path:
    """Where ``--overwrite`` moves the old run: ``RUN.replaced-YYYYmmdd-HHMMSS`` beside it (``-2``... if taken)."""
    base = out.with_name(f"{out.name}.replaced-{time.strftime('%Y%m%d-%H%M%S')}")
    candidate, n = base, 1
    while candidate.exists():
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    return candidate


def _would_be_lost(out: Path) -> list[str]:
    """The files that starting the run in ``out`` again from step 0 would overwrite and that a restart does not write
    again as they were: those of a run that had finished (``summary.json``, ``complete.json``, an ``averaged.pt``),
    or any run file of a folder that no training started (no ``run.json``: the files are someone's own). A run killed
    before its first epoch ended has neither; its restart, on the same batches from the same seed, writes again what
    it had written."""
    if not (out / RUN_RECORD).exists():
        return [n for n in RUN_FILES if (out / n).exists()] + sorted(p.name for p in out.glob("ckpt_step*.pt"))
    return [n for n in ("summary.json", COMPLETE_RECORD, "averaged.pt") if (out / n).exists()]


def plan(out: str | Path, resume: bool = False, overwrite: bool = False, restart: bool = False) -> str:
    """What a training may do with the folder ``out``, changing nothing: ``"new"`` (start a run),
    ``"resume"`` (continue the run there) or ``"overwrite"`` (move the run there aside, start a new one).

    A run without ``last.pt`` (stopped before its first epoch ended, or the file removed) cannot be continued:
    ``--resume`` starts it again from step 0, which is refused where that would overwrite a finished run's files or
    files no training wrote (:func:`_would_be_lost`), unless ``restart`` (a cache entry of the package's own).

    Raises:
        RunFolderError: ``out`` cannot be written; ``--resume`` with ``--overwrite``; ``--resume`` where no run
            is, or where it would start again over the run's files; a run is there and neither ``--resume`` nor
            ``--overwrite`` was given; another training holds it.
    """
    out = Path(os.path.abspath(check_writable_folder(out)))  # "." and ".." by their names (the aside name needs one)
    if resume and overwrite:
        raise RunFolderError("--resume and --overwrite exclude each other: --resume continues the run in --out, "
                             "--overwrite moves it aside and starts a new one")
    there = holds_run(out)
    if resume and not there:
        raise RunFolderError(f"--resume: {out} holds no run to resume (no {RUN_RECORD} nor last.pt): check the "
                             "path, or drop --resume to start a new run there")
    lost = _would_be_lost(out) if there and not (out / "last.pt").exists() else []
    if there and not (resume or overwrite):
        how = "" if lost else "pass --resume to continue it, or "
        raise RunFolderError(f"{out} already holds a run: {how}pass --overwrite to move it aside (to "
                             f"{aside_name(out).name}) and start a new one, or choose another --out")
    if resume and lost and not restart:
        shown = ", ".join(lost[:4]) + (f" and {len(lost) - 4} more" if len(lost) > 4 else "")
        raise RunFolderError(f"--resume: {out} has no last.pt to continue from (the run stopped before an epoch "
                             f"ended, or last.pt was removed), and starting again from step 0 would overwrite "
                             f"{shown}: pass --overwrite instead to move that run aside (to {aside_name(out).name}) "
                             "and start a new one, or choose another --out")
    if there:
        _refuse_if_locked(out)
    return "resume" if resume else "overwrite" if there else "new"


def _flock(f: IO[Any]) -> bool:
    """An exclusive, non-blocking lock on the open file ``f``; False if another process holds it. Systems without
    ``fcntl`` (Windows) get no lock (True)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        return True
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _locked_message(out: Path, holder: str) -> str:
    pids = holder.split()
    who = f" (pid {pids[-1]})" if pids else ""
    return (f"another training{who} is writing {out}: wait for it to end, or choose another --out "
            f"(the lock is {out / LOCK_FILE}; it goes away with that process)")


def _refuse_if_locked(out: Path) -> None:
    lock = out / LOCK_FILE
    if not lock.exists():
        return
    with open(lock, "a+") as f:
        if not _flock(f):
            f.seek(0)
            raise RunFolderError(_locked_message(out, f.read().strip()))


@contextlib.contextmanager
def run_lock(out: Path) -> Iterator[None]:
    """Hold the exclusive lock of the run folder ``out`` for the block (refused in one line if another holds it)."""
    try:
        f = open(out / LOCK_FILE, "a+")
    except OSError as exc:
        raise RunFolderError(f"cannot write {out / LOCK_FILE} ({exc.strerror}): choose a folder you can write to") from exc
    try:
        if not _flock(f):
            f.seek(0)
            raise RunFolderError(_locked_message(out, f.read().strip()))
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        yield
    finally:
        f.close()  # releases the lock


def clear_partial_writes(out: Path) -> list[Path]:
    """Remove the temporary files (``.NAME.XXXX.tmp``) that a write interrupted before its rename left in ``out``:
    they never held a file under its final name. Returns what was removed."""
    stale = sorted(out.glob(".*.tmp"))
    for p in stale:
        p.unlink(missing_ok=True)
    if stale:
        log.info("removed %d partial file(s) an interrupted write left in %s", len(stale), out)
    return stale


@contextlib.contextmanager
def open_run(out: str | Path, mode: str, settings: dict[str, Any]) -> Iterator[Path]:
    """Take the run folder ``out`` as :func:`plan` decided (``mode``) for the block: move an old run aside
    (``"overwrite"``), create and lock the folder, clear partial writes, write ``run.json`` for a new run, and
    remove ``complete.json`` (the run is not complete while it trains). Yields the folder."""
    out = Path(out)
    if mode == "overwrite" and holds_run(out):
        _refuse_if_locked(out)
        aside = aside_name(out)
        try:
            out.rename(aside)
        except OSError as exc:
            raise RunFolderError(f"--overwrite: cannot move {out} aside to {aside} ({exc.strerror}): move it "
                                 "yourself or choose another --out") from exc
        log.info("--overwrite: moved the earlier run in %s to %s (nothing deleted)", out, aside)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunFolderError(f"--out {out}: cannot create the folder ({exc.strerror}): choose a folder you can "
                             "write to") from exc
    with run_lock(out):
        clear_partial_writes(out)
        (out / COMPLETE_RECORD).unlink(missing_ok=True)
        if not (out / RUN_RECORD).exists():
            write_record(out / RUN_RECORD, {"settings": settings, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        yield out


def write_record(path: Path, record: dict[str, Any]) -> Path:
    """A JSON record of the run folder, written atomically; a full disk or a read-only folder is one
    :class:`RunFolderError` line, and the previous file there is left as it was."""
    try:
        return atomic_write_text(path, json.dumps(record, indent=2, default=str) + "\n")
    except OSError as exc:
        raise RunFolderError(f"could not write {path} ({exc.strerror or exc}); the previous file there, if any, is "
                             "intact: free disk space or choose another --out, then --resume") from exc


def read_record(path: Path) -> dict[str, Any] | None:
    """A JSON record of the run folder, or None when it is missing or unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


# what a resumed run may change: its budget, its bookkeeping and where it runs; every other setting (data, tokenizer,
# model, recipe, seed) is the run's own, recorded in run.json when it started
RESUMABLE = frozenset({"max_steps", "epochs", "max_minutes", "patience", "log_every", "checkpoint_every",
                       "keep_checkpoints", "eval_bleu", "bleu_max_sentences", "device", "precision", "compile",
                       "data_dir"})


def recorded_settings(out: str | Path) -> dict[str, Any]:
    """The flat settings ``run.json`` recorded when the run in ``out`` started ({} where there is none)."""
    record = read_record(Path(out) / RUN_RECORD) or {}
    settings = record.get("settings") if isinstance(record, dict) else None
    return settings if isinstance(settings, dict) else {}


def check_resume_settings(out: str | Path, settings: dict[str, Any]) -> None:
    """Refuse, in one line, a resume whose settings differ from the run's own where a resume may not change them
    (:data:`RESUMABLE` lists what may change)."""
    recorded = recorded_settings(out)

    def same(a: Any, b: Any) -> bool:
        return json.dumps(a, default=str, sort_keys=True) == json.dumps(b, default=str, sort_keys=True)

    differ = {k: (recorded[k], v) for k, v in settings.items()
              if k in recorded and k not in RESUMABLE and not same(recorded[k], v)}
    if differ:
        shown = ", ".join(f"{k} {was!r} (asked: {now!r})" for k, (was, now) in sorted(differ.items()))
        raise RunFolderError(f"--resume: the run in {out} was started with {shown}: a resumed run keeps its data, "
                             "tokenizer, model and recipe (only the budget, checkpointing, logging, device and "
                             "precision may change); give its settings, or train a new run in another --out")


def remove_later_snapshots(out: Path, step: int) -> None:
    """Remove the snapshots an interrupted run wrote after ``step``, where the resumed run goes on from (its last
    finished epoch): left in place they would pass for the newest ones (pruning deleted the resumed run's own,
    averaging used these). Nothing is lost: a resumed run takes those steps again as it took them (resuming is
    deterministic), and writes them again."""
    from workbench.translation.checkpoint import step_checkpoints

    later = [p for p in step_checkpoints(out) if int(p.stem.removeprefix("ckpt_step")) > step]
    for path in later:
        path.unlink()
    if later:
        log.warning("removed %d snapshot(s) of the interrupted run after step %d (%s to %s): the run resumes from "
                    "its last finished epoch and takes those steps again", len(later), step, later[0].name,
                    later[-1].name)
