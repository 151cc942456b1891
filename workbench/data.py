"""Data: Multi30k (Task 1) with checksums and a user cache, the user's own parallel text, synthetic tasks.

Multi30k is read from a local folder (``data_dir=`` or ``$WORKBENCH_MULTI30K``) or downloaded from the dataset's
public repository into a per-user cache, and every file is checked against the SHA-256 kept in the package.
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
from functools import lru_cache
from importlib import resources
from pathlib import Path

from platformdirs import user_cache_dir

from .errors import ChecksumError, DataError

log = logging.getLogger(__name__)

BASE_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"
ENV_VAR = "WORKBENCH_MULTI30K"
# official Task 1 splits and the languages each has
SPLITS: dict[str, tuple[str, ...]] = {
    "train": ("en", "de", "fr", "cs"),
    "val": ("en", "de", "fr", "cs"),
    "test_2016_flickr": ("en", "de", "fr", "cs"),
    "test_2017_flickr": ("en", "de", "fr"),
    "test_2017_mscoco": ("en", "de", "fr"),
    "test_2018_flickr": ("en", "de", "fr", "cs"),
}


@lru_cache(maxsize=1)
def checksums() -> dict[str, str]:
    """Published SHA-256 of every known file (``{split}.{lang}.gz`` -> hex digest)."""
    text = resources.files("workbench").joinpath("multi30k_sha256.json").read_text()
    return json.loads(text)


def resolve_data_dir(data_dir: str | Path | None = None) -> Path:
    """The folder to read Multi30k from: the argument, else ``$WORKBENCH_MULTI30K``, else the user cache."""
    if data_dir is not None:
        return Path(data_dir).expanduser()
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser()
    return Path(user_cache_dir("attention-workbench")) / "multi30k"


def _check_split(split: str, langs: tuple[str, ...]) -> None:
    if split not in SPLITS:
        raise DataError(f"unknown Multi30k split {split!r}: choose one of {list(SPLITS)}")
    for lang in langs:
        if lang not in SPLITS[split]:
            raise DataError(f"Multi30k split {split!r} has no language {lang!r}: it has {list(SPLITS[split])}")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


_VERIFIED: dict[tuple[str, int, int], bool] = {}


def verify_file(path: Path) -> None:
    """Check a file against its published SHA-256; a bad file is moved aside to ``NAME.corrupt``, never deleted."""
    expected = checksums().get(path.name)
    if expected is None:
        log.warning("no published checksum for %s: using it unchecked", path.name)
        return
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if _VERIFIED.get(key):
        return
    actual = sha256(path)
    if actual != expected:
        aside = path.with_name(path.name + ".corrupt")
        moved = ""
        try:
            os.replace(path, aside)
            moved = f" It was moved aside to {aside} (not deleted)."
        except OSError:
            moved = " It could not be moved aside (read-only folder): replace it by hand."
        raise ChecksumError(
            f"{path} does not match its published SHA-256 (expected {expected}, got {actual}).{moved} "
            f"Download it again from {BASE_URL}{path.name}, or delete it to let the workbench re-download it."
        )
    _VERIFIED[key] = True


def download_file(name: str, folder: Path, timeout: float = 30.0) -> Path:
    """Download ``name`` from the dataset's repository into ``folder`` (temporary file, then an atomic rename)."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / name
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(BASE_URL + name, timeout=timeout) as resp:
            while block := resp.read(1 << 16):
                out.write(block)
        os.replace(tmp, target)
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        Path(tmp).unlink(missing_ok=True)
        raise DataError(
            f"could not download {BASE_URL + name} ({exc}). If you are offline, put the file at {target} "
            f"(or point ${ENV_VAR} / data_dir= at a folder holding the Multi30k Task 1 raw files)"
        ) from exc
    verify_file(target)
    return target


def multi30k_file(split: str, lang: str, data_dir: str | Path | None = None, download: bool = True) -> Path:
    """Path of a verified ``{split}.{lang}.gz``, downloading it into the cache folder if missing."""
    _check_split(split, (lang,))
    folder = resolve_data_dir(data_dir)
    path = folder / f"{split}.{lang}.gz"
    if path.exists():
        verify_file(path)
        return path
    if not download:
        raise DataError(
            f"{path} is missing and downloading is off: put {split}.{lang}.gz there (from {BASE_URL}), "
            f"or set ${ENV_VAR} / data_dir= to a folder that has it"
        )
    log.info("downloading %s into %s", path.name, folder)
    return download_file(path.name, folder)


def read_lines(path: str | Path) -> list[str]:
    """Lines of a text file (gzipped if it ends in .gz), stripped of surrounding whitespace."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path} does not exist: check the path")
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            lines = [line.strip() for line in f]
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise DataError(f"cannot read {path} as UTF-8 text ({exc}): is it the right file?") from exc
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise DataError(f"{path} is empty: it must hold one sentence a line")
    return lines


def _pair_up(src_lines: list[str], tgt_lines: list[str], src_name: str, tgt_name: str) -> list[tuple[str, str]]:
    if len(src_lines) != len(tgt_lines):
        raise DataError(
            f"{src_name} has {len(src_lines)} lines but {tgt_name} has {len(tgt_lines)}: parallel files must be "
            "aligned line by line (line i of one translates line i of the other)"
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
    """Aligned (source, target) sentence pairs of a Multi30k split."""
    _check_split(split, (src, tgt))
    if src == tgt:
        raise DataError(f"source and target language are both {src!r}: choose two different languages")
    sp = multi30k_file(split, src, data_dir, download)
    tp = multi30k_file(split, tgt, data_dir, download)
    pairs = _pair_up(read_lines(sp), read_lines(tp), str(sp), str(tp))
    return pairs[:limit] if limit else pairs


def load_parallel_text(src_path: str | Path, tgt_path: str | Path) -> list[tuple[str, str]]:
    """The user's own parallel data: two aligned plain-text (or .gz) files, one sentence a line."""
    return _pair_up(read_lines(src_path), read_lines(tgt_path), str(src_path), str(tgt_path))


def load_tsv(path: str | Path) -> list[tuple[str, str]]:
    """The user's own parallel data as ``source<TAB>target`` lines."""
    pairs = []
    for i, line in enumerate(read_lines(path), start=1):
        parts = line.split("\t")
        if len(parts) != 2:
            raise DataError(f"{path}, line {i}: expected 'source<TAB>target', found {len(parts)} field(s)")
        pairs.append((parts[0].strip(), parts[1].strip()))
    return pairs


def synthetic_pairs(
    task: str, n: int, min_len: int = 3, max_len: int = 10, vocab_size: int = 20, seed: int = 0
) -> list[tuple[str, str]]:
    """Toy translation tasks on words ``t0 .. t{vocab_size-1}``: ``copy``, ``reverse`` or ``sort``.

    ``sort`` orders tokens by their number. Seeded with its own generator (global state untouched).
    """
    if task not in ("copy", "reverse", "sort"):
        raise DataError(f"unknown synthetic task {task!r}: choose 'copy', 'reverse' or 'sort'")
    if not 1 <= min_len <= max_len:
        raise DataError(f"need 1 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}")
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        ids = [rng.randrange(vocab_size) for _ in range(rng.randint(min_len, max_len))]
        out = ids if task == "copy" else ids[::-1] if task == "reverse" else sorted(ids)
        pairs.append((" ".join(f"t{i}" for i in ids), " ".join(f"t{i}" for i in out)))
    return pairs
