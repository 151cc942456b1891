"""The concept map: every concept of the paper and of the study notes → the paper's section → the code → the lesson.

One data file, ``concepts.json`` beside this module, holds the map; this module reads it and renders the book's
concepts page (``workbench/book_src/concepts.md``) and the README's "How it fits together" table from it
(``python -m workbench.tools.book.frontpage --write`` rewrites both). ``tests/test_concepts.py`` checks that every
symbol imports, every lesson anchor names a heading of that notebook, and no row says "not yet" (or has no
lesson) while a notebook uses its code.

A row:

* ``group``: ``paper`` (a section, equation or table of the paper), ``notes`` (the study notes) or ``beyond``
  (questions the lessons go on to ask);
* ``concept``, ``paper`` (where in the paper), ``what`` (what the lesson computes and checks);
* ``code``: ``module.symbol`` names, e.g. ``workbench.model.attention.scaled_dot_product_attention``;
* ``lessons``: ``NN`` or ``NN#words of a heading`` (the book's ``{nb}`` role resolves them to the section);
* ``section``: true for the subsections of §3 to §6, the rows of the README's overview;
* ``notes``: the study notes (file prefixes) that cover it; ``not_taught``: why no lesson teaches it.
"""

from __future__ import annotations

import importlib
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

DATA = Path(__file__).with_name("concepts.json")
CONCEPTS_PAGE = Path(__file__).resolve().parents[1] / "book_src" / "concepts.md"


@lru_cache(maxsize=1)
def load() -> dict[str, Any]:
    """The concept map as stored (``about``, ``groups``, ``notes``, ``rows``)."""
    return json.loads(DATA.read_text(encoding="utf-8"))


def rows(group: str | None = None) -> list[dict[str, Any]]:
    """The map's rows, all or those of one group."""
    return [r for r in load()["rows"] if group is None or r["group"] == group]


def resolve_symbol(name: str) -> Any:
    """The object a ``module.symbol`` name of the map refers to (the longest importable module prefix, then
    attributes).

    Raises:
        LookupError: no module prefix imports, or an attribute is missing; the message names the row's text.
    """
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                raise LookupError(f"concept map: {name!r}: {'.'.join(parts[:cut])} has no {attr!r}; fix the name in "
                                  f"{DATA.name} or restore the symbol")
            obj = getattr(obj, attr)
        return obj
    raise LookupError(f"concept map: {name!r}: no module of it imports; fix the name in {DATA.name}")


def _code(names: list[str]) -> str:
    if not names:
        return "–"
    short = []
    for name in names:
        module, _, symbol = name.rpartition(".")
        short.append(f"`{module.removeprefix('workbench.')}.{symbol}`")
    return ", ".join(short)


def _lessons(row: dict[str, Any], role: bool) -> str:
    if not row["lessons"]:
        return f"not taught: {row['not_taught']}"
    if role:
        return "; ".join(f"{{nb}}`{anchor}`" for anchor in row["lessons"])
    return row["lessons"][0].replace("#", " § ") + (" …" if len(row["lessons"]) > 1 else "")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def page_markdown() -> str:
    """The book's concepts page: one table per group (concept and where the paper has it, what is computed, code,
    lesson)."""
    doc = load()
    lines = ["# Concepts, equations and tables: where each one is computed", "",
             "Each row names an idea of the paper or of the study notes, says where the paper has it, which code "
             "implements it and what the lesson computes and checks, and links to the lesson's section (its checks are "
             "listed at the end of every page). Generated from `workbench/lessons/concepts.json`; "
             "`tests/test_concepts.py` checks that every symbol imports and every section exists.", ""]
    for group, title in doc["groups"].items():
        lines += [f"## {title}", "", "| concept | what is computed and checked | code | lesson |", "|---|---|---|---|"]
        for r in rows(group):
            notes = f"; notes {', '.join(r['notes'])}" if r.get("notes") else ""
            lines.append(f"| {_cell(r['concept'])} ({_cell(r['paper'])}{notes}) | {_cell(r['what'])} | "
                         f"{_code(r['code'])} | {_lessons(r, role=True)} |")
        lines.append("")
    return "\n".join(lines)


def overview_markdown() -> str:
    """The README's "How it fits together": each subsection of §3 to §6 → code → lesson (plain text anchors)."""
    lines = ["| paper | concept | code | lesson |", "|---|---|---|---|"]
    for r in rows():
        if r.get("section"):
            lines.append(f"| {r['paper']} | {_cell(r['concept'])} | {_code(r['code'][:2])} | "
                         f"{_lessons(r, role=False)} |")
    return "\n".join(lines)


# -- checks (tests/test_concepts.py runs them on the real map and on planted mistakes) ----------------------------
PAPER_SECTIONS = ("§3", "§3.1", "§3.2", "§3.2.1", "§3.2.2", "§3.2.3", "§3.3", "§3.4", "§3.5", "§4",
                  "§5.1", "§5.2", "§5.3", "§5.4", "§6.1", "§6.2", "§6.3")
PAPER_ITEMS = ("Eq. (1)", "Eq. (2)", "Eq. (3)", "Table 1", "Table 2", "Table 3")


def notebook_headings(folder: Path) -> dict[str, list[str]]:
    """Number -> the markdown headings of each ``NN_*.py`` notebook (jupytext percent format) in ``folder``."""
    out: dict[str, list[str]] = {}
    for path in sorted(folder.glob("[0-9][0-9]_*.py")):
        heads = []
        for line in path.read_text(encoding="utf-8").splitlines():
            text = line[2:] if line.startswith("# ") else ""
            if text.startswith("#") and text.lstrip("#").startswith(" "):
                heads.append(" ".join(text.lstrip("#").split()).lower())
        out[path.stem[:2]] = heads
    return out


def problems(doc: dict[str, Any], notebooks: Path) -> list[str]:
    """Everything wrong with a concept map ``doc`` against the notebooks in ``notebooks`` (empty when it is sound):
    a symbol that does not import, a lesson anchor with no such notebook or heading, a row that says "not yet" or
    has no lesson while a notebook uses its code, a paper section, equation or table or a study note left out, a
    notebook the map never points at."""
    heads = notebook_headings(notebooks)
    sources = {n: p.read_text(encoding="utf-8") for p in sorted(notebooks.glob("[0-9][0-9]_*.py")) for n in [p.stem[:2]]}
    found: list[str] = []
    covered_sections, covered_items, covered_notes, mapped = set(), set(), set(), set()
    for r in doc["rows"]:
        label = f"row {r['concept']!r}"
        for name in r["code"]:
            try:
                resolve_symbol(name)
            except LookupError as exc:
                found.append(f"{label}: {exc}")
        for anchor in r["lessons"]:
            number, _, heading = anchor.partition("#")
            if number not in heads:
                found.append(f"{label}: lesson {anchor!r}: no notebook {number}_*.py in {notebooks}")
                continue
            mapped.add(number)
            want = " ".join(heading.split()).lower()
            if want and not any(want in h for h in heads[number]):
                found.append(f"{label}: lesson {anchor!r}: no heading of notebook {number} contains {heading!r}")
        text = json.dumps(r, ensure_ascii=False).lower()
        if r["lessons"] and ("not yet" in text or r.get("not_taught")):
            found.append(f"{label}: has lessons but says it is not taught")
        if not r["lessons"]:
            if not r.get("not_taught"):
                found.append(f"{label}: no lesson and no not_taught reason")
            users = sorted(n for n, src in sources.items() for name in r["code"] if name.rpartition(".")[2] in src)
            if users:
                found.append(f"{label}: says no lesson teaches it, but notebooks {users} use its code: point the row "
                             "at their sections")
        if r.get("section"):
            covered_sections.add(r["paper"])
        covered_items.update(item for item in PAPER_ITEMS if item in r["paper"])
        covered_notes.update(r.get("notes", []))
    found += [f"paper section {s} has no row with section=true" for s in PAPER_SECTIONS if s not in covered_sections]
    found += [f"{item} of the paper has no row" for item in PAPER_ITEMS if item not in covered_items]
    found += [f"study note {n} is covered by no row" for n in doc["notes"] if n not in covered_notes]
    found += [f"notebook {n} is not in the concept map" for n in heads if n not in mapped]
    return found
