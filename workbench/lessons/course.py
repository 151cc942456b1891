"""The instructor layer: learning objectives, prerequisites, lab minutes and difficulty of every lesson, the
difficulty, importance and minutes of every exercise, and a 12-week term plan with projects.

One data file, ``course.json`` beside the concept map, holds it; this module reads it, checks it
(:func:`problems`, run by ``tests/test_course.py``) and renders it in three places:

* the top of each lesson in the book (:func:`card_markdown`, inserted by :mod:`workbench.tools.book.pages`);
* the README's lesson list, one line per lesson (:func:`readme_suffix`, used by :mod:`workbench.tools.book.frontpage`);
* the book page "Teaching with the workbench" (``workbench/book_src/teaching.md``): hand-written prose with
  generated blocks (:data:`TEACHING_BLOCKS`) that ``python -m workbench.tools.book.frontpage --write`` rewrites.

A lesson entry: ``minutes`` (a lab session), ``difficulty`` (1 introductory, 2 intermediate, 3 advanced),
``objectives`` (2 to 4 "after this lesson you can ..." statements, each checkable) and ``prerequisites``
(``lessons``: numbers; ``knowledge``: what a student brings from outside). An exercise entry, keyed by the
exercise's id (``"05.causal_mask"``): ``difficulty``, ``importance`` (1 optional, 2 recommended, 3 essential) and
``minutes``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

DATA = Path(__file__).with_name("course.json")
TEACHING_PAGE = Path(__file__).resolve().parents[1] / "book_src" / "teaching.md"
CARD_TITLE = "After this lesson you can"
LEVELS = (1, 2, 3)


@lru_cache(maxsize=1)
def load() -> dict[str, Any]:
    """The instructor layer as stored (``lessons``, ``exercises``, ``plan``, ``projects``, ``order``, scales)."""
    return json.loads(DATA.read_text(encoding="utf-8"))


def lesson(number: str, doc: dict[str, Any] | None = None) -> dict[str, Any]:
    """The entry of lesson ``number`` ("05").

    Raises:
        KeyError: no such lesson in ``course.json`` (the message says where to add it).
    """
    doc = doc or load()
    if number not in doc["lessons"]:
        raise KeyError(f"lesson {number!r} has no entry in {DATA.name}: add its objectives, prerequisites, minutes "
                       "and difficulty")
    return doc["lessons"][number]


def exercises_of(number: str, doc: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """The exercise entries of lesson ``number``, in the file's order."""
    doc = doc or load()
    return {k: v for k, v in doc["exercises"].items() if k.split(".", 1)[0] == number}


def _level(doc: dict[str, Any], scale: str, value: int) -> str:
    return doc[scale][str(value)]


def _lesson_refs(numbers: Iterable[str], role: bool) -> str:
    numbers = list(numbers)
    if not numbers:
        return "none"
    return ", ".join(f"{{nb}}`{n}`" if role else n for n in numbers)


def card_markdown(number: str, doc: dict[str, Any] | None = None) -> str:
    """The box at the top of a lesson's book page: objectives, prerequisites, minutes, difficulty, exercises."""
    doc = doc or load()
    entry = lesson(number, doc)
    pre = entry["prerequisites"]
    lines = [f":::{{admonition}} {CARD_TITLE}", ":class: tip lesson-card", ""]
    lines += [f"- {o}" for o in entry["objectives"]]
    lines += ["", f"**Lab time** {entry['minutes']} minutes · **difficulty** {_level(doc, 'difficulty', entry['difficulty'])}"
              f" · **before it** lessons {_lesson_refs(pre['lessons'], role=True)}"
              + (f"; {'; '.join(pre['knowledge'])}" if pre["knowledge"] else ""), ""]
    ex = exercises_of(number, doc)
    if ex:
        items = [f"`{k}` ({_level(doc, 'difficulty', v['difficulty'])}, {_level(doc, 'importance', v['importance'])}, "
                 f"{v['minutes']} min)" for k, v in ex.items()]
        lines += [f"**Exercises**: {'; '.join(items)}.", ""]
    lines.append(":::")
    return "\n".join(lines)


def readme_suffix(number: str, doc: dict[str, Any] | None = None) -> str:
    """What the README's lesson line adds after the title: minutes, difficulty, the lessons it needs."""
    doc = doc or load()
    entry = lesson(number, doc)
    needs = entry["prerequisites"]["lessons"]
    after = f"; after {', '.join(needs)}" if needs else ""
    return f" — {entry['minutes']} min, {_level(doc, 'difficulty', entry['difficulty'])}{after}"


# -- the teaching page's generated blocks --------------------------------------------------------------------------
def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def plan_markdown(titles: dict[str, str], doc: dict[str, Any] | None = None) -> str:
    """The 12-week plan as a table (week, lessons, minutes, project, focus) and the projects below it."""
    doc = doc or load()
    rows = ["| week | lessons | lab minutes | project | focus |", "|---|---|---|---|---|"]
    for w in doc["plan"]:
        lessons = "; ".join(f"{{nb}}`{titles.get(n, n)} <{n}>`" for n in w["lessons"])
        minutes = sum(lesson(n, doc)["minutes"] for n in w["lessons"])
        project = f"{w['project']}: {doc['projects'][w['project']]['title']}" if w["project"] else "–"
        rows.append(f"| {w['week']} | {lessons} | {minutes} | {project} | {_cell(w['focus'])} |")
    rows.append("")
    for key, p in doc["projects"].items():
        rows.append(f"- **{key} · {p['title']}** (weeks {p['weeks']}): {p['what']}.")
    return "\n".join(rows)


def lessons_markdown(titles: dict[str, str], doc: dict[str, Any] | None = None) -> str:
    """Every lesson in the recommended order: minutes, difficulty, prerequisites, its exercises' minutes."""
    doc = doc or load()
    rows = ["| lesson | lab minutes | difficulty | before it | exercises (minutes) |", "|---|---|---|---|---|"]
    for n in doc["order"]["recommended"]:
        e = lesson(n, doc)
        ex = exercises_of(n, doc)
        pre = e["prerequisites"]
        before = _lesson_refs(pre["lessons"], role=False)
        if pre["knowledge"]:
            before += "; " + "; ".join(pre["knowledge"])
        exercises = f"{len(ex)} ({sum(v['minutes'] for v in ex.values())})" if ex else "–"
        rows.append(f"| {{nb}}`{n} · {titles.get(n, n)} <{n}>` | {e['minutes']} | "
                    f"{_level(doc, 'difficulty', e['difficulty'])} | {_cell(before)} | {exercises} |")
    return "\n".join(rows)


def exercises_markdown(doc: dict[str, Any] | None = None) -> str:
    """Every exercise with its difficulty, importance and minutes."""
    doc = doc or load()
    rows = ["| exercise | difficulty | importance | minutes |", "|---|---|---|---|"]
    for k, v in doc["exercises"].items():
        rows.append(f"| `{k}` | {_level(doc, 'difficulty', v['difficulty'])} | "
                    f"{_level(doc, 'importance', v['importance'])} | {v['minutes']} |")
    return "\n".join(rows)


def order_markdown(doc: dict[str, Any] | None = None) -> str:
    """The recommended teaching order, and why it differs from the numbering."""
    doc = doc or load()
    return f"{' → '.join(doc['order']['recommended'])}\n\n{doc['order']['why']}"


def teaching_blocks(titles: dict[str, str]) -> dict[str, Callable[[], str]]:
    """The generated blocks of ``teaching.md`` (name -> maker), given the lessons' titles."""
    return {"course-order": order_markdown, "course-plan": lambda: plan_markdown(titles),
            "course-lessons": lambda: lessons_markdown(titles), "course-exercises": exercises_markdown}


TEACHING_BLOCKS = ("course-order", "course-plan", "course-lessons", "course-exercises")


# -- checks (tests/test_course.py runs them on the real file and on planted mistakes) -----------------------------
def problems(doc: dict[str, Any], lessons: Iterable[str], exercise_ids: Iterable[str]) -> list[str]:
    """Everything wrong with an instructor layer ``doc`` against the notebooks' numbers ``lessons`` and the
    registered exercises ``exercise_ids`` (empty when sound)."""
    lessons, exercise_ids = sorted(lessons), sorted(exercise_ids)
    found: list[str] = []
    for n in lessons:
        if n not in doc["lessons"]:
            found.append(f"lesson {n} has no entry")
    for n, e in doc["lessons"].items():
        label = f"lesson {n}"
        if n not in lessons:
            found.append(f"{label}: no notebook {n}_*.py")
            continue
        objectives = e.get("objectives") or []
        if not 2 <= len(objectives) <= 4:
            found.append(f"{label}: {len(objectives)} objectives (give 2 to 4)")
        found += [f"{label}: objective {o!r} is empty or too short to check" for o in objectives if len(o.split()) < 5]
        if not isinstance(e.get("minutes"), int) or not 15 <= e["minutes"] <= 240:
            found.append(f"{label}: minutes {e.get('minutes')!r} (an integer from 15 to 240)")
        if e.get("difficulty") not in LEVELS:
            found.append(f"{label}: difficulty {e.get('difficulty')!r} (1, 2 or 3)")
        pre = e.get("prerequisites")
        if not isinstance(pre, dict) or not {"lessons", "knowledge"} <= set(pre):
            found.append(f"{label}: prerequisites need 'lessons' and 'knowledge'")
            continue
        for p in pre["lessons"]:
            if p not in lessons:
                found.append(f"{label}: prerequisite lesson {p} does not exist")
            elif p == n:
                found.append(f"{label}: lists itself as a prerequisite")
        if not pre["lessons"] and not pre["knowledge"]:
            found.append(f"{label}: no prerequisites at all (name the outside knowledge it assumes)")
    for x in exercise_ids:
        if x not in doc["exercises"]:
            found.append(f"exercise {x} has no entry (difficulty, importance, minutes)")
    for x, v in doc["exercises"].items():
        if x not in exercise_ids:
            found.append(f"exercise {x}: no such registered exercise")
        for key in ("difficulty", "importance"):
            if v.get(key) not in LEVELS:
                found.append(f"exercise {x}: {key} {v.get(key)!r} (1, 2 or 3)")
        if not isinstance(v.get("minutes"), int) or not 1 <= v["minutes"] <= 120:
            found.append(f"exercise {x}: minutes {v.get('minutes')!r} (an integer from 1 to 120)")
    order = doc["order"]["recommended"]
    if sorted(order) != lessons:
        found.append(f"the recommended order {order} does not hold every lesson exactly once")
    else:
        seen: set[str] = set()
        for n in order:
            needs = (doc["lessons"].get(n, {}).get("prerequisites") or {}).get("lessons", [])
            late = [p for p in needs if p not in seen]
            if late:
                found.append(f"the recommended order puts lesson {n} before its prerequisites {late}")
            seen.add(n)
    weeks = [w["week"] for w in doc["plan"]]
    if weeks != list(range(1, 13)):
        found.append(f"the plan's weeks are {weeks}, not 1 to 12")
    planned = [n for w in doc["plan"] for n in w["lessons"]]
    if sorted(planned) != lessons:
        found.append(f"the plan does not teach every lesson exactly once: {planned}")
    for w in doc["plan"]:
        if not 1 <= len(w["lessons"]) <= 2:
            found.append(f"week {w['week']}: {len(w['lessons'])} lessons (one or two a week)")
        if w["project"] is not None and w["project"] not in doc["projects"]:
            found.append(f"week {w['week']}: project {w['project']!r} is not described in 'projects'")
    if not any(w["project"] for w in doc["plan"]):
        found.append("the plan has no project")
    return found
