"""The README is a front page: at most 150 lines, the two commands in its first 40, its picture committed and
small, its local links alive, and its generated blocks (the lessons, the shipped models, "How it fits together")
equal to what they are generated from, so a new notebook or card cannot be forgotten on it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from workbench.tools.book import frontpage

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")


def test_readme_is_a_front_page():
    lines = README.splitlines()
    assert len(lines) <= 150, f"README has {len(lines)} lines: move detail to a page of the book (workbench/book_src/)"
    top = "\n".join(lines[:40])
    assert "workbench book build --out book" in top  # the main job
    assert "python3 -m pytest -q" in top  # the tests
    prose = [p for p in re.split(r"\n\s*\n", README) if not p.lstrip().startswith(("|", "<!--", "```", "#"))]
    longest = max(prose, key=lambda p: len(p.split()))
    assert len(longest.split()) <= 100, f"a paragraph of the README is too long: {longest[:80]!r}..."


def test_readme_picture_and_local_links_exist():
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", README)
    assert images, "the README shows no picture"
    for image in images:
        path = REPO / image
        assert path.is_file(), image
        assert path.stat().st_size < 300_000, f"{image} is {path.stat().st_size} bytes: keep it under 300 KB"
    for target in re.findall(r"\]\(([^)#]+)\)", README):
        if not target.startswith(("http://", "https://")):
            assert (REPO / target).exists(), f"the README links to {target}, which does not exist"


@pytest.mark.parametrize("name", sorted(frontpage.BLOCKS))
def test_generated_blocks_are_up_to_date(name):
    block = frontpage.block(README, name)
    assert block is not None, f"README has no {name} block"
    assert block == frontpage.BLOCKS[name](), "run: python -m workbench.tools.book.frontpage --write"


def test_lessons_block_lists_every_notebook_and_fails_on_a_new_one(tmp_path):
    listed = re.findall(r"notebooks/(\d\d_\w+)\.ipynb", frontpage.block(README, "lessons"))
    assert listed == sorted(p.stem for p in (REPO / "notebooks").glob("[0-9][0-9]_*.py"))
    for p in (REPO / "notebooks").glob("[0-9][0-9]_*.py"):
        (tmp_path / p.name).write_text(p.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "99_new.py").write_text("# %% [markdown]\n# # 99 · A new lesson\n", encoding="utf-8")
    assert frontpage.lessons_block(tmp_path) != frontpage.block(README, "lessons")
    assert "[A new lesson](notebooks/99_new.ipynb)" in frontpage.lessons_block(tmp_path)
    (tmp_path / "98_untitled.py").write_text("# %% [markdown]\n# Some text\n", encoding="utf-8")
    with pytest.raises(ValueError, match="98_untitled.py"):
        frontpage.lessons_block(tmp_path)


def test_rewrite_replaces_only_the_marked_blocks():
    text = f"intro\n{frontpage.begin('models')}\nstale\n{frontpage.end('models')}\noutro\n"
    out = frontpage.rewrite(text)
    assert out.startswith("intro\n") and out.endswith("\noutro\n") and "stale" not in out
    assert frontpage.block(out, "models") == frontpage.models_block()


def test_decoding_block_reads_the_newest_engine_race(tmp_path):
    import json

    assert "no decoding benchmark" in frontpage.decoding_block(tmp_path)

    def race(name, started, ours):
        results = {"workbench": {"sentences_per_s": ours, "bleu": 40.0, "same_as_workbench": 10},
                   "transformers-generate": {"sentences_per_s": 20.0, "bleu": 40.1, "same_as_workbench": 9}}
        (tmp_path / name).write_text(json.dumps({
            "started_utc": started, "results": results, "n_sentences": 10, "model": "m", "beam": 4, "split": "s",
            "threads": 1, "cpu_model": "cpu", "command": ["bench/decoding_engines.py", "--json", "x.json"]}))

    race("decoding-engines-cpu-aaa.json", "2026-01-01T00:00:00+00:00", 11.0)
    race("decoding-engines-cpu-bbb.json", "2026-02-01T00:00:00+00:00", 33.0)
    out = frontpage.decoding_block(tmp_path)
    assert "| 33.0 |" in out and "| 11.0 |" not in out and "decoding-engines-cpu-bbb.json" in out
    assert "transformers `generate` | 20.0 | 40.10 | 9 of 10" in out and "x.json" not in out.split("→")[0]
