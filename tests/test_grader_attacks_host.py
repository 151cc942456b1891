"""Attacks on the grading machine itself from a second outside probe, each graded end to end in the sandbox
(checks-only mode): a student's notebook must not read the grader's files or environment, hang or abort the class's
grading, fill the disk the others are graded on, leave files behind, run formulas in the instructor's spreadsheet,
use more memory than its limit across many processes, or read the master notebooks' solutions.

Each attack worked before: the grader read the run's output back by its name (a link to a root-only file, or a named
pipe), ``shutil.rmtree`` stopped on a folder tree 5,000 deep, the run's folder shared the grader's disk, /run/lock
was writable, a student folder named ``=HYPERLINK(...)`` went into the CSV as it was, the memory limit held per
process only, and the masters were readable in the sandbox.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys

import pytest
from conftest import require
from test_grader import hints, require_sandbox, solutions, statuses, student

from workbench.tools.grading import grader, sandbox
from workbench.tools.grading.gradebook import spreadsheet_safe, write_gradebook

SECRET = "INSTRUCTOR-SECRET-7f3a"
def _swap(make: str, then: str = "") -> str:
    """Student code that replaces every file the grader once read by name with ``make`` (a statement on ``_name``),
    then runs ``then``."""
    return ("import os\nclass _Swap:\n    for _name in ('/tmp/.output', '/tmp/exec.json'):\n        try:\n"
            "            os.remove(_name)\n        except OSError:\n            pass\n"
            f"        {make}\n{then}")


# makes the worker crash on a child file it cannot open (a link into a folder of mode 0)
CRASH = """    os.makedirs("/tmp/locked", exist_ok=True)
    os.chmod("/tmp/locked", 0)
    for _k in range(4):
        try:
            os.symlink("/tmp/locked/x", f"/tmp/child-{_k}.pt")
        except OSError:
            pass
"""
FIFO = _swap("os.mkfifo(_name)")
DEEP = """
import os
class _Deep:
    _here = os.getcwd()
    for _ in range(5000):
        os.mkdir("d")
        os.chdir("d")
    os.chdir(_here)
"""
# fills its folder (a tmpfs of the class's disk limit), then tries every world-writable folder it can see; a success
# shows as a passing padding_mask (the grade it cannot otherwise get), a file left behind as a passing causal_mask
FILL = """
import os
class _Fill:
    _wrote = 0
    try:
        with open("/tmp/filler", "wb") as _f:
            for _ in range(64):
                _f.write(b"x" * 2**20)
                _wrote += 1
    except OSError:
        pass
    os.remove("/tmp/filler")
    if _wrote == 64:
        globals()["padding_mask"] = lambda tokens, pad_id: tokens != pad_id
    for _folder in {folders!r}:
        try:
            with open(os.path.join(_folder, "left-behind-by-a-student"), "wb") as _f:
                _f.write(b"x")
            globals()["causal_mask"] = lambda T: __import__("torch").ones(T, T, dtype=__import__("torch").bool).tril()
        except OSError:
            pass
"""
MASTERS = """
import glob
class _Read:
    _found = []
    for _pattern in {patterns!r}:
        for _path in glob.glob(_pattern):
            try:
                _found.append(open(_path).read())
            except OSError:
                pass
    if any("BEGIN SOLUTION" in _text for _text in _found):  # read: the grade shows it
        globals()["padding_mask"] = lambda tokens, pad_id: tokens != pad_id
"""


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    require_sandbox()
    root = tmp_path_factory.mktemp("host-attacks")
    secret = root / "secret.txt"
    secret.write_text(f"{SECRET}\n")
    secret.chmod(0o600)
    cls = root / "class"
    right = solutions()
    student(cls / "a-honest", right)
    student(cls / "leak", extra=_swap(f"os.symlink({str(secret)!r}, _name)", CRASH))  # a link to a root-only file
    student(cls / "fifo", extra=FIFO)
    student(cls / "deep", extra=DEEP)
    student(cls / "fill", extra=FILL.format(folders=[str(p) for p in sandbox.world_writable()]))
    masters = [str(p / "*.ipynb") for p in grader._master_folders()] + [str(p / "*.py") for p in grader._master_folders()]
    student(cls / "masters", extra=MASTERS.format(patterns=masters))
    student(cls / "=HYPERLINK(\"http:evil\",\"grade\")", right)
    student(cls / "z-honest", right)
    limits = sandbox.Limits(disk_bytes=48 * 2**20)  # the filler's own folder fills at 48 MB
    opts = grader.GradeOptions(timeout=150, time_limit=5, limits=limits)
    done: dict = {}

    def grade() -> None:
        done["book"] = grader.grade_class(cls, opts)

    import threading

    thread = threading.Thread(target=grade, daemon=True)
    thread.start()
    thread.join(timeout=900)  # a named pipe read by the grader hung it for ever
    assert not thread.is_alive(), "the class's grading did not finish"
    book = done["book"]
    return book, write_gradebook(book, root / "gradebook"), root


def test_the_grader_never_reads_a_file_a_run_swapped_for_a_link(graded):
    book, paths, _ = graded
    for path in paths.values():
        assert SECRET not in path.read_text(encoding="utf-8")
    assert SECRET not in str(book)


def test_named_pipes_and_deep_trees_cost_only_their_own_grade(graded):
    book, _, _ = graded
    for who in ("a-honest", "z-honest"):
        assert set(statuses(book, who).values()) == {"passed"}, hints(book, who)
    for who in ("fifo", "deep", "leak"):
        assert "passed" not in statuses(book, who).values(), hints(book, who)


def test_a_run_fills_only_its_own_folder_and_leaves_nothing_behind(graded):
    book, _, _ = graded
    got = statuses(book, "fill")
    if sandbox.probe().own_disk:  # 64 MB did not fit in its 48 MB folder
        assert got["05.padding_mask"] != "passed", hints(book, "fill")
    assert got["05.causal_mask"] != "passed", "a world-writable folder took a file"
    for folder in sandbox.world_writable():
        assert not (folder / "left-behind-by-a-student").exists(), folder


def test_the_masters_are_hidden_from_a_students_code(graded):
    book, _, _ = graded
    assert statuses(book, "masters")["05.padding_mask"] == "not attempted", hints(book, "masters")


def test_a_student_folder_named_as_a_formula_is_text_in_the_spreadsheet(graded):
    book, paths, _ = graded
    for kind in ("items", "totals"):
        with open(paths[kind], newline="", encoding="utf-8") as f:
            students = {row["student"] for row in csv.DictReader(f)}
        assert "'=HYPERLINK(\"http:evil\",\"grade\")" in students
        assert not any(s.startswith(("=", "+", "-", "@")) for s in students)
    assert spreadsheet_safe("-2+3") == "'-2+3" and spreadsheet_safe("alice") == "alice" and spreadsheet_safe(-0.5) == -0.5


def test_the_memory_limit_holds_for_a_runs_processes_together(tmp_path):
    """Four processes of 700 MB each under a 1.5 GB limit: per process (RLIMIT_AS) each fits, together they do not."""
    require_sandbox()
    require(sandbox.probe().cgroup, "a cgroup the grader can make (root, with cgroup v2 or v1's memory controller)",
            "run the tests as root on Linux, as CI does (without one the limit holds per process, and the gradebook "
            "says so)")
    program = ("import os, sys\nkids = []\nfor _ in range(4):\n    pid = os.fork()\n    if pid == 0:\n"
               "        block = b'x' * (700 * 2**20)\n        os.read(0, 1) if False else __import__('time').sleep(3)\n"
               "        os._exit(0)\n    kids.append(pid)\n"
               "codes = [os.waitpid(k, 0)[1] for k in kids]\nprint('children', codes)\n")
    work = sandbox.make_run_folder(tmp_path, "mem", sandbox.Limits())
    try:
        limits = sandbox.Limits(memory_bytes=1536 * 2**20, wall_seconds=60)
        result = sandbox.run([sys.executable, "-c", program], work, limits)
    finally:
        sandbox.remove_tree(work)
    assert "children" in result.output or result.killed, result.output
    if "children" in result.output:
        codes = eval(result.output.split("children", 1)[1].strip().splitlines()[0])  # noqa: S307 (our own print)
        assert any(code != 0 for code in codes), f"all four 700 MB processes ran under 1.5 GB: {codes}"
    assert not any(p.name.startswith("workbench-run-") for root in ("/sys/fs/cgroup/memory", "/sys/fs/cgroup")
                   if os.path.isdir(root) for p in sandbox.Path(root).iterdir()), "a run's cgroup was left behind"


def test_remove_tree_removes_a_tree_too_deep_for_rmtree(tmp_path):
    top = tmp_path / "run"
    subprocess.run(["sh", "-c", "mkdir -p run && cd run && i=0; while [ $i -lt 3000 ]; do mkdir d && cd d; "
                    "i=$((i+1)); done"], cwd=tmp_path, check=True)
    sandbox.remove_tree(top)
    assert not top.exists()


def test_a_world_writable_folder_holding_the_runs_own_folder_is_not_hidden(tmp_path, monkeypatch):
    """With TMPDIR on a world-writable folder other than /tmp, hiding that folder would hide the run's own folder
    before it is bound to /tmp (and every run would fail); the others are hidden."""
    shared, other = tmp_path / "scratch", tmp_path / "lock"
    monkeypatch.setattr(sandbox, "world_writable", lambda: (shared, other))
    lines = sandbox._mount_script(shared / "workbench-grade-1" / "run", [], []).splitlines()
    hidden = [line for line in lines if line.startswith("mount -t tmpfs")]
    assert any(str(other) in line for line in hidden) and not any(str(shared) + " " in line + " " for line in hidden)
