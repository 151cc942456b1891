"""`workbench book build --out` refuses a file or a foreign folder before any notebook runs, and keeps it intact."""

from __future__ import annotations

import pytest

from workbench.errors import BookError
from workbench.tools.book import build


@pytest.fixture
def no_series(monkeypatch):
    def refuse(**_kw):
        raise AssertionError("the notebooks ran before --out was checked")

    monkeypatch.setattr("workbench.tools.book.runner.run_series", refuse)


def test_a_file_is_refused_at_once_and_kept(tmp_path, no_series):
    target = tmp_path / "notes.txt"
    target.write_text("mine", encoding="utf-8")
    with pytest.raises(BookError, match="is not a book built earlier"):
        build.build_book(out=target, smoke=True, reports=tmp_path / "reports")
    assert target.read_text(encoding="utf-8") == "mine"


def test_a_foreign_folder_is_refused_at_once_and_kept(tmp_path, no_series):
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "thesis.tex").write_text("chapter 1", encoding="utf-8")
    with pytest.raises(BookError, match="choose an empty or new --out folder"):
        build.build_book(out=folder, smoke=True, reports=tmp_path / "reports")
    assert (folder / "thesis.tex").read_text(encoding="utf-8") == "chapter 1"


def test_an_earlier_book_or_an_empty_folder_passes_the_check(tmp_path, no_series):
    earlier = tmp_path / "book"
    earlier.mkdir()
    (earlier / ".buildinfo").write_text("", encoding="utf-8")
    empty = tmp_path / "empty"
    empty.mkdir()
    for out in (earlier, empty, tmp_path / "new"):
        with pytest.raises(AssertionError, match="notebooks ran"):  # past the check, into the series
            build.build_book(out=out, smoke=True, reports=tmp_path / "reports")


def test_notebooks_run_refuses_a_file_as_out(tmp_path):
    from workbench.errors import NotebookParameterError
    from workbench.tools.book.runner import run_series

    target = tmp_path / "f.txt"
    target.write_text("keep", encoding="utf-8")
    with pytest.raises(NotebookParameterError, match="is a file, not a folder"):
        run_series(out_dir=target, smoke=True, only=["02"])
    assert target.read_text(encoding="utf-8") == "keep"
