"""One provenance record for every result: same keys everywhere, untracked files count as changes, and the bench
scripts use it (and no private name of the package)."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest
import torch

from workbench.tools.provenance import MATMUL_FLAGS, git_state, hardware_line, provenance

REPO = Path(__file__).resolve().parents[1]
KEYS = {"machine", "cpu_model", "cpu_flags", "cpu_count", "threads", "python", "torch", "device", "commit", "dirty",
        "command", "started_utc"}


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                   capture_output=True)


def test_record_has_one_set_of_keys_and_says_what_ran():
    record = provenance(["python", "bench/x.py", "--flag"])
    assert set(record) == KEYS
    assert record["command"] == ["python", "bench/x.py", "--flag"]
    assert record["threads"] == torch.get_num_threads() and record["torch"] == torch.__version__
    assert record["device"] == "cpu"
    assert set(record["cpu_flags"]) <= set(MATMUL_FLAGS) and record["cpu_flags"] == sorted(record["cpu_flags"])
    line = hardware_line(record)
    assert f"{record['threads']} threads" in line and record["torch"] in line


def test_untracked_files_make_the_checkout_dirty_ignored_ones_do_not(tmp_path):
    if subprocess.run(["git", "--version"], capture_output=True).returncode != 0:
        pytest.fail("git is needed to test the provenance record")
    _git(tmp_path, "init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / ".gitignore").write_text("runs/\n")
    _git(tmp_path, "add", "a.py", ".gitignore")
    _git(tmp_path, "commit", "-q", "-m", "one")
    state = git_state(tmp_path)
    assert len(state["commit"]) == 40 and state["dirty"] is False
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "out.json").write_text("{}")
    assert git_state(tmp_path)["dirty"] is False  # ignored output is not a change of the code
    (tmp_path / "new_module.py").write_text("y = 2\n")
    assert git_state(tmp_path)["dirty"] is True  # a new, uncommitted file is
    assert git_state(tmp_path / "runs")["commit"] == state["commit"]


def test_outside_a_checkout_commit_and_dirty_are_unknown(tmp_path):
    assert git_state(tmp_path) == {"commit": None, "dirty": None}


def _bench_scripts() -> list[Path]:
    return sorted((REPO / "bench").glob("*.py"))


@pytest.mark.parametrize("script", _bench_scripts(), ids=lambda p: p.name)
def test_bench_scripts_import_no_private_name_of_the_package(script):
    tree = ast.parse(script.read_text(encoding="utf-8"))
    private = [f"{node.module}.{alias.name}" for node in ast.walk(tree)
               if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("workbench")
               for alias in node.names if alias.name.startswith("_")]
    assert not private, f"{script.name} imports private names {private}: make them public or use another function"


@pytest.mark.parametrize("script", [p for p in _bench_scripts() if "json" in p.read_text(encoding="utf-8")
                                    and p.name not in ("readme_table.py", "core.py")], ids=lambda p: p.name)
def test_bench_scripts_that_write_results_record_the_one_provenance(script):
    """Every script that writes a result records :func:`provenance` (``core.py`` runs ``workbench bench``, which does;
    ``readme_table.py`` only reads results)."""
    text = script.read_text(encoding="utf-8")
    assert "provenance(" in text, f"{script.name} writes a result without workbench.tools.provenance's record"
    assert "git_state(" not in text and "platform." not in text, f"{script.name} assembles its own record"


def test_the_report_writer_refuses_a_report_without_the_record_and_writes_whole_files(tmp_path):
    """Every benchmark writes through one function: a report that lacks the provenance record (here the CPU model)
    is refused and nothing is written; a complete one is written whole, with a final newline, and reads back."""
    import json

    import pytest

    from workbench.tools.provenance import provenance, write_report

    record = provenance(["python", "bench/x.py"])
    path = tmp_path / "sub" / "report.json"
    incomplete = {k: v for k, v in record.items() if k != "cpu_model"}
    with pytest.raises(ValueError, match="cpu_model"):
        write_report({**incomplete, "figure": 1.5}, path)
    assert not path.exists()
    text = write_report({**record, "figure": np_float(2.5)}, path)
    assert path.read_text() == text and text.endswith("}\n")
    assert json.loads(text)["figure"] == 2.5 and json.loads(text)["commit"] == record["commit"]
    assert [p.name for p in path.parent.iterdir()] == ["report.json"]  # no temporary left beside it


def np_float(x: float):
    import numpy as np

    return np.float32(x)
