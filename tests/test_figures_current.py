"""Every figure the book's Benchmarks and Training pages and the README quote comes from a result file that is at or
after the last change of the code it measures, and names a commit that is in the history.

What each benchmark measures is mapped in one place, :data:`workbench.tools.bench.measured.MEASURED`. A page may quote
an older result where the same paragraph (or table row) says ``measured at <commit>``: a figure labelled as history,
not presented as current. A commit missing from the history is accepted only where the result's folder README says
so (``<commit> ... not in the history``) and names the tree it ran.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from conftest import require

from workbench.tools.bench import measured

REPO = Path(__file__).resolve().parents[1]
PAGES = ("README.md", "workbench/book_src/benchmarks.md", "workbench/book_src/training.md",
         "workbench/book_src/training-history.md")
# a result file (``x.json``, ``bench/results/a/x.json``, a name relative to bench/results/) or a results folder
CITATION = re.compile(r"[A-Za-z0-9_./-]*[A-Za-z0-9_]\.json|bench/(?:archive/)?results/[A-Za-z0-9_./-]+/")
BENCH = REPO / "bench"


def _full_history() -> None:
    shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=REPO, capture_output=True, text=True)
    require(shallow.returncode == 0 and shallow.stdout.strip() == "false",
            "the repository's full git history (the test compares result commits with the commits that changed code)",
            "clone without --depth, or run `git fetch --unshallow`")


def _resolve(token: str) -> Path | None:
    """The file or folder under bench/ a citation names: a path from the repository root, or from bench/results/ or
    bench/archive/results/, or a name that ends exactly one path under bench/; None when it names nothing there."""
    inside = re.search(r"(?:^|/)(bench/.*)", token)  # /work/main/bench/results/x.json -> bench/results/x.json
    if inside:
        token = inside.group(1)
    for base in (REPO, BENCH / "results", BENCH / "archive" / "results"):
        if (base / token).exists():
            return base / token
    if token.endswith("/"):
        return None
    found = [p for p in BENCH.rglob("*.json") if str(p).endswith("/" + token)]
    return found[0] if len(found) == 1 else None


def _paragraphs(text: str) -> list[str]:
    """Blocks separated by blank lines, where a table row and a list item (with its indented continuation lines) are
    each a block of their own."""
    blocks = []
    for block in re.split(r"\n\s*\n", text):
        items: list[str] = []
        for line in block.splitlines():
            if line.startswith("  ") and items and items[-1].startswith("- "):
                items[-1] += "\n" + line  # a list item's continuation
            elif line.startswith(("|", "- ")) or not items or items[-1].startswith(("|", "- ")):
                items.append(line)
            else:
                items[-1] += "\n" + line  # a prose paragraph's next line
        blocks += items
    return blocks


def citations(text: str) -> list[tuple[Path, str]]:
    """(cited file or folder, the paragraph citing it) for every result a page names; a command's output path
    (after ``--json``/``--out``), a template (``NAME``, ``*``) and a path outside bench/ are not citations."""
    cited = []
    # the Benchmarks page's generated block ends with its files' provenance ("Sources:"), which quotes no figure
    text = re.sub(r"\nSources:\n.*?(?=<!-- bench-results:end -->)", "\n", text, flags=re.S)
    for para in _paragraphs(text):
        for m in CITATION.finditer(para):
            token = m.group(0)
            before, after = para[:m.start()], para[m.end():m.end() + 1]
            if before.endswith(("--json ", "--json=", "--out ", "--out=")) or "NAME" in token or after in ("*", "{", "<"):
                continue
            if token.startswith("-") or before.endswith("*"):  # a pattern's tail, e.g. translate-small-*-cpu-X.json
                continue
            path = _resolve(token)
            if path is None:
                if token.startswith("bench/") and not token.endswith("/"):  # a result file that is not there
                    raise AssertionError(f"the page cites {token}, which is not under bench/: {para[:120]!r}")
                continue
            cited.append((path, para))
    return cited


def _annotated_unreachable(path: Path, commit: str) -> bool:
    """The result's folder README says its commit is not in the history (and what tree it ran)."""
    for folder in (path.parent, *path.parents):
        readme = folder / "README.md"
        if readme.exists():
            text = " ".join(readme.read_text(encoding="utf-8").split())
            return commit[:7] in text and "not in the history" in text
        if folder == BENCH:
            break
    return False


def problems(text: str) -> list[str]:
    """What is wrong with the results a page's text cites: a commit missing from the history (and not annotated), or
    a figure older than the code it measures whose paragraph does not say ``measured at <commit>``."""
    found: list[str] = []
    for path, para in dict.fromkeys(citations(text)):  # a file cited twice in one paragraph is checked once
        files = sorted(path.rglob("*.json")) if path.is_dir() else [path]
        for file in files:
            report = json.loads(file.read_text(encoding="utf-8"))
            if not isinstance(report, dict):
                continue
            name = file.relative_to(REPO) if file.is_relative_to(REPO) else file.name
            for commit in measured.commits_of(report):
                if not measured.reachable(commit) and not _annotated_unreachable(file, commit):
                    found.append(f"{name}: commit {commit} is not in the history (re-run it, or say in its folder's "
                                 "README which tree it ran)")
            if path.is_dir() or not measured.commits_of(report):
                continue  # a folder is cited as a whole (its README has the figures); a run's data files record no commit
            why = measured.staleness(report)
            if why and f"measured at {measured.commits_of(report)[-1][:7]}" not in " ".join(para.split()):
                found.append(f"{name}: {why}; re-measure it, or say `measured at "
                             f"{measured.commits_of(report)[-1][:7]}` where the page quotes it: {para[:100]!r}")
    return list(dict.fromkeys(found))


@pytest.mark.parametrize("page", PAGES)
def test_every_cited_figure_is_current_or_labelled(page):
    _full_history()
    text = (REPO / page).read_text(encoding="utf-8")
    assert citations(text) or page == "workbench/book_src/training.md", f"{page}: found no cited result"
    found = problems(text)
    assert not found, f"{page}:\n" + "\n".join(found)


def _report(tmp_path: Path, name: str, commit: str, suites: list[str]) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"commit": commit, "suites": suites, "command": ["workbench", "bench"]}))
    return path


def test_a_planted_stale_citation_fails_and_its_label_passes(tmp_path, monkeypatch):
    """A page quoting a decoding figure measured before the model's package existed fails; the same figure labelled
    ``measured at <commit>`` passes; one measured at HEAD passes; a commit that is not in the history fails."""
    _full_history()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    monkeypatch.setattr(measured, "REPO", REPO)
    split = subprocess.run(["git", "log", "-1", "--format=%H", "--diff-filter=A", "--", "workbench/model/attention.py"],
                           cwd=REPO, capture_output=True, text=True).stdout.strip()
    before_split = subprocess.run(["git", "rev-parse", f"{split}~1"], cwd=REPO, capture_output=True,
                                  text=True).stdout.strip()
    stale = _report(tmp_path, "stale.json", before_split, ["decoding"])
    current = _report(tmp_path, "current.json", head, ["decoding"])
    lost = _report(tmp_path, "lost.json", "0123456789abcdef0123456789abcdef01234567", ["decoding"])
    monkeypatch.setattr(f"{__name__}._resolve", lambda token: tmp_path / Path(token).name
                        if (tmp_path / Path(token).name).exists() else None)

    assert any("stale.json" in p and "decoding" in p for p in problems(f"KV cache 3.8x (`{stale.name}`)."))
    assert problems(f"KV cache 3.8x (`{stale.name}`, measured at {before_split[:7]}).") == []
    assert problems(f"KV cache 3.8x (`{current.name}`).") == []
    assert any("not in the history" in p for p in problems(f"KV cache 3.8x (`{lost.name}`)."))


def test_every_benchmark_a_page_cites_is_mapped():
    """Each result file the pages cite names benchmarks the map knows (an unmapped one would pass unchecked)."""
    for page in PAGES:
        for path, _ in citations((REPO / page).read_text(encoding="utf-8")):
            for file in ([path] if path.is_file() else []):
                report = json.loads(file.read_text(encoding="utf-8"))
                if measured.commits_of(report):
                    assert measured.benchmarks_of(report), f"{file}: names no benchmark"
                    measured.measured_paths(measured.benchmarks_of(report))  # KeyError for an unmapped one


def _readme_table():
    import importlib.util

    spec = importlib.util.spec_from_file_location("readme_table", REPO / "bench" / "readme_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_contended_run_says_so_in_the_table(tmp_path):
    """A run that other work loaded (1-minute load average above 1.5 on 2 CPUs at its start) is published with every
    figure marked contended and its load under Sources; an idle one is not marked."""
    from workbench.tools.provenance import contended

    table = _readme_table()
    base = {"suites": ["capture"], "commit": "0123456789abcdef", "device": "cpu", "cpu_model": "Some CPU", "threads": 2,
            "cpu_count": 2, "torch": "2.13.0", "command": ["workbench", "bench"],
            "capture": {"inactive_overhead_pct": 0.4, "inactive_train_overhead_pct": 0.1, "active_overhead_pct": 10.0}}
    (tmp_path / "busy.json").write_text(json.dumps({**base, "load_average_start": [8.2, 7.0, 5.0],
                                                    "load_average_end": [9.1, 7.5, 5.2]}))
    (tmp_path / "idle.json").write_text(json.dumps({**base, "load_average_start": [0.3, 0.5, 0.6],
                                                    "load_average_end": [1.9, 0.8, 0.7]}))
    out = table.render(tmp_path)
    rows = [r for r in out.splitlines() if r.startswith("| hook points")]
    assert len(rows) == 2
    assert "contended" in next(r for r in rows if "`busy.json`" in r)
    assert "contended" not in next(r for r in rows if "`idle.json`" in r)  # its end load is its own two threads
    assert "load average 8.2 -> 9.1, **contended**" in out and "load average 0.3 -> 1.9, torch" in out
    assert contended([1.6], None, 2, 2) and not contended([1.4], [3.4], 2, 2) and contended([1.4], [3.6], 2, 2)
    assert contended(None) is None


def test_a_docstring_or_comment_is_not_a_change_of_the_measured_code():
    """Results stay current across a reworded docstring or comment (their speed cannot change), not across code."""
    before = 'def f(x):\n    """Old words."""\n    return x + 1  # one\n'
    assert measured._code(before, "m.py") == measured._code('def f(x):\n    """New words."""\n    return x + 1\n', "m.py")
    assert measured._code(before, "m.py") != measured._code('def f(x):\n    """Old words."""\n    return x + 2\n', "m.py")
    assert measured._code("a", "notes.md") != measured._code("b", "notes.md")
