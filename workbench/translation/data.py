"""Data: Multi30k (Task 1) with checksums and a user cache, the user's own parallel text, synthetic tasks.

Multi30k is read from a local folder (``data_dir=`` or ``$WORKBENCH_MULTI30K``) or downloaded from the dataset's
public repository into a per-user cache. Every file is checked against the SHA-256 kept in the package
(``multi30k_sha256.json``); a file that does not match is moved aside to ``NAME.corrupt`` (never deleted) in the
workbench's own download cache, and left in place in a folder the user chose.
The splits the package holds no checksum for (the 2017 and 2018 test sets) are used unchecked, with a warning.

No torchtext: the files are gzipped plain text, one sentence a line, aligned across languages.

Example:
    >>> pairs = load_multi30k("val", src="de", tgt="en")  # doctest: +SKIP
    >>> len(pairs), pairs[0]  # doctest: +SKIP
    (1014, ('Eine Gruppe von Männern lädt Baumwolle auf einen Lastwagen', 'A group of men are loading cotton onto a truck'))
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import random
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterable
from functools import lru_cache
from importlib import resources
from pathlib import Path

from platformdirs import user_cache_dir

from workbench.errors import ChecksumError, DataError
from workbench.translation.files import sha256  # noqa: F401 (data.sha256: one SHA-256 reader)

log = logging.getLogger(__name__)

BASE_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"
ENV_VAR = "WORKBENCH_MULTI30K"
APP_NAME = "attention-workbench"
# The Task 1 splits of the upstream repository (multi30k/dataset, data/task1/raw) and the languages each has.
# Czech exists for train/val/test_2016_flickr and test_2018_flickr only: there is no test_2017_*.cs.
SPLITS: dict[str, tuple[str, ...]] = {
    "train": ("en", "de", "fr", "cs"),  # 29,000 sentences
    "val": ("en", "de", "fr", "cs"),  # 1,014
    "test_2016_flickr": ("en", "de", "fr", "cs"),  # 1,000
    "test_2017_flickr": ("en", "de", "fr"),  # 1,000
    "test_2017_mscoco": ("en", "de", "fr"),  # 461 (ambiguous COCO captions)
    "test_2018_flickr": ("en", "de", "fr", "cs"),  # 1,071
}
TASKS = ("copy", "reverse", "sort")  # synthetic tasks


# ---------------------------------------------------------------------------------------------------------------
# locations and checksums
# ---------------------------------------------------------------------------------------------------------------
def resolve_data_dir(data_dir: str | Path | None = None) -> Path:
    """The folder to read Multi30k from.

    Args:
        data_dir: an explicit folder; wins over everything else.

    Returns:
        ``data_dir`` if given, else ``$WORKBENCH_MULTI30K`` if set and non-empty, else the per-user cache
        ``platformdirs.user_cache_dir("attention-workbench")/multi30k``. The folder need not exist yet.
    """
    if data_dir is not None:
        return Path(data_dir).expanduser()
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser()
    return Path(user_cache_dir(APP_NAME)) / "multi30k"


def file_name(split: str, lang: str) -> str:
    """The upstream file name of one side of a split, e.g. ``val.de.gz``."""
    return f"{split}.{lang}.gz"


def file_url(split: str, lang: str) -> str:
    """Where :func:`download_multi30k` fetches ``{split}.{lang}.gz`` from."""
    return BASE_URL + file_name(split, lang)


@lru_cache(maxsize=1)
def checksums() -> dict[str, str]:
    """SHA-256 of every file the package knows (``{split}.{lang}.gz`` -> hex digest)."""
    text = resources.files("workbench").joinpath("multi30k_sha256.json").read_text(encoding="utf-8")
    return dict(json.loads(text))


def _check_split(split: str, langs: Iterable[str]) -> None:
    if split not in SPLITS:
        raise DataError(f"unknown Multi30k split {split!r}: choose one of {list(SPLITS)}")
    for lang in langs:
        if lang not in SPLITS[split]:
            raise DataError(
                f"Multi30k split {split!r} has no language {lang!r}: it has {list(SPLITS[split])} "
                f"(languages by split: { {s: list(ls) for s, ls in SPLITS.items()} })"
            )


def _aside_path(path: Path) -> Path:
    """``NAME.corrupt``, or ``NAME.corrupt.1``, ``.2``... so that no earlier bad copy is overwritten."""
    aside = path.with_name(path.name + ".corrupt")
    n = 0
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.corrupt.{n}")
    return aside


def _own_folder(folder: Path) -> bool:
    """True for the workbench's own download cache, the one folder whose files it may move: a folder the user chose
    (``data_dir``, ``$WORKBENCH_MULTI30K``) is only ever read."""
    try:
        return folder.resolve() == (Path(user_cache_dir(APP_NAME)) / "multi30k").resolve()
    except OSError:
        return False


def _checksum_error(path: Path, shown_as: Path, expected: str, actual: str, move: bool = True) -> ChecksumError:
    """Move the bad file aside where ``move`` (never delete it) and build the error that says what happened to it and
    how to fix it."""
    if not move:
        where = "It was left as it is: the folder is yours, so replace the file with an intact copy."
    else:
        aside = _aside_path(shown_as)
        try:
            os.replace(path, aside)
            where = f"The bad copy was moved aside to {aside} (not deleted)."
        except OSError as exc:
            where = f"It could not be moved aside ({exc}): the folder is read-only, so replace the file by hand."
    return ChecksumError(
        f"{shown_as} does not match its published SHA-256: expected {expected}, got {actual}. {where} "
        f"Fix: download a fresh copy from {BASE_URL}{shown_as.name} into {shown_as.parent} "
        "(download_multi30k() or load_multi30k(..., download=True) does it for you), "
        f"or point ${ENV_VAR} (or --data-dir, data_dir= in Python) at a folder with intact files."
    )


_VERIFIED: set[tuple[str, int, int]] = set()  # (resolved path, size, mtime_ns) of files already checked
_WARNED: set[str] = set()  # files without a packaged checksum we already warned about


def verify_file(path: str | Path) -> None:
    """Check a Multi30k file against its packaged SHA-256.

    The result is remembered per (path, size, modification time), so repeated loads hash each file once.
    Files without a packaged checksum (the 2017/2018 test sets) pass with a logged warning.

    Raises:
        ChecksumError: the hash differs. In the workbench's own download cache the file has been moved aside to
            ``NAME.corrupt`` (never deleted), so the next load downloads it again; in a folder the user chose it is
            left in place.
    """
    path = Path(path)
    expected = checksums().get(path.name)
    if expected is None:
        if path.name not in _WARNED:
            _WARNED.add(path.name)
            log.warning("no packaged SHA-256 for %s: using %s unchecked", path.name, path)
        return
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key in _VERIFIED:
        return
    actual = sha256(path)
    if actual != expected:
        raise _checksum_error(path, path, expected, actual, move=_own_folder(path.parent))
    _VERIFIED.add(key)


# ---------------------------------------------------------------------------------------------------------------
# download
# ---------------------------------------------------------------------------------------------------------------
def _as_tuple(value: str | Iterable[str] | None, default: Iterable[str]) -> tuple[str, ...]:
    if value is None:
        return tuple(default)
    return (value,) if isinstance(value, str) else tuple(value)


def _missing_message(paths: list[Path], folder: Path, reason: str) -> str:
    files = ", ".join(str(p) for p in paths)
    urls = ", ".join(BASE_URL + p.name for p in paths)
    return (
        f"Multi30k file(s) missing: {reason}. Fix: put these files at {files} (download them from {urls}), "
        f"or set ${ENV_VAR} (or --data-dir, data_dir= in Python) to a folder that already holds them. Folder now "
        f"used: {folder}"
    )


def _fetch(name: str, folder: Path, timeout: float) -> Path:
    """Download one file to a temporary file in ``folder``, check it, then rename it into place atomically."""
    target = folder / name
    fd, tmp_name = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".part")
    tmp = Path(tmp_name)
    h = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(BASE_URL + name, timeout=timeout) as resp:
            while block := resp.read(1 << 16):
                out.write(block)
                h.update(block)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a partial download, not a user's file
        raise
    expected, actual = checksums().get(name), h.hexdigest()
    if expected is not None and actual != expected:
        raise _checksum_error(tmp, target, expected, actual)
    if expected is None and name not in _WARNED:
        _WARNED.add(name)
        log.warning("no packaged SHA-256 for %s: using the download unchecked", name)
    os.replace(tmp, target)
    if expected is not None:
        st = target.stat()
        _VERIFIED.add((str(target.resolve()), st.st_size, st.st_mtime_ns))
    return target


def download_multi30k(
    splits: str | Iterable[str] | None = None,
    langs: str | Iterable[str] | None = None,
    cache_dir: str | Path | None = None,
    *,
    force: bool = False,
    timeout: float = 30.0,
) -> list[Path]:
    """Download Multi30k Task 1 files into a folder (``urllib``; temporary file, then an atomic rename).

    Files already there are verified instead of fetched again (unless ``force``). Every download is checked
    against its packaged SHA-256 before it takes its final name.

    Args:
        splits: one split, several, or None for all of :data:`SPLITS`.
        langs: one language, several, or None for every language each split has.
        cache_dir: target folder; None resolves it with :func:`resolve_data_dir`.
        force: download even when a file is already present (the old copy is replaced only after the new
            one passed its check).
        timeout: seconds per network operation.

    Returns:
        The paths of the requested files, all present and verified.

    Raises:
        DataError: an unknown split or language; the network failed (the message lists every file still
            missing and where to put it); the folder cannot be written.
        ChecksumError: a downloaded or present file does not match: a download, or a file in the workbench's own
            cache, is moved aside to ``NAME.corrupt``; a file the user put in ``cache_dir`` is left in place.
    """
    folder = resolve_data_dir(cache_dir)
    wanted: list[tuple[str, str]] = []
    for split in _as_tuple(splits, SPLITS):
        split_langs = _as_tuple(langs, SPLITS.get(split, ()))
        _check_split(split, split_langs)
        wanted += [(split, lang) for lang in split_langs]
    paths = [folder / file_name(s, lang) for s, lang in wanted]
    todo = [p for p in paths if force or not p.exists()]
    for p in paths:
        if p not in todo:
            verify_file(p)
    if not todo:
        return paths
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataError(
            f"cannot create the Multi30k folder {folder} ({exc}): choose a writable folder with "
            f"--data-dir (data_dir= / cache_dir= in Python) or ${ENV_VAR}"
        ) from exc
    from tqdm.auto import tqdm

    for i, p in enumerate(tqdm(todo, desc="Multi30k", unit="file", leave=False, disable=len(todo) < 3)):
        log.info("downloading %s into %s", BASE_URL + p.name, folder)
        try:
            _fetch(p.name, folder, timeout)
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            still = [q for q in todo[i:] if not q.exists() or force]
            raise DataError(
                _missing_message(still, folder, f"could not download {BASE_URL + p.name} ({exc}), the network may be off")
            ) from exc
        except OSError as exc:
            raise DataError(
                f"could not write {p} ({exc}): make {folder} writable or choose another folder with "
                f"--data-dir (data_dir= / cache_dir= in Python) or ${ENV_VAR}"
            ) from exc
    return paths


def multi30k_file(split: str, lang: str, data_dir: str | Path | None = None, download: bool = True) -> Path:
    """Path of a verified ``{split}.{lang}.gz``, downloading it into the data folder if it is missing."""
    return _multi30k_files(split, (lang,), data_dir, download)[0]


def _multi30k_files(split: str, langs: tuple[str, ...], data_dir: str | Path | None, download: bool) -> list[Path]:
    _check_split(split, langs)
    folder = resolve_data_dir(data_dir)
    paths = [folder / file_name(split, lang) for lang in langs]
    missing = [(lang, p) for lang, p in zip(langs, paths, strict=True) if not p.exists()]
    if missing and not download:
        raise DataError(_missing_message([p for _, p in missing], folder, "downloading is off (download=False)"))
    if missing:
        download_multi30k(split, [lang for lang, _ in missing], folder)
    for p in paths:
        verify_file(p)
    return paths


# ---------------------------------------------------------------------------------------------------------------
# reading text
# ---------------------------------------------------------------------------------------------------------------
def read_lines(path: str | Path) -> list[str]:
    """Lines of a UTF-8 text file, gzipped or not, each stripped of surrounding whitespace.

    Lines are split on ``\\n`` only (a stray ``\\r`` cannot shift the alignment); a UTF-8 byte-order mark and
    one trailing blank line are dropped; blank lines inside the file are kept (they hold alignment).

    Raises:
        DataError: the file is missing, unreadable, not UTF-8, or has no sentence.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path} does not exist or is not a file: check the path")
    try:
        with open(path, "rb") as f:
            gzipped = f.read(2) == b"\x1f\x8b"
        opener = gzip.open if gzipped else open
        with opener(path, "rt", encoding="utf-8-sig", newline="\n") as f:
            lines = [line.strip() for line in f]
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise DataError(f"cannot read {path} as UTF-8 text ({exc}): give a plain or gzipped UTF-8 text file") from exc
    if lines and lines[-1] == "":
        lines.pop()
    if not any(lines):
        raise DataError(f"{path} is empty: it must hold one sentence a line")
    return lines


def _pair_up(src_lines: list[str], tgt_lines: list[str], src_name: str, tgt_name: str) -> list[tuple[str, str]]:
    if len(src_lines) != len(tgt_lines):
        raise DataError(
            f"{src_name} has {len(src_lines)} lines but {tgt_name} has {len(tgt_lines)}: parallel files must be "
            "aligned line by line (line i of one translates line i of the other); check that both files "
            "belong to the same split"
        )
    return list(zip(src_lines, tgt_lines, strict=True))


def load_multi30k(
    split: str,
    src: str = "de",
    tgt: str = "en",
    data_dir: str | Path | None = None,
    limit: int | None = None,
    download: bool = True,
) -> list[tuple[str, str]]:
    """Aligned (source, target) sentence pairs of a Multi30k Task 1 split.

    Args:
        split: one of :data:`SPLITS` (``"train"``, ``"val"``, ``"test_2016_flickr"``...).
        src: source language code (``"de"``, ``"en"``, ``"fr"``, ``"cs"``).
        tgt: target language code, different from ``src``.
        data_dir: folder holding ``{split}.{lang}.gz``; see :func:`resolve_data_dir` for the default.
        limit: keep only the first ``limit`` pairs (None: all).
        download: fetch missing files into the data folder.

    Returns:
        ``[(source sentence, target sentence), ...]``, stripped, in corpus order.

    Raises:
        DataError: unknown split/language, missing files (offline), empty or misaligned files.
        ChecksumError: a file does not match its packaged SHA-256 (in the workbench's own cache it is moved aside to
            ``NAME.corrupt``; in a folder the user chose it is left in place).
    """
    _check_split(split, (src, tgt))
    if src == tgt:
        raise DataError(f"source and target language are both {src!r}: choose two different languages")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise DataError(f"limit={limit!r} is invalid: pass a positive number of pairs, or None for all")
    sp, tp = _multi30k_files(split, (src, tgt), data_dir, download)
    pairs = _pair_up(read_lines(sp), read_lines(tp), str(sp), str(tp))
    return pairs[:limit] if limit is not None else pairs


def load_parallel_text(src_path: str | Path, tgt_path: str | Path) -> list[tuple[str, str]]:
    """The user's own parallel data: two aligned UTF-8 text files (plain or gzipped), one sentence a line.

    Raises:
        DataError: a missing, unreadable or empty file, or different line counts (both files named).
    """
    return _pair_up(read_lines(src_path), read_lines(tgt_path), str(src_path), str(tgt_path))


def load_tsv(path: str | Path) -> list[tuple[str, str]]:
    """The user's own parallel data as ``source<TAB>target`` lines (UTF-8, plain or gzipped).

    Raises:
        DataError: a missing or empty file, or a line without exactly one tab (its number is named).
    """
    pairs = []
    for i, line in enumerate(read_lines(path), start=1):
        parts = line.split("\t")
        if len(parts) != 2:
            raise DataError(
                f"{path}, line {i}: expected 'source<TAB>target', found {len(parts)} tab-separated field(s) "
                f"in {line[:60]!r}: put exactly one tab between the sentences"
            )
        pairs.append((parts[0].strip(), parts[1].strip()))
    return pairs


# ---------------------------------------------------------------------------------------------------------------
# synthetic tasks
# ---------------------------------------------------------------------------------------------------------------
def synthetic_pairs(
    task: str, n: int, min_len: int = 3, max_len: int = 10, vocab_size: int = 20, seed: int = 0
) -> list[tuple[str, str]]:
    """Toy translation tasks on the words ``t0 .. t{vocab_size-1}``.

    ``copy`` repeats the source, ``reverse`` reverses it, ``sort`` orders its tokens by their number
    (``t2 t10 t7`` -> ``t2 t7 t10``). Lengths are uniform in [min_len, max_len]. Uses its own
    ``random.Random(seed)``: the same arguments give the same pairs, and global random state is untouched.

    Returns:
        ``[(source, target), ...]`` as space-separated token strings, e.g. ``("t3 t7 t1", "t1 t3 t7")``.

    Raises:
        DataError: unknown task or impossible sizes.
    """
    if task not in TASKS:
        raise DataError(f"unknown synthetic task {task!r}: choose one of {list(TASKS)}")
    if n < 0:
        raise DataError(f"n={n} pairs is negative: ask for 0 or more")
    if not 1 <= min_len <= max_len:
        raise DataError(f"need 1 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}")
    if vocab_size < 1:
        raise DataError(f"vocab_size={vocab_size} is too small: use at least 1 (10-50 makes a good toy task)")
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        ids = [rng.randrange(vocab_size) for _ in range(rng.randint(min_len, max_len))]
        out = ids if task == "copy" else ids[::-1] if task == "reverse" else sorted(ids)
        pairs.append((" ".join(f"t{i}" for i in ids), " ".join(f"t{i}" for i in out)))
    return pairs


__all__ = [
    "BASE_URL",
    "ENV_VAR",
    "SPLITS",
    "TASKS",
    "checksums",
    "download_multi30k",
    "file_name",
    "file_url",
    "load_multi30k",
    "load_parallel_text",
    "load_tsv",
    "multi30k_file",
    "read_lines",
    "resolve_data_dir",
    "sha256",
    "synthetic_pairs",
    "verify_file",
]
