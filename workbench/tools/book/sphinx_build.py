"""The Sphinx side of the book: ``sphinx-build`` in a subprocess, and the book's extension (the ``{nb}`` role that
links a page to notebook NN and to one of its sections), which ``book_src/conf.py`` loads."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from workbench.errors import BookError


def _package_on_path() -> dict[str, str]:
    root = str(Path(__file__).resolve().parents[3])
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}


def run_sphinx(src: str | Path, out: str | Path, doctrees: str | Path) -> list[str]:
    """``sphinx-build -b html -E`` in a subprocess (this interpreter, this package first on the path).

    Returns:
        Sphinx's warnings, one per line.

    Raises:
        BookError: Sphinx or one of the book's extensions is not installed, or the build failed.
    """
    import importlib.util

    missing = [m for m in ("sphinx", "myst_nb", "sphinx_book_theme", "sphinx-mathjax-offline")
               if importlib.util.find_spec(m) is None]
    if missing:
        raise BookError(f"the book needs {', '.join(missing)}: install them with "
                        "`pip install -e \".[book]\"` (sphinx, myst-nb, sphinx-book-theme, sphinx-mathjax-offline)")
    warnings_file = Path(doctrees).parent / "sphinx-warnings.txt"
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-E", "-q", "-d", str(doctrees), "-w", str(warnings_file),
           str(src), str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_package_on_path())
    warnings = warnings_file.read_text(encoding="utf-8").splitlines() if warnings_file.exists() else []
    if proc.returncode != 0:
        raise BookError(f"sphinx-build failed (exit {proc.returncode}):\n{(proc.stderr or proc.stdout)[-4000:]}")
    return [w for w in warnings if w.strip()]


# -- the Sphinx side: the {nb} role ------------------------------------------------------------------------------
NB_ROLE = re.compile(r"\{nb\}`([^`]+)`")


def parse_nb_target(text: str) -> tuple[str | None, str, str]:
    """``"title <02#Why divide>"`` -> (``"title"``, ``"02"``, ``"Why divide"``); no title -> None."""
    m = re.match(r"^(.*?)\s*<([^<>]+)>$", text.strip(), re.S)
    title, target = (m.group(1).strip() or None, m.group(2)) if m else (None, text.strip())
    notebook, _, heading = target.partition("#")
    return title, notebook.strip(), heading.strip()


def nb_role_targets(markdown: str) -> list[tuple[str, str]]:
    """(notebook, heading) of every ``{nb}`...``` reference in a Markdown text (for checks of the concept map)."""
    return [parse_nb_target(m)[1:] for m in NB_ROLE.findall(markdown)]


STRAIGHT_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})


def _comparable(text: str) -> str:
    """Lower-cased, single-spaced, with Sphinx's typographic quotes made straight again (its smartquotes turn the
    apostrophe of "The paper's Table 2" into a curly one in the rendered title)."""
    return " ".join(text.translate(STRAIGHT_QUOTES).lower().split())


def find_section(doctree: Any, heading: str) -> Any:
    """The first section whose title contains ``heading`` (case-insensitive, straight or curly quotes alike), or
    None."""
    from docutils import nodes

    want = _comparable(heading)
    for section in doctree.findall(nodes.section):
        if want in _comparable(section[0].astext()):
            return section
    return None


def sphinx_setup(app: Any) -> dict[str, Any]:
    """Sphinx extension of the book (``conf.py`` calls it): the ``{nb}`NN#heading``` role, a link to the page of
    notebook NN (and to its first section whose title contains ``heading``); a notebook that is not part of this
    build is named in plain text."""
    from docutils import nodes
    from sphinx import addnodes
    from sphinx.util import logging as sphinx_logging

    slog = sphinx_logging.getLogger("workbench.tools.book.sphinx_build")

    def nb_role(name, rawtext, text, lineno, inliner, options=None, content=None):  # noqa: ANN001 (docutils API)
        title, notebook, heading = parse_nb_target(text)
        node = addnodes.pending_xref(rawtext, refdomain="", reftype="nb", reftarget=f"{notebook}#{heading}",
                                     refexplicit=title is not None, nbtitle=title or "", nbnotebook=notebook,
                                     nbheading=heading)
        node += nodes.inline(title or text, title or text)
        return [node], []

    def resolve(app_, env, node, contnode):  # noqa: ANN001 (Sphinx API)
        if node.get("reftype") != "nb":
            return None
        notebook, heading, title = node["nbnotebook"], node["nbheading"], node["nbtitle"]
        docs = sorted(d for d in env.found_docs if d == notebook or d.startswith(f"{notebook}_"))
        if not docs:
            label = title or f"notebook {notebook}"
            return nodes.inline("", f"{label} (not in this build)", classes=["nb-missing"])
        doc = docs[0]
        uri = app_.builder.get_relative_uri(node["refdoc"], doc)
        ref = nodes.reference("", "", internal=True, refuri=uri)
        page_title = [c.deepcopy() for c in env.titles[doc].children]
        section = find_section(env.get_doctree(doc), heading) if heading else None
        if heading and section is None:
            slog.warning("{nb}`%s`: no section of %s has a title containing %r", node["reftarget"], doc, heading,
                         location=node)
        if section is not None:
            ref["refuri"] = f"{uri}#{section['ids'][0]}"
            children = [nodes.Text(f"{doc[:2]} § "), *[c.deepcopy() for c in section[0].children]]
        else:
            children = page_title
        ref.extend([nodes.Text(title)] if title else children)
        return ref

    app.add_role("nb", nb_role)
    app.connect("missing-reference", resolve)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
