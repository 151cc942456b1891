"""Multi30k loading, checksums, downloads (faked), offline behaviour, user files, synthetic tasks."""

from __future__ import annotations

import gzip
import hashlib
import io
import logging
import shutil
import urllib.error
import urllib.request

import pytest

from workbench import ChecksumError, DataError
from workbench.translation import data as wd
from workbench.translation.data import (
    SPLITS,
    checksums,
    download_multi30k,
    load_multi30k,
    load_parallel_text,
    load_tsv,
    resolve_data_dir,
    synthetic_pairs,
)


def _copy(src_dir, dst_dir, *names):
    for name in names:
        shutil.copy(src_dir / name, dst_dir / name)


def _gz(path, lines):
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))


class _FakeResponse(io.BytesIO):
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@pytest.fixture
def offline(monkeypatch):
    """urlopen always fails, as without a network."""
    calls = []

    def refuse(url, *args, **kwargs):
        calls.append(url)
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    return calls


@pytest.fixture
def fake_server(monkeypatch, multi30k_dir):
    """urlopen serves the files of the local mirror (bytes can be swapped per file name)."""
    served, overrides = [], {}

    def serve(url, *args, **kwargs):
        assert url.startswith(wd.BASE_URL)
        name = url.rsplit("/", 1)[1]
        served.append(name)
        return _FakeResponse(overrides.get(name) or (multi30k_dir / name).read_bytes())

    monkeypatch.setattr(urllib.request, "urlopen", serve)
    return served, overrides


# -- the real data -----------------------------------------------------------------------------------------------
def test_real_val_split_is_aligned(multi30k_dir):
    pairs = load_multi30k("val", "de", "en", data_dir=multi30k_dir)
    assert len(pairs) == 1014
    assert all(s and t and s == s.strip() and t == t.strip() for s, t in pairs)
    assert pairs[0] == ("Eine Gruppe von Männern lädt Baumwolle auf einen Lastwagen", "A group of men are loading cotton onto a truck")
    # the same split in other directions lines up sentence by sentence
    en_fr = load_multi30k("val", "en", "fr", data_dir=multi30k_dir)
    assert [e for e, _ in en_fr] == [e for _, e in pairs]
    assert len(load_multi30k("test_2016_flickr", "en", "cs", data_dir=multi30k_dir, limit=7)) == 7


def test_splits_and_packaged_checksums(multi30k_dir):
    assert SPLITS["test_2017_mscoco"] == ("en", "de", "fr") and "cs" not in SPLITS["test_2017_flickr"]
    assert set(SPLITS["test_2018_flickr"]) == {"en", "de", "fr", "cs"}
    mirrored = {line.split()[1]: line.split()[0] for line in (multi30k_dir / "SHA256SUMS").read_text().splitlines()}
    assert checksums() == mirrored  # the package holds exactly the published sums of the mirrored files
    known = {f"{s}.{lang}.gz" for s, langs in SPLITS.items() for lang in langs}
    assert set(checksums()) <= known


def test_env_var_and_argument_choose_the_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("WORKBENCH_MULTI30K", str(tmp_path))
    assert resolve_data_dir() == tmp_path
    assert resolve_data_dir(tmp_path / "x") == tmp_path / "x"
    monkeypatch.delenv("WORKBENCH_MULTI30K")
    default = resolve_data_dir()
    assert default.name == "multi30k" and "attention-workbench" in str(default)


def test_repeated_loads_hash_each_file_once(multi30k_dir, tmp_path, monkeypatch):
    _copy(multi30k_dir, tmp_path, "val.de.gz", "val.en.gz")
    hashed = []
    real = wd.sha256
    monkeypatch.setattr(wd, "sha256", lambda p: hashed.append(p.name) or real(p))
    load_multi30k("val", data_dir=tmp_path)
    load_multi30k("val", data_dir=tmp_path, limit=3)
    assert sorted(hashed) == ["val.de.gz", "val.en.gz"]
    # a file changed on disk (new size and time) is checked again, and caught
    _gz(tmp_path / "val.en.gz", ["x"] * 1014)
    with pytest.raises(ChecksumError, match="val.en.gz"):
        load_multi30k("val", data_dir=tmp_path)
    assert hashed[-1] == "val.en.gz"


# -- checksums ---------------------------------------------------------------------------------------------------
def test_checksum_mismatch_in_the_own_cache_moves_the_file_aside_and_names_it(multi30k_dir, tmp_path, monkeypatch):
    monkeypatch.delenv(wd.ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # platformdirs' user cache on Linux
    cache = wd.resolve_data_dir()
    assert cache == tmp_path / "cache" / "attention-workbench" / "multi30k"
    cache.mkdir(parents=True)
    _copy(multi30k_dir, cache, "val.de.gz", "val.en.gz")
    _gz(cache / "val.de.gz", ["tampered"] * 1014)
    actual = hashlib.sha256((cache / "val.de.gz").read_bytes()).hexdigest()
    with pytest.raises(ChecksumError, match="val.de.gz") as info:
        load_multi30k("val", download=False)
    msg = str(info.value)
    assert checksums()["val.de.gz"] in msg and actual in msg  # expected and actual hash
    assert "moved aside" in msg and "Fix:" in msg and wd.BASE_URL in msg
    # the same assertions as before, now in the workbench's own cache: a folder the user chose is only read (below)
    assert (cache / "val.de.gz.corrupt").exists() and not (cache / "val.de.gz").exists()
    # a second bad copy does not overwrite the first one
    _gz(cache / "val.de.gz", ["tampered again"] * 1014)
    with pytest.raises(ChecksumError, match=r"val\.de\.gz\.corrupt\.1"):
        load_multi30k("val", download=False)
    assert (cache / "val.de.gz.corrupt").exists() and (cache / "val.de.gz.corrupt.1").exists()


@pytest.mark.parametrize("how", ["data_dir", "env"])
def test_checksum_mismatch_in_a_folder_the_user_chose_leaves_the_file_there(multi30k_dir, tmp_path, monkeypatch, how):
    _copy(multi30k_dir, tmp_path, "val.de.gz", "val.en.gz")
    _gz(tmp_path / "val.de.gz", ["tampered"] * 1014)
    before = (tmp_path / "val.de.gz").read_bytes()
    monkeypatch.setenv(wd.ENV_VAR, str(tmp_path))
    with pytest.raises(ChecksumError, match="val.de.gz") as info:
        load_multi30k("val", data_dir=tmp_path if how == "data_dir" else None, download=False)
    msg = str(info.value)
    assert "left as it is" in msg and "moved aside" not in msg and "Fix:" in msg and checksums()["val.de.gz"] in msg
    assert (tmp_path / "val.de.gz").read_bytes() == before and not list(tmp_path.glob("*.corrupt*"))


def test_corrupt_download_is_kept_aside_and_never_takes_the_name(fake_server, tmp_path):
    served, overrides = fake_server
    overrides["val.en.gz"] = gzip.compress(b"not the real file\n")
    with pytest.raises(ChecksumError, match="val.en.gz") as info:
        download_multi30k("val", ("de", "en"), tmp_path)
    assert "expected" in str(info.value) and checksums()["val.en.gz"] in str(info.value)
    assert (tmp_path / "val.de.gz").exists()  # the good one was kept
    assert not (tmp_path / "val.en.gz").exists() and (tmp_path / "val.en.gz.corrupt").exists()
    assert not list(tmp_path.glob(".*.part"))


def test_download_fills_the_cache_then_loads_offline(fake_server, tmp_path, monkeypatch):
    served, _ = fake_server
    monkeypatch.setenv("WORKBENCH_MULTI30K", str(tmp_path / "cache"))
    paths = download_multi30k(["val", "test_2016_flickr"], "de")
    assert [p.name for p in paths] == ["val.de.gz", "test_2016_flickr.de.gz"]
    assert all(p.parent == tmp_path / "cache" for p in paths) and sorted(served) == sorted(p.name for p in paths)
    pairs = load_multi30k("val", "de", "en")  # only val.en.gz is still missing
    assert served[-1] == "val.en.gz" and len(served) == 3 and len(pairs) == 1014
    served.clear()
    download_multi30k("val", ("de", "en"))  # present and verified: nothing fetched
    assert served == [] and not list((tmp_path / "cache").glob(".*.part"))


def test_unchecked_splits_are_accepted_with_a_warning(fake_server, tmp_path, caplog, monkeypatch):
    _, overrides = fake_server
    monkeypatch.setattr(wd, "_WARNED", set())  # warnings are logged once per file and session
    overrides["test_2018_flickr.de.gz"] = gzip.compress(b"Ein Hund .\nZwei Katzen .\n")
    overrides["test_2018_flickr.en.gz"] = gzip.compress(b"A dog .\nTwo cats .\n")
    with caplog.at_level(logging.WARNING, logger="workbench.translation.data"):
        pairs = load_multi30k("test_2018_flickr", data_dir=tmp_path)
    assert pairs == [("Ein Hund .", "A dog ."), ("Zwei Katzen .", "Two cats .")]
    assert "test_2018_flickr.de.gz" not in checksums()
    assert any("no packaged SHA-256" in r.getMessage() and "test_2018_flickr" in r.getMessage() for r in caplog.records)


# -- offline and bad requests ------------------------------------------------------------------------------------
def test_offline_without_cache_names_every_missing_file(tmp_path, offline):
    with pytest.raises(DataError) as info:
        load_multi30k("val", data_dir=tmp_path)
    msg = str(info.value)
    assert str(tmp_path / "val.de.gz") in msg and str(tmp_path / "val.en.gz") in msg
    assert "WORKBENCH_MULTI30K" in msg and "no network" in msg
    assert len(offline) == 1  # gave up at the first network failure
    assert not list(tmp_path.glob("*.gz")) and not list(tmp_path.glob(".*.part"))


def test_download_disabled_names_only_the_missing_file(multi30k_dir, tmp_path, offline):
    _copy(multi30k_dir, tmp_path, "val.de.gz")
    with pytest.raises(DataError, match="downloading is off") as info:
        load_multi30k("val", data_dir=tmp_path, download=False)
    assert str(tmp_path / "val.en.gz") in str(info.value) and "val.de.gz" not in str(info.value)
    assert offline == []  # never touched the network


def test_unknown_split_language_or_limit(multi30k_dir):
    with pytest.raises(DataError, match="choose one of") as info:
        load_multi30k("test_2019", data_dir=multi30k_dir)
    assert all(s in str(info.value) for s in SPLITS)
    with pytest.raises(DataError, match=r"has no language 'cs'.*\['en', 'de', 'fr'\]"):
        load_multi30k("test_2017_mscoco", "de", "cs", data_dir=multi30k_dir)
    with pytest.raises(DataError, match="both 'de'"):
        load_multi30k("val", "de", "de", data_dir=multi30k_dir)
    with pytest.raises(DataError, match="limit"):
        load_multi30k("val", data_dir=multi30k_dir, limit=0)
    with pytest.raises(DataError, match="has no language 'xx'"):
        download_multi30k("val", "xx", multi30k_dir)


def test_misaligned_multi30k_files_name_both_files_and_counts(multi30k_dir, tmp_path, monkeypatch):
    _gz(tmp_path / "val.de.gz", ["a", "b", "c"])
    _gz(tmp_path / "val.en.gz", ["a", "b"])
    monkeypatch.setattr(wd, "verify_file", lambda p: None)  # checksums are tested above
    with pytest.raises(DataError, match=r"val\.de\.gz has 3 lines but .*val\.en\.gz has 2"):
        load_multi30k("val", data_dir=tmp_path, download=False)


# -- the user's own data -----------------------------------------------------------------------------------------
def test_user_parallel_text_checks(tmp_path):
    (tmp_path / "a.txt").write_text("\ufeffeins \nzwei\r\n", encoding="utf-8")  # BOM, CRLF, spaces
    (tmp_path / "b.txt").write_text("one\ntwo\n")
    (tmp_path / "c.txt").write_text("one\n")
    (tmp_path / "empty.txt").write_text("\n")
    _gz(tmp_path / "b.gz", ["one", "two"])
    assert load_parallel_text(tmp_path / "a.txt", tmp_path / "b.txt") == [("eins", "one"), ("zwei", "two")]
    assert load_parallel_text(tmp_path / "a.txt", tmp_path / "b.gz") == [("eins", "one"), ("zwei", "two")]
    with pytest.raises(DataError, match=r"a\.txt has 2 lines but .*c\.txt has 1"):
        load_parallel_text(tmp_path / "a.txt", tmp_path / "c.txt")
    with pytest.raises(DataError, match=r"empty\.txt is empty"):
        load_parallel_text(tmp_path / "empty.txt", tmp_path / "b.txt")
    with pytest.raises(DataError, match="does not exist"):
        load_parallel_text(tmp_path / "nope.txt", tmp_path / "b.txt")
    (tmp_path / "latin1.txt").write_bytes("Stra\xdfe\n".encode("latin-1"))
    with pytest.raises(DataError, match="UTF-8"):
        load_parallel_text(tmp_path / "latin1.txt", tmp_path / "c.txt")


def test_tsv_loading(tmp_path):
    (tmp_path / "p.tsv").write_text("eins\tone\nzwei \t two\n")
    assert load_tsv(tmp_path / "p.tsv") == [("eins", "one"), ("zwei", "two")]
    (tmp_path / "bad.tsv").write_text("eins\tone\nzwei two\n")
    with pytest.raises(DataError, match="line 2.*1 tab-separated field"):
        load_tsv(tmp_path / "bad.tsv")
    (tmp_path / "three.tsv").write_text("a\tb\tc\n")
    with pytest.raises(DataError, match="line 1.*3 tab-separated"):
        load_tsv(tmp_path / "three.tsv")
    (tmp_path / "empty.tsv").write_text("")
    with pytest.raises(DataError, match="empty"):
        load_tsv(tmp_path / "empty.tsv")


# -- synthetic tasks ---------------------------------------------------------------------------------------------
def test_synthetic_tasks_are_right_and_seeded():
    rules = {
        "copy": lambda x: x,
        "reverse": lambda x: x[::-1],
        "sort": lambda x: sorted(x, key=lambda w: int(w[1:])),
    }
    for task, rule in rules.items():
        pairs = synthetic_pairs(task, 200, 2, 9, 15, seed=3)
        assert len(pairs) == 200
        assert all(t.split() == rule(s.split()) for s, t in pairs)
        assert {len(s.split()) for s, _ in pairs} == set(range(2, 10))
        assert {w for s, _ in pairs for w in s.split()} <= {f"t{i}" for i in range(15)}
        assert pairs == synthetic_pairs(task, 200, 2, 9, 15, seed=3)
        assert pairs != synthetic_pairs(task, 200, 2, 9, 15, seed=4)
    # reverse and sort are not the identity on these pairs (the checks above could not pass by copying)
    assert any(s != t for s, t in synthetic_pairs("reverse", 20, 3, 6, 15, seed=0))
    assert any(s != t for s, t in synthetic_pairs("sort", 20, 3, 6, 15, seed=0))
    with pytest.raises(DataError, match="unknown synthetic task"):
        synthetic_pairs("shuffle", 3)
    with pytest.raises(DataError, match="min_len"):
        synthetic_pairs("copy", 3, min_len=5, max_len=2)
