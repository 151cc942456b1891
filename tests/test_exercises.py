"""The exercises of notebooks 01-18: every planted mistake recognised by name (fast, no
notebook), the checks' one-line reports, otter-style solution stripping, the masters passing every check in SMOKE,
the student copies running to their end with every exercise "not attempted", and ``workbench notebooks grade``
naming exactly the wrong exercise.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
import torch
from _solutions import master_solutions  # noqa: I001 (tests/ is on the path)

from workbench.lessons import exercises as ex
from workbench.tools.book.assign import (
    SolutionMarkerError,
    copy_student,
    has_solutions,
    solution_view,
    strip_solutions,
)
from workbench.tools.book.notebooks import list_notebooks
from workbench.tools.book.runner import run_notebook

REPO = Path(__file__).resolve().parents[1]
MASTERS = [p for p in list_notebooks(REPO / "notebooks") if ex.exercises_of(p.stem[:2])]  # every notebook with one
PLANTED = [(e.id, m.name) for e in ex.EXERCISES.values() for m in e.mistakes]


# -- (c) every planted mistake is recognised by name ---------------------------------------------------------------
@pytest.mark.parametrize(("exercise_id", "mistake"), PLANTED, ids=[f"{e}:{m}" for e, m in PLANTED])
def test_planted_mistake_is_recognised_by_name(exercise_id, mistake):
    result = ex.recognised(exercise_id, mistake)
    assert result.status == ex.FAILED
    assert result.mistake == mistake, result.message
    assert f"'{mistake}'" in result.message
    assert result.function is ex.get(exercise_id).reference  # the lesson goes on with the package's function


@pytest.mark.parametrize("exercise_id", list(ex.EXERCISES))
def test_the_masters_solution_passes_its_check_whatever_the_seed(exercise_id):
    """The master notebook's own solution (what the book shows) passes on the fixed inputs and on the inputs drawn
    from three seeds (the per-student variants)."""
    e = ex.get(exercise_id)
    solution = master_solutions(e.notebook)[e.function_name]
    for seed in (0, 1, 12345):
        result = ex.check(exercise_id, solution, seed=seed)
        assert result.passed, (seed, result.message)
        assert result.function is solution


def test_variants_plant_one_wrong_implementation_per_setting():
    def scaled(x, factor=1.0, offset=0.0):
        return x * factor + offset

    half, shifted = ex.variants(scaled, ("halved", "multiply by 1", {"factor": 0.5}), ("shifted", "add nothing",
                                                                                          {"offset": 1.0}))
    assert (half.name, half.hint, half.fn(4.0)) == ("halved", "multiply by 1", 2.0)
    assert shifted.fn(4.0) == 5.0
    with pytest.raises(ValueError, match="'unchanged' changes no setting of scaled"):  # it would plant the reference
        ex.variants(scaled, ("unchanged", "nothing", {}))


def test_the_series_has_enough_exercises_and_mistakes():
    by_notebook = {e.notebook for e in ex.EXERCISES.values()}
    assert by_notebook == {f"{i:02d}" for i in range(1, 19)}  # every lesson
    assert len(ex.EXERCISES) >= 40 and len(by_notebook) >= 14, (len(ex.EXERCISES), sorted(by_notebook))  # issue 48
    assert len(PLANTED) >= 3 * len(ex.EXERCISES), len(PLANTED)
    assert {p.stem[:2] for p in MASTERS} == by_notebook


def test_every_check_has_edge_cases():
    """Each exercise tries more than one input, and the tensor exercises include batch or length 1 and float64."""
    for e in ex.EXERCISES.values():
        names = " ".join(c.name for c in e.cases()).lower()
        assert len(e.cases()) >= 2 or e.driver is not None, e.id
        args = [a for c in e.cases() for a in c.args if isinstance(a, torch.Tensor) and a.is_floating_point()]
        if args and e.id not in ("07.label_smoothed_loss", "07.length_penalty", "07.beam_step"):
            assert any(a.dtype == torch.float64 for a in args), f"{e.id} has no float64 input"
            assert "1" in names, f"{e.id} has no batch-1 or length-1 input: {names}"


# -- the one-line reports -----------------------------------------------------------------------------------------
def _stub(*_args):
    raise NotImplementedError("write it")


def test_stub_is_not_attempted_and_lesson_gets_the_package_function():
    result = ex.check("02.attention_weights", _stub)
    assert result.status == ex.NOT_ATTEMPTED
    assert result.function is ex.get("02.attention_weights").reference


def test_exception_is_reported_in_one_line():
    def broken(q, k, mask=None):
        return q @ k  # (.., Tq, dk) @ (.., Tk, dk): the keys were not transposed

    result = ex.check("02.attention_weights", broken)
    assert result.status == ex.FAILED
    assert result.message.startswith("raised RuntimeError") and "\n" not in result.message


def test_wrong_shape_prints_both_shapes():
    result = ex.check("01.dot_score", lambda s, H: H[:, :, 0].T)
    assert result.status == ex.FAILED and result.mistake is None
    assert re.search(r"shape \((\d+), (\d+)\), expected \(\2, \1\)", result.message), result.message
    assert "yours [[" in result.message and "expected [[" in result.message  # both outputs, on the smallest input


def test_nan_and_dtype_and_largest_difference_reports():
    nan = ex.check("01.context_vector", lambda alpha, H: (alpha[:, :, None] * H).sum(1) * float("nan"))
    assert nan.status == ex.FAILED and "NaN at" in nan.message
    dtype = ex.check("01.context_vector", lambda alpha, H: (alpha[:, :, None] * H).sum(1).float())
    assert dtype.status == ex.FAILED and "dtype torch.float32, expected torch.float64" in dtype.message
    off = ex.check("01.context_vector", lambda alpha, H: (alpha[:, :, None] * H).sum(1) + 0.5)
    assert off.status == ex.FAILED and "largest difference 0.5 at index" in off.message


def test_wrong_device_and_missing_return_are_reported():
    meta = ex.check("01.dot_score", lambda s, H: (H * s[:, None, :]).sum(-1).to("meta"))
    assert meta.status == ex.FAILED and "device meta, expected cpu" in meta.message
    nothing = ex.check("01.dot_score", lambda s, H: None)
    assert nothing.status == ex.FAILED and "returned a NoneType" in nothing.message


def test_time_limit_is_reported():
    def slow(s, H):
        time.sleep(5)
        return (H * s[:, None, :]).sum(-1)

    start = time.perf_counter()
    result = ex.check("01.dot_score", slow, time_limit=0.3)
    assert time.perf_counter() - start < 3
    assert result.status == ex.FAILED and "time limit" in result.message


def test_a_check_leaves_the_random_streams_as_they_were():
    torch.manual_seed(0)
    ex.check("03.multi_head_attention", ex.get("03.multi_head_attention").reference)  # builds modules: draws
    after = torch.rand(3)
    torch.manual_seed(0)
    assert torch.equal(after, torch.rand(3))


def test_predict_compares_and_never_raises():
    assert ex.predict("t.none", None, 2.0, "why").status == "no prediction"
    assert ex.predict("t.close", 2.1, 2.0, "why").status == "right"
    assert ex.predict("t.far", 5.0, 2.0, "why").status == "off"
    assert ex.predict("t.word", "h_3", 3, "why").status == "off"
    summary = ex.summary()
    assert {p["prediction"] for p in summary["predictions"]} >= {"t.none", "t.close", "t.far"}
    json.dumps(summary)  # goes into metrics.json


# -- solution markers (otter-grader's syntax) ---------------------------------------------------------------------
MASTER_CELL = '''def f(x):
    """doc"""
    # BEGIN SOLUTION NO PROMPT
    y = x * 2
    return y
    # END SOLUTION
    """ # BEGIN PROMPT
    raise NotImplementedError("write f")
    """  # END PROMPT

a = 3  # SOLUTION
b = 4  # SOLUTION NO PROMPT
if True:
    # BEGIN SOLUTION
    print(a)
    # END SOLUTION
'''


def test_strip_solutions_follows_otter_rules():
    student = strip_solutions(MASTER_CELL)
    assert "x * 2" not in student and "print(a)" not in student and "b = 4" not in student
    assert 'raise NotImplementedError("write f")' in student and "PROMPT" not in student
    assert "a = ..." in student and "    ..." in student  # a BEGIN SOLUTION without NO PROMPT leaves `...`
    namespace: dict = {}
    exec(compile(student, "student", "exec"), namespace)  # noqa: S102 (our own test text)
    with pytest.raises(NotImplementedError):
        namespace["f"](1)
    master: dict = {}
    exec(compile(MASTER_CELL.replace("print(a)", "pass"), "master", "exec"), master)  # noqa: S102
    assert master["f"](2) == 4  # the prompt is an inert string in the master


def test_solution_view_keeps_the_solution_only():
    view = solution_view(MASTER_CELL)
    assert "y = x * 2" in view and "print(a)" in view and "a = 3" in view and "b = 4" in view
    assert "SOLUTION" not in view and "PROMPT" not in view and "NotImplementedError" not in view


def test_unbalanced_markers_are_refused():
    with pytest.raises(SolutionMarkerError, match="never closed"):
        strip_solutions("# BEGIN SOLUTION\nx = 1\n")
    with pytest.raises(SolutionMarkerError, match="END SOLUTION without BEGIN"):
        strip_solutions("x = 1\n# END SOLUTION\n")


def test_every_exercise_is_in_its_master_with_solution_and_check():
    text = {p.stem[:2]: p.with_suffix(".py").read_text() for p in MASTERS}
    for e in ex.EXERCISES.values():
        assert f'ex.check("{e.id}",' in text[e.notebook], f"{e.id} is not checked in its notebook"
    for number, source in text.items():
        assert has_solutions(source), number
        for prediction in (p for p in ex.PREDICTIONS.values() if p.id.split(".", 1)[0] == number):
            assert 'tags=["answer"]' in source and f'ex.predict("{prediction.id}",' in source, prediction.id
        assert any(p.id.startswith(f"{number}.") for p in ex.PREDICTIONS.values()), f"{number}: no prediction"
        assert "metrics.update(ex.summary())" in source, number
        n_exercises = len(ex.exercises_of(number))
        cells = re.findall(r'# %% tags=\["exercise", "hide-input"\]\n(.*?)(?=\n# %%)', source, re.S)
        assert len(cells) == n_exercises, (number, len(cells), n_exercises)
        for cell in cells:
            assert "BEGIN SOLUTION" in cell and "NotImplementedError" in cell, cell[:200]


def test_student_copies_hold_stubs_not_solutions(tmp_path):
    written = copy_student(tmp_path, only=[p.stem[:2] for p in MASTERS])
    assert len(written) == 2 * len(MASTERS)
    for path in written:
        text = path.read_text()
        assert "BEGIN SOLUTION" not in text and "END PROMPT" not in text, path.name
    for nb_path in (p for p in written if p.suffix == ".ipynb"):
        nb = nbformat.read(nb_path, as_version=4)
        master = nbformat.read(REPO / "notebooks" / nb_path.name, as_version=4)
        assert len(nb.cells) == len(master.cells)
        exercise_cells = [c for c in nb.cells if "exercise" in c.metadata.get("tags", [])]
        assert exercise_cells and all("raise NotImplementedError" in c.source for c in exercise_cells)
        assert all(c.outputs == [] for c in nb.cells if c.cell_type == "code")


def test_student_copy_refuses_files_in_the_way_as_the_plain_copy_does(tmp_path):
    from workbench.errors import NotebookCopyError

    folder = tmp_path / "class"
    written = copy_student(folder, only=["02"], directory=REPO / "notebooks")
    mine = next(p for p in written if p.suffix == ".py")
    mine.write_text("# my answers\n")
    with pytest.raises(NotebookCopyError, match=r"already holds 02_.*nothing was copied.*--force"):
        copy_student(folder, only=["02", "03"], directory=REPO / "notebooks")
    assert mine.read_text() == "# my answers\n" and not list(folder.glob("03_*"))  # all or nothing
    copy_student(folder, only=["02"], force=True, directory=REPO / "notebooks")
    assert "raise NotImplementedError" in mine.read_text() and "BEGIN SOLUTION" not in mine.read_text()


def test_cli_copy_student_writes_stubs(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "workbench", "notebooks", "copy", "--student", str(tmp_path / "class"),
                           "--only", "05"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = next((tmp_path / "class").glob("05_*.py")).read_text()
    assert "BEGIN SOLUTION" not in text and text.count("raise NotImplementedError") == len(ex.exercises_of("05"))
    again = subprocess.run([sys.executable, "-m", "workbench", "notebooks", "copy", "--student", str(tmp_path / "class"),
                            "--only", "05"], capture_output=True, text=True, timeout=120)
    assert again.returncode != 0 and "--force" in again.stderr  # the student's work is never overwritten silently


# -- (a) the masters pass every check; (b) the student copies run to the end -------------------------------------
@pytest.mark.notebook
@pytest.mark.parametrize("path", MASTERS, ids=lambda p: p.stem)
def test_master_passes_every_check_in_smoke(path, smoke_runs):
    result = smoke_runs(path)
    assert result["status"] == "ok", result.get("error")
    rows = result["metrics"]["exercises"]
    assert [r["exercise"] for r in rows] == [e.id for e in ex.exercises_of(path.stem[:2])]
    assert all(r["status"] == ex.PASSED for r in rows), [r for r in rows if r["status"] != ex.PASSED]
    if any(p.id.startswith(f"{path.stem[:2]}.") for p in ex.PREDICTIONS.values()):
        assert result["metrics"]["predictions"], "no predict-then-run prompt was compared"


@pytest.fixture(scope="session")
def student_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("student")
    copy_student(folder, only=[p.stem[:2] for p in MASTERS])
    return folder


@pytest.mark.notebook
@pytest.mark.slow
@pytest.mark.parametrize("path", MASTERS, ids=lambda p: p.stem)
def test_student_copy_runs_to_the_end_not_attempted(path, student_dir, tmp_path):
    result = run_notebook(student_dir / path.name, tmp_path, smoke=True, threads=1, timeout=300, html_report=False)
    assert result["status"] == "ok", result.get("error")
    rows = result["metrics"]["exercises"]
    assert [r["exercise"] for r in rows] == [e.id for e in ex.exercises_of(path.stem[:2])]
    assert all(r["status"] == ex.NOT_ATTEMPTED for r in rows), rows


@pytest.mark.notebook
def test_book_collapses_each_solution_and_shows_its_check(smoke_runs, tmp_path):
    from workbench.tools.book.build import build_book

    path = next(p for p in MASTERS if p.stem.startswith("02"))
    assert smoke_runs(path)["status"] == "ok"
    build_book(out=tmp_path / "site", from_reports=smoke_runs.out, only=["02"])
    page = (tmp_path / "site" / f"{path.stem}.html").read_text(encoding="utf-8")
    assert "BEGIN SOLUTION" not in page and "BEGIN PROMPT" not in page
    for e in ex.exercises_of("02"):
        name = e.id.split(".", 1)[1]
        cell = page[page.index(f'id="exercise-{e.id.replace(".", "-").replace("_", "-")}'):]
        details = cell[cell.index("<details"):cell.index("</details>")]  # collapsed: <details> without "open"
        assert "Show the solution" in details and " open" not in details[:80]
        assert re.search(rf"def.*{name}", re.sub(r"<[^>]+>", "", details))  # the solution's code inside
        after = cell[cell.index("</details>"):]
        assert f"exercise {e.id}: passed" in after  # the check's report, not collapsed


# -- (d) grading a folder with one wrong exercise -----------------------------------------------------------------
WRONG_WEIGHTS = '''def attention_weights(q, k, mask=None):
    scores = q @ k.transpose(-2, -1)   # the scale is missing
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return weights'''


@pytest.mark.notebook
def test_grade_reports_exactly_the_wrong_exercise(tmp_path):
    folder = tmp_path / "class"
    copy_student(folder, only=["02"])
    path = next(folder.glob("02_*.ipynb"))
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if c.source.startswith("def attention_weights("))
    cell.source = WRONG_WEIGHTS
    nbformat.write(nb, path)
    proc = subprocess.run([sys.executable, "-m", "workbench", "notebooks", "grade", str(folder), "--smoke", "--json",
                           "--jobs", "1"], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    rows = json.loads(proc.stdout)
    failed = [r for r in rows if r["status"] == "failed"]
    assert [r["exercise"] for r in failed] == ["02.attention_weights"], rows
    assert failed[0]["mistake"] == "forgot to divide by sqrt(d_k)"
    assert {r["exercise"]: r["status"] for r in rows}["02.attention"] == "not attempted"
