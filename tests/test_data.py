"""Multi30k loading, checksums, offline behaviour, user files, synthetic tasks."""

from __future__ import annotations

import gzip
import shutil
import urllib.request

import pytest

from workbench import ChecksumError, DataError
from workbench.data import (
    SPLITS,
    checksums,
    load_multi30k,
    load_parallel_text,
    load_tsv,
    resolve_data_dir,
    synthetic_pairs,
)


def test_real_val_split_is_aligned(multi30k_dir):
    pairs = load_multi30k("val", "de", "en", data_dir=multi30k_dir)
    assert len(pairs) == 1014
    assert all(s and t for s, t in pairs)
    assert load_multi30k("test_2016_flickr", "en", "fr", data_dir=multi30k_dir, limit=7)[0][0].startswith("A man")


def test_every_mirrored_file_has_a_packaged_checksum(multi30k_dir):
    names = {p.name for p in multi30k_dir.glob("*.gz")}
    assert names <= set(checksums())
    assert {"test_2017_mscoco", "test_2018_flickr"} <= set(SPLITS)


def test_env_var_and_argument_choose_the_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("WORKBENCH_MULTI30K", str(tmp_path))
    assert resolve_data_dir() == tmp_path
    assert resolve_data_dir(tmp_path / "x") == tmp_path / "x"
    monkeypatch.delenv("WORKBENCH_MULTI30K")
    assert "attention-workbench" in str(resolve_data_dir())


def test_checksum_mismatch_keeps_file_aside_and_names_it(multi30k_dir, tmp_path):
    for name in ("val.de.gz", "val.en.gz"):
        shutil.copy(multi30k_dir / name, tmp_path / name)
    with gzip.open(tmp_path / "val.de.gz", "wt", encoding="utf-8") as f:
        f.write("tampered\n" * 1014)
    with pytest.raises(ChecksumError, match="val.de.gz") as info:
        load_multi30k("val", data_dir=tmp_path, download=False)
    assert "expected" in str(info.value) and "moved aside" in str(info.value)
    assert (tmp_path / "val.de.gz.corrupt").exists() and not (tmp_path / "val.de.gz").exists()


def test_offline_without_cache_says_where_to_put_files(tmp_path, monkeypatch):
    def refuse(*a, **k):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    with pytest.raises(DataError, match=r"put the file at .*val\.de\.gz"):
        load_multi30k("val", data_dir=tmp_path)
    assert not list(tmp_path.glob("*.part"))  # no half-written download left behind
    with pytest.raises(DataError, match="downloading is off"):
        load_multi30k("val", data_dir=tmp_path, download=False)


def test_unknown_split_or_language(multi30k_dir):
    with pytest.raises(DataError, match="choose one of"):
        load_multi30k("test_2019", data_dir=multi30k_dir)
    with pytest.raises(DataError, match="has no language 'cs'"):
        load_multi30k("test_2017_mscoco", "de", "cs", data_dir=multi30k_dir)


def test_user_parallel_text_checks(tmp_path):
    (tmp_path / "a.txt").write_text("eins\nzwei\n")
    (tmp_path / "b.txt").write_text("one\ntwo\n")
    (tmp_path / "c.txt").write_text("one\n")
    (tmp_path / "empty.txt").write_text("")
    assert load_parallel_text(tmp_path / "a.txt", tmp_path / "b.txt") == [("eins", "one"), ("zwei", "two")]
    with pytest.raises(DataError, match="has 2 lines but .* has 1"):
        load_parallel_text(tmp_path / "a.txt", tmp_path / "c.txt")
    with pytest.raises(DataError, match="empty"):
        load_parallel_text(tmp_path / "empty.txt", tmp_path / "b.txt")
    (tmp_path / "p.tsv").write_text("eins\tone\nzwei\ttwo\n")
    assert load_tsv(tmp_path / "p.tsv")[1] == ("zwei", "two")
    (tmp_path / "bad.tsv").write_text("eins one\n")
    with pytest.raises(DataError, match="line 1"):
        load_tsv(tmp_path / "bad.tsv")


def test_synthetic_tasks_are_right_and_seeded():
    for task, fn in (("copy", lambda x: x), ("reverse", lambda x: x[::-1]), ("sort", lambda x: sorted(x, key=lambda w: int(w[1:])))):
        pairs = synthetic_pairs(task, 50, 2, 9, 15, seed=3)
        assert all(t.split() == fn(s.split()) for s, t in pairs)
        assert pairs == synthetic_pairs(task, 50, 2, 9, 15, seed=3)
        assert pairs != synthetic_pairs(task, 50, 2, 9, 15, seed=4)
    with pytest.raises(DataError, match="unknown synthetic task"):
        synthetic_pairs("shuffle", 3)
