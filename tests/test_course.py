"""The instructor layer (workbench/lessons/course.json): every lesson has objectives, prerequisites, minutes and a
difficulty; every registered exercise has its entry and no entry names an unknown lesson or exercise; the plan
teaches every lesson once in 12 weeks, prerequisites first. The places it is rendered (each lesson's book page, the
README's lesson list, the teaching page) are checked too, and each check is shown to fail on a planted mistake."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import nbformat
import pytest

from workbench.lessons import course
from workbench.lessons import exercises as ex
from workbench.tools.book import frontpage
from workbench.tools.book.pages import BookPage, prepare_notebook

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
LESSONS = sorted(p.stem[:2] for p in NOTEBOOKS.glob("[0-9][0-9]_*.py"))


def _problems(doc):
    return course.problems(doc, LESSONS, ex.EXERCISES)


def test_the_instructor_layer_is_sound():
    found = _problems(course.load())
    assert not found, "\n".join(found)


def test_every_lesson_and_every_exercise_has_its_entry():
    doc = course.load()
    assert sorted(doc["lessons"]) == LESSONS
    assert sorted(doc["exercises"]) == sorted(ex.EXERCISES)
    for n, e in doc["lessons"].items():
        assert 2 <= len(e["objectives"]) <= 4, n
        assert e["minutes"] > 0 and e["difficulty"] in (1, 2, 3), n
        assert e["prerequisites"]["lessons"] or e["prerequisites"]["knowledge"], n


def _planted(mutate):
    doc = copy.deepcopy(course.load())
    mutate(doc)
    return "\n".join(_problems(doc))


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda d: d["lessons"].pop("07"), "lesson 07 has no entry"),
    (lambda d: d["lessons"]["05"]["objectives"].__delitem__(slice(1, None)), "lesson 05: 1 objectives"),
    (lambda d: d["lessons"]["05"]["objectives"].extend(["one more thing to check here"] * 2), "lesson 05: 6 objectives"),
    (lambda d: d["lessons"]["05"]["objectives"].__setitem__(0, "masks"), "too short to check"),
    (lambda d: d["lessons"]["03"].pop("minutes"), "lesson 03: minutes None"),
    (lambda d: d["lessons"]["03"].__setitem__("difficulty", 4), "lesson 03: difficulty 4"),
    (lambda d: d["lessons"]["03"]["prerequisites"].pop("knowledge"), "lesson 03: prerequisites need"),
    (lambda d: d["lessons"]["03"]["prerequisites"]["lessons"].append("42"), "prerequisite lesson 42 does not exist"),
    (lambda d: d["lessons"].__setitem__("42", copy.deepcopy(d["lessons"]["01"])), "lesson 42: no notebook"),
    (lambda d: d["exercises"].pop("05.causal_mask"), "exercise 05.causal_mask has no entry"),
    (lambda d: d["exercises"].__setitem__("05.no_such", {"difficulty": 1, "importance": 1, "minutes": 5}),
     "exercise 05.no_such: no such registered exercise"),
    (lambda d: d["exercises"]["02.attention"].__setitem__("importance", 0), "importance 0"),
    (lambda d: d["exercises"]["02.attention"].__setitem__("minutes", "ten"), "minutes 'ten'"),
    (lambda d: d["order"]["recommended"].remove("08"), "does not hold every lesson"),
    (lambda d: d["order"].__setitem__("recommended", [n for n in d["order"]["recommended"] if n != "08"] + ["08"]),
     "puts lesson 09 before its prerequisites ['08']"),
    (lambda d: d["plan"].pop(), "not 1 to 12"),
    (lambda d: d["plan"][2]["lessons"].extend(["06", "07"]), "one or two a week"),
    (lambda d: d["plan"][4].__setitem__("project", "P9"), "project 'P9' is not described"),
])
def test_each_check_fails_on_a_planted_mistake(mutate, expected):
    assert expected in _planted(mutate)


def test_each_lesson_card_shows_objectives_prerequisites_minutes_difficulty_and_exercises():
    doc = course.load()
    for n in LESSONS:
        card = course.card_markdown(n)
        e = doc["lessons"][n]
        assert card.startswith(f":::{{admonition}} {course.CARD_TITLE}") and card.endswith(":::")
        for objective in e["objectives"]:
            assert f"- {objective}" in card
        assert f"**Lab time** {e['minutes']} minutes" in card
        assert f"**difficulty** {doc['difficulty'][str(e['difficulty'])]}" in card
        for p in e["prerequisites"]["lessons"]:
            assert f"{{nb}}`{p}`" in card
        for k in e["prerequisites"]["knowledge"]:
            assert k in card
        for x in course.exercises_of(n):
            assert f"`{x}`" in card
    bare = [n for n in LESSONS if not course.exercises_of(n)]
    for n in bare:  # a lesson without exercises gets no empty "Exercises" line
        assert "**Exercises**" not in course.card_markdown(n)


def _executed(tmp_path, number="05", title="# 05 · Masks"):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(f"{title}\n\nIntro."), nbformat.v4.new_code_cell("x = 1\nassert x == 1")]
    path = tmp_path / f"{number}_x" / f"{number}_x.ipynb"
    path.parent.mkdir()
    nbformat.write(nb, str(path))
    return BookPage(name=f"{number}_x", notebook=path, status="ok", seconds=1.0, error=None, metrics={}, parameters={})


def test_the_book_page_of_a_lesson_opens_with_its_card(tmp_path):
    nb, _ = prepare_notebook(_executed(tmp_path))
    assert nb.cells[0].source.startswith("# 05 · Masks")
    assert nb.cells[1].source == course.card_markdown("05")  # right under the title, above the run note
    assert nb.cells[2].source.startswith(":::{note}")
    unknown, _ = prepare_notebook(_executed(tmp_path, "77", "# 77 · Not a lesson"))
    assert course.CARD_TITLE not in "".join(c.source for c in unknown.cells)  # a notebook the layer does not know


def test_the_readme_lists_each_lesson_on_one_line_with_minutes_and_difficulty():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    lines = frontpage.block(readme, "lessons").splitlines()
    assert [ln[:2] for ln in lines] == LESSONS
    doc = course.load()
    for n, line in zip(LESSONS, lines, strict=True):
        e = doc["lessons"][n]
        assert re.search(rf"— {e['minutes']} min, {doc['difficulty'][str(e['difficulty'])]}(;|$)", line), line


def test_the_teaching_page_is_up_to_date_and_holds_the_plan():
    page = course.TEACHING_PAGE.read_text(encoding="utf-8")
    for name, make in frontpage.course_page_blocks().items():
        assert frontpage.block(page, name) == make(), "run: python -m workbench.tools.book.frontpage --write"
    plan = frontpage.block(page, "course-plan")
    assert len(re.findall(r"^\| \d+ \|", plan, re.M)) == 12
    for n in LESSONS:
        assert f"<{n}>`" in plan  # every lesson linked from the plan
    for words in ("workbench notebooks copy --student", "workbench notebooks grade", "Solutions policy"):
        assert words in page
