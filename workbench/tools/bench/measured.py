"""What each benchmark measures: the package modules whose speed its figures depend on, kept in one place.

A published figure is current when its result file's commit is at or after the last commit that changed the
modules it measures (``git merge-base --is-ancestor``), or when those modules there differ from HEAD's only in
docstrings and comments (:func:`same_code`: a reworded docstring does not change a speed). ``tests/test_figures_current.py`` checks every result file
the book's Benchmarks and Training pages and the README cite; a page may still quote an older file where the same
paragraph says so in the words ``measured at <commit>`` (a figure labelled as history, not presented as current).

The map lists the modules that hold the code a figure times, not the whole package: a change to the command line or
a lesson does not make a training-step time stale, a change to the attention or to the dropout kernel does. Results
of a training run's quality (BLEU of a recipe, a shipped model's card) are records of that run; where a page quotes
their speed (steps in the time budget) the run's script is mapped like any benchmark.
"""

from __future__ import annotations

import ast
import re
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]

# the paper's model as it trains and decodes: every timed figure runs this code
MODEL = ("workbench/model/attention.py", "workbench/model/transformer.py", "workbench/model/positional.py",
         "workbench/model/masks.py", "workbench/model/hook_points.py")
# a training step as fit() takes it: the model, the CPU kernels installed on it, the loss
TRAIN_STEP = (*MODEL, "workbench/translation/kernels.py", "workbench/translation/objective.py")
# training end to end: the step, the loop and the token-budget batches
FIT = (*TRAIN_STEP, "workbench/translation/train.py", "workbench/translation/batching.py")
# decoding: the model, greedy and beam search, their per-step helpers
DECODE = (*MODEL, "workbench/translation/decode.py", "workbench/translation/decode_steps.py")
# a shipped model translating a test split: decoding behind wb.translate
TRANSLATE = (*DECODE, "workbench/translation/pipeline.py")
# the number-format choice and autocast (bf16 runs)
PRECISION = ("workbench/runtime.py",)

MEASURED: dict[str, tuple[str, ...]] = {
    # `workbench bench --suite NAME` (workbench/tools/bench/suites.py, probes.py)
    "attention": ("workbench/model/attention.py",),
    "train_step": TRAIN_STEP,
    "capture": (*MODEL, "workbench/inspect/capture.py"),
    "decoding": DECODE,
    "e2e": FIT,
    "sdpa": ("workbench/model/attention.py",),
    "precision": (*TRAIN_STEP, *DECODE[len(MODEL):], *PRECISION),
    # scripts under bench/ (and bench/archive/), by file name
    "profile_step": TRAIN_STEP,
    "decoding_engines": TRANSLATE,
    "bf16_shipped": (*TRANSLATE, "workbench/model/rnn.py", *PRECISION),
    "translate_multi30k": FIT,  # steps made in the recipe's minutes, and the BLEU those steps reach
    "e2e_precision": (*FIT, *PRECISION),
    "malloc_decoding": (*DECODE, *PRECISION),
    "beam_selection": ("workbench/translation/decode.py", "workbench/translation/decode_steps.py"),
    "bf16_attention_paths": ("workbench/model/attention.py", "workbench/translation/kernels.py"),
    "time_book": ("notebooks", "workbench/tools/book"),  # the book's build: every notebook and the builder
    # what a study computes from the shipped model (counts and correlations, not times)
    "attention_vs_attribution": ("workbench/inspect/attribution.py", "workbench/inspect/align.py",
                                 "workbench/inspect/flow.py", "workbench/inspect/intervene.py"),
    # records of a training run or of a shipped model: what they describe is that run and its weights
    "train": (),
    "val_choice": (),
}


def benchmarks_of(report: Mapping[str, Any]) -> list[str]:
    """The benchmarks a result file holds: the suites of a ``workbench bench`` report, else the ``bench/`` script
    its command ran (``bench/profile_step.py`` -> ``profile_step``), else ``train`` for a model card or a training
    run's summary; ``[]`` when the file says neither."""
    if "suites" in report:
        return list(report["suites"])
    command = report.get("command") or report.get("provenance", {}).get("command") or []
    if isinstance(command, str):
        command = command.split()
    for arg in map(str, command):
        if arg.endswith(".py") and "bench" in Path(arg).parts[:-1]:  # bench/NAME.py, bench/archive/NAME.py
            return [Path(arg).stem]
    if "reproduce" in report or "run_config" in report:
        return ["train"]
    return []


TREE_NOTE = re.compile(r"working tree it ran was commit ([0-9a-f]{7,40})")


def commits_of(report: Mapping[str, Any]) -> list[str]:
    """The commits a result file names: its ``commit`` (``"74e4c5e + 2730b24"``, a tree made of two, gives both), or
    the commit its ``tree_note`` says the working tree was where the record's own reads another (a lent machine
    whose ``.git`` was older than the tree it ran)."""
    note = TREE_NOTE.search(str(report.get("tree_note", "")))
    if note:
        return [note.group(1)]
    commit = report.get("commit") or report.get("provenance", {}).get("commit") or report.get("git_commit")
    return [c.strip() for c in str(commit).split("+") if c.strip()] if commit else []


def measured_paths(benchmarks: Iterable[str]) -> tuple[str, ...]:
    """The union of the modules the benchmarks measure (a :class:`KeyError` names a benchmark the map lacks)."""
    unknown = [b for b in benchmarks if b not in MEASURED]
    if unknown:
        raise KeyError(f"benchmark(s) {unknown} are not in workbench/tools/bench/measured.py's MEASURED: add what "
                       "they measure")
    return tuple(sorted({p for b in benchmarks for p in MEASURED[b]}))


def _git(*args: str, repo: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=60)


def reachable(commit: str, repo: Path = REPO) -> bool:
    """True when ``commit`` is in the history of HEAD."""
    return _git("merge-base", "--is-ancestor", commit, "HEAD", repo=repo).returncode == 0


def last_change(paths: Iterable[str], repo: Path = REPO) -> str | None:
    """The last commit that changed any of ``paths`` (None when none did)."""
    paths = list(paths)
    if not paths:
        return None
    out = _git("log", "-1", "--format=%H", "HEAD", "--", *paths, repo=repo)
    return out.stdout.strip() or None


def _code(text: str | None, path: str) -> str | None:
    """A module's code without its docstrings and comments (``ast.dump``), or the text itself for a file that is not
    Python or does not parse; None for a missing file."""
    if text is None or not path.endswith(".py"):
        return text
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


def _files(paths: Iterable[str], commit: str, repo: Path) -> dict[str, str | None]:
    """Each file under ``paths`` at ``commit`` (a folder expanded), its code as :func:`_code` reads it."""
    listed = _git("ls-tree", "-r", "--name-only", commit, "--", *paths, repo=repo).stdout.split()
    return {f: _code(_git("show", f"{commit}:{f}", repo=repo).stdout, f) for f in listed}


def same_code(paths: Iterable[str], commit: str, repo: Path = REPO) -> bool:
    """True when the code under ``paths`` at ``commit`` is HEAD's but for docstrings and comments: a result measured
    there measured today's code (an edited docstring or a moved comment does not change a speed)."""
    paths = list(paths)
    return _files(paths, commit, repo) == _files(paths, "HEAD", repo)


def staleness(report: Mapping[str, Any], repo: Path = REPO) -> str | None:
    """Why the figures of ``report`` are older than the code they measure (None when they are current): the result's
    commit must be at or after the last change to the modules its benchmarks measure, or hold the same code as HEAD
    but for docstrings and comments."""
    benchmarks = benchmarks_of(report)
    if not benchmarks:
        return "the file names no benchmark (no `suites`, no bench/ script in its command)"
    commits = commits_of(report)
    if not commits:
        return "the file records no commit"
    paths = measured_paths(benchmarks)
    last = last_change(paths, repo)
    if last is None or any(reachable_from(last, c, repo) for c in commits):
        return None
    if any(reachable(c, repo) and same_code(paths, c, repo) for c in commits):
        return None
    subject = _git("log", "-1", "--format=%h %s", last, repo=repo).stdout.strip()
    return (f"measured at {commits[-1][:7]}, but {', '.join(benchmarks)} measure(s) code changed since by "
            f"{subject[:90]!r}")


def reachable_from(ancestor: str, commit: str, repo: Path = REPO) -> bool:
    """True when ``ancestor`` is ``commit`` or in its history."""
    return _git("merge-base", "--is-ancestor", ancestor, commit, repo=repo).returncode == 0
