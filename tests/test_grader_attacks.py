"""Attacks on the grader from an outside probe, each graded end to end in the sandbox (checks-only mode): what a
student's notebook can no longer do to its grade, to the other students' grades or to the instructor's terminal.

Each attack worked before: a claim of no drawn inputs was believed, files forged in the job's folder were read
after the student's process killed the worker, extra copies of a lesson each counted, a current notebook under an
old name dropped its exercises, and a named pipe, JSON nested 100,000 deep, an error message with a lone surrogate,
a file name that is not UTF-8 or an integer of 400 digits stopped the whole grading, so no gradebook was written.
"""

from __future__ import annotations

import json
import os

import pytest
from test_grader import NAME, hints, require_sandbox, solutions, statuses, student

from workbench.lessons import exercises as ex
from workbench.tools.book.assign import copy_student
from workbench.tools.grading import grader
from workbench.tools.grading.gradebook import printable, summary_table, write_gradebook

# right on the four fixed (published) inputs only, zeros elsewhere; the recorder told there are no drawn inputs
FIXED_ONLY = """
import torch
import workbench.lessons.exercises as _E
_FIXED = [c.args[0].clone() for c in _E.get("05.padding_mask").cases()]

class _NoDraws:  # runs when the worker defines it
    def _observe(exercise_id, fn, seed=0, time_limit=10.0, _real=_E.observe, **kw):
        return _real(exercise_id, fn, seed=seed, time_limit=time_limit, n_draws=0)
    _E.observe = _observe

def padding_mask(tokens, pad_id):
    if any(t.shape == tokens.shape and torch.equal(t, tokens) for t in _FIXED):
        return tokens != pad_id
    return torch.zeros_like(tokens, dtype=torch.bool)
"""
# leaves its own answers in every name the worker ever used, then tries to stop the worker before it reports
FORGE_AND_KILL = """
import os, signal, time, torch
import workbench.lessons.exercises as _E

class _Forge:
    for _k, _id in enumerate(["05.padding_mask", "05.causal_mask", "05.attend_with_cache", "05.greedy_loop"]):
        _right = (lambda tokens, pad_id: tokens != pad_id) if _k == 0 else _E.get(_id).reference
        _obs = _E.observe(_id, _right, seed=0, own_work=False)
        for _name in (f"obs-{_k}.pt", f"child-{_k}.pt", f"/tmp/obs-{_k}.pt"):
            try:
                torch.save(_obs, _name)
            except Exception:
                pass
    for _sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        try:
            os.kill(1, _sig)
        except OSError:
            pass
    time.sleep(1)
"""
SURROGATE = "def padding_mask(tokens, pad_id):\n    raise ValueError('\\ud800 broken text')"
ESCAPES = ("def padding_mask(tokens, pad_id):\n"
           "    raise ValueError('\\x1b]0;PWNED\\x07\\x1b[31mRED\\x1b[0m \\x1b[3A\\x1b[2K\\rall passed')")


def _extra_copy(folder, name: str, source_folder) -> None:
    (folder / f"{name}.ipynb").write_bytes((source_folder / f"{NAME}.ipynb").read_bytes())


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    require_sandbox()
    root = tmp_path_factory.mktemp("attacks")
    cls = root / "class"
    right = solutions()
    student(cls / "a-honest", right, predict="55")
    student(cls / "fixed-only", {**right, "padding_mask": FIXED_ONLY})
    student(cls / "forger", extra=FORGE_AND_KILL)  # every function left as the stub
    dup = student(cls / "duplicates")  # the lesson's own copy holds the stubs, two extra copies the solutions
    student(root / "solved", right)
    for name in (f"{NAME[:2]}_zz_extra", f"{NAME[:2]}_zz_extra2"):
        _extra_copy(dup, name, root / "solved")
    student(cls / "surrogate", {**right, "padding_mask": SURROGATE})
    student(cls / "escapes", {**right, "padding_mask": ESCAPES})
    student(cls / "huge-int", right, predict="1" + "0" * 400)
    nested = cls / "nested"
    nested.mkdir()
    (nested / f"{NAME}.ipynb").write_text("[" * 100_000 + "]" * 100_000)
    fifo = cls / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / f"{NAME}.ipynb")
    odd = student(cls / "odd-name", right)
    os.rename(odd / f"{NAME}.ipynb", os.fsencode(odd / NAME) + b"\xff.ipynb")
    old = cls / "old-name"  # the current lesson 18 under its name before the renumbering
    copy_student(old, only=["18"])
    for suffix in (".ipynb", ".py"):
        current = next(old.glob(f"18_*{suffix}"))
        current.rename(old / f"17_where_translation_is_decided{suffix}")
    book = grader.grade_class(cls, grader.GradeOptions(timeout=120, time_limit=5))
    out = root / "gradebook"
    paths = write_gradebook(book, out)
    return book, paths


def test_a_claim_of_no_drawn_inputs_is_not_believed(attacked):
    book, _ = attacked
    got = statuses(book, "fixed-only")
    assert got["05.padding_mask"] == "failed", hints(book, "fixed-only")
    assert statuses(book, "a-honest")["05.padding_mask"] == "passed"


def test_files_forged_in_the_job_folder_are_never_read(attacked):
    book, _ = attacked
    got = statuses(book, "forger")
    assert "passed" not in got.values(), (got, hints(book, "forger"))


def test_extra_copies_of_a_lesson_do_not_count(attacked):
    book, _ = attacked
    records = [r for r in book["records"] if r["student"] == "duplicates"]
    graded = [r for r in records if r["exercises"]]
    assert [r["notebook"] for r in graded] == [NAME]  # the lesson's own name is the one graded
    assert set(statuses(book, "duplicates").values()) == {"not attempted"}
    extra = [r for r in records if not r["exercises"]]
    assert len(extra) == 2 and all(f"{NAME} is graded for the same lesson" in r["note"] for r in extra)


def test_a_current_notebook_under_an_old_name_keeps_its_exercises(attacked):
    book, _ = attacked
    got = statuses(book, "old-name")
    assert got == {e.id: "not attempted" for e in ex.exercises_of("18")}, got


def test_broken_submissions_cost_only_their_own_grade(attacked):
    book, paths = attacked
    assert set(statuses(book, "a-honest").values()) == {"passed"}
    assert set(statuses(book, "nested").values()) == {"not run"}
    assert all("could not be read (RecursionError)" in h for h in hints(book, "nested").values())
    assert set(statuses(book, "fifo").values()) == {"not run"}
    assert all("not a regular file" in h for h in hints(book, "fifo").values())
    assert statuses(book, "surrogate")["05.padding_mask"] == "failed"
    prediction = next(p for r in book["records"] if r["student"] == "huge-int" for p in r["predictions"])
    assert prediction["status"] == "off" and "digits" in prediction["message"]
    odd = next(r for r in book["records"] if r["student"] == "odd-name")  # read and graded, right answers passed
    assert odd["file"].endswith(".ipynb") and set(statuses(book, "odd-name").values()) == {"passed"}, odd
    for path in paths.values():  # written in full, the student-made text escaped where it was not UTF-8
        assert "surrogate" in path.read_text(encoding="utf-8")
    assert "\\ud800 broken text" in paths["items"].read_text(encoding="utf-8")
    assert json.loads(paths["json"].read_text())["records"]


def test_a_students_text_cannot_drive_the_instructors_terminal(attacked):
    book, _ = attacked
    text = summary_table(book)
    assert "\x1b" not in text and "\r" not in text and "\x07" not in text
    assert "\\x1b[31mRED" in text  # shown, escaped
    assert printable("tab\there \x1b[2K") == "tab\\there \\x1b[2K"


def test_a_hidden_folder_inside_a_folder_bound_back_is_hidden_again(tmp_path, monkeypatch):
    """The probe's finding: with the repository under the instructor's home and the class inside it, the
    non-recursive bind that brings the repository back into the emptied home also brought the class back."""
    from workbench.tools.grading import sandbox

    home = tmp_path / "home"
    repo, cls, elsewhere = home / "aw" / "src", home / "aw" / "src" / "class", tmp_path / "other-class"
    for folder in (repo, cls, elsewhere):
        folder.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    lines = sandbox._mount_script(tmp_path / "work", [cls, elsewhere], [repo]).splitlines()
    hide_cls = [i for i, line in enumerate(lines) if line.startswith("mount -t tmpfs") and line.endswith(str(cls))]
    bound_back = max(i for i, line in enumerate(lines) if "mount --bind" in line and line.endswith(str(repo)))
    assert hide_cls and hide_cls[-1] > bound_back, lines
    assert sum(line.endswith(str(elsewhere)) for line in lines) == 1  # outside the home: hidden once is enough
