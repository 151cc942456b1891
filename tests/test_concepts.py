"""The concept map (workbench/lessons/concepts.json): every symbol imports, every lesson anchor names a heading of
its notebook, no row claims "not taught" while a lesson covers it, the paper and the study notes are covered, and
the pages generated from it are up to date. Each check is also shown to fail on a planted mistake."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from workbench.lessons import concepts

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"


def test_the_concept_map_is_sound():
    found = concepts.problems(concepts.load(), NOTEBOOKS)
    assert not found, "\n".join(found)


def test_the_map_covers_the_paper_and_every_notebook():
    doc = concepts.load()
    sections = [r["paper"] for r in doc["rows"] if r.get("section")]
    assert sorted(sections) == sorted(concepts.PAPER_SECTIONS)  # one overview row per subsection of §3 to §6
    assert len(doc["rows"]) >= 45
    numbers = {p.stem[:2] for p in NOTEBOOKS.glob("[0-9][0-9]_*.py")}
    assert numbers <= {a.partition("#")[0] for r in doc["rows"] for a in r["lessons"]}


def _planted(change) -> list[str]:
    doc = copy.deepcopy(concepts.load())
    change(doc)
    return concepts.problems(doc, NOTEBOOKS)


@pytest.mark.parametrize("mistake, expected", [
    (lambda d: d["rows"][0]["code"].append("workbench.model.attention.no_such_function"), "has no 'no_such_function'"),
    (lambda d: d["rows"][0]["code"].append("nosuchpackage.thing"), "no module of it imports"),
    (lambda d: d["rows"][0]["lessons"].append("02#A heading nobody wrote"), "no heading of notebook 02"),
    (lambda d: d["rows"][0]["lessons"].append("99#Anything"), "no notebook 99"),
    (lambda d: d["rows"][1].update(what="not yet a notebook"), "has lessons but says it is not taught"),
    # the old map's mistake: a row with no lesson although lesson 06 teaches the FFN
    (lambda d: d["rows"][6].update(lessons=[], not_taught="not yet a notebook"), "use its code"),
    (lambda d: d["rows"][6].update(lessons=[]), "no lesson and no not_taught reason"),
    (lambda d: d["rows"][6].pop("section"), "paper section §3.3 has no row"),
    (lambda d: d.update(rows=[r for r in d["rows"] if "Eq. (2)" not in r["paper"]]), "Eq. (2) of the paper has no row"),
    (lambda d: [r.update(notes=[n for n in r.get("notes", []) if n != "001"]) for r in d["rows"]],
     "study note 001 is covered by no row"),
    (lambda d: d.update(rows=[r for r in d["rows"] if not any(a.startswith("12") for a in r["lessons"])]),
     "notebook 12 is not in the concept map"),
])
def test_each_check_fails_on_a_planted_mistake(mistake, expected):
    found = _planted(mistake)
    assert any(expected in f for f in found), found


def test_the_concepts_page_is_generated_from_the_map():
    page = concepts.CONCEPTS_PAGE.read_text(encoding="utf-8")
    assert page == concepts.page_markdown(), "run: python -m workbench.tools.book.frontpage --write"
    assert "not yet" not in page.lower()
    for r in concepts.load()["rows"]:
        for anchor in r["lessons"]:
            assert f"{{nb}}`{anchor}`" in page
