"""CI can fail: a failed install stops .ci/run, a missing prerequisite fails its test under CI=true, the README's
test command is what CI runs, and the extras install what the code accepts."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import plotly.graph_objects as go
import pytest
from conftest import REPO, require, require_module
from packaging.requirements import Requirement

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest depends on tomli before Python 3.11
    import tomli as tomllib

CI_SCRIPT = REPO / ".ci" / "run"


# -- the prerequisite helper --------------------------------------------------------------------------------------
def test_require_skips_locally_and_fails_under_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    require(True, "anything", "nothing to do")  # present: the test goes on
    with pytest.raises(pytest.skip.Exception, match="Chromium is missing: apt-get install chromium"):
        require(False, "Chromium", "apt-get install chromium")
    with pytest.raises(pytest.skip.Exception, match="no_such_module_xyz"):
        require_module("no_such_module_xyz", "pip install it")
    for value in ("true", "True", "1"):
        monkeypatch.setenv("CI", value)
        with pytest.raises(pytest.fail.Exception, match="CI=true.*Chromium is missing: apt-get install chromium"):
            require(None, "Chromium", "apt-get install chromium")
        with pytest.raises(pytest.fail.Exception, match="no_such_module_xyz"):
            require_module("no_such_module_xyz", "pip install it")
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception):
        require("", "Chromium", "apt-get install chromium")


SKIP_CALL = re.compile(r"pytest\.(skip\(|importorskip\()|mark\.skip(if)?\b")


def test_no_test_skips_on_its_own():
    """Every skip for a missing prerequisite goes through conftest.require, which fails under CI=true."""
    offenders = []
    for path in sorted((REPO / "tests").glob("*.py")):
        if path.name in ("conftest.py", Path(__file__).name):
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if SKIP_CALL.search(line):
                offenders.append(f"{path.name}:{n}: {line.strip()}")
    assert offenders == [], "use conftest.require(...) instead:\n" + "\n".join(offenders)


# -- .ci/run ------------------------------------------------------------------------------------------------------
def _fake_tools(bin_dir: Path, log: Path, fail_on: str | None) -> None:
    """Stand-ins for every command .ci/run calls: each logs its arguments; python3 fails when its arguments
    contain ``fail_on``."""
    bin_dir.mkdir()
    for name in ("python3", "pip", "chromium", "ruff", "nbstripout", "apt-get"):
        fail = f'case "$*" in *"{fail_on}"*) exit 1;; esac\n' if fail_on and name in ("python3", "pip") else ""
        tool = bin_dir / name
        tool.write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\n{fail}exit 0\n')
        tool.chmod(tool.stat().st_mode | stat.S_IXUSR)


def _run_ci(tmp_path: Path, fail_on: str | None) -> tuple[int, str]:
    """Run a copy of .ci/run in an empty checkout with the fake tools first on PATH."""
    checkout = tmp_path / "checkout"
    (checkout / ".ci").mkdir(parents=True)
    shutil.copy(CI_SCRIPT, checkout / ".ci" / "run")
    log = tmp_path / "calls.log"
    log.write_text("")
    _fake_tools(tmp_path / "bin", log, fail_on)
    env = {"PATH": f"{tmp_path / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin", "HOME": str(tmp_path), "CI": "true"}
    proc = subprocess.run(["bash", str(checkout / ".ci" / "run")], env=env, capture_output=True, text=True,
                          timeout=60)
    return proc.returncode, log.read_text()


def test_ci_script_runs_the_tests_when_everything_installs(tmp_path):
    code, calls = _run_ci(tmp_path, fail_on=None)
    assert code == 0, calls
    assert "-m pytest" in calls and "ruff check" in calls


@pytest.mark.parametrize("failing", ['-e .[dev]', "torch==2.13.0", "-m pytest"])
def test_ci_script_fails_when_a_step_fails(tmp_path, failing):
    code, calls = _run_ci(tmp_path, fail_on=failing)
    assert code != 0, f"{failing!r} failed and .ci/run still passed:\n{calls}"
    assert "ruff check" not in calls  # it stopped there
    if failing != "-m pytest":
        assert "-m pytest" not in calls


def _readme_test_command() -> list[str]:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    m = re.search(r"Run the whole test suite.*?```bash\n(.*?)```", readme, re.S)
    assert m, "README: the 'Run the whole test suite' block is missing"
    return [ln.strip() for ln in m[1].splitlines() if ln.strip()]


def test_ci_runs_the_readme_test_command():
    commands = _readme_test_command()
    assert any("pytest" in c for c in commands) and any("install" in c for c in commands)
    assert not any("&&" in c for c in commands), "one command a line: `a && b` hides a failed install under set -e"
    ci_lines = [ln.strip() for ln in CI_SCRIPT.read_text().splitlines()]
    for command in commands:
        assert command in ci_lines, f".ci/run does not run the README's {command!r} on a line of its own"


# -- extras -------------------------------------------------------------------------------------------------------
def _extra(name: str) -> dict[str, Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return {Requirement(r).name: Requirement(r) for r in project["optional-dependencies"][name]}


def test_export_and_dev_extras_install_the_kaleido_the_code_accepts(monkeypatch, tmp_path):
    from workbench.viz import figures
    from workbench.viz.figures import ImageExportError

    export, dev = _extra("export")["kaleido"], _extra("dev")["kaleido"]
    monkeypatch.setattr(go.Figure, "write_image", lambda self, path, **kw: Path(path).write_bytes(b""))
    fig = figures.attention_heatmap([[1.0]])
    for version in ("0.1.0", "0.2.1", "1.0.0", "1.5.0"):
        monkeypatch.setattr(figures, "_kaleido_version", lambda v=version: v)
        try:
            figures.to_image(fig, tmp_path / "f.png")
            accepted = True
        except ImageExportError:
            accepted = False
        assert export.specifier.contains(version) == accepted, f"export extra vs to_image on kaleido {version}"
        assert dev.specifier.contains(version) == accepted, f"dev extra vs to_image on kaleido {version}"


def test_ci_points_kaleido_at_debians_chromium():
    text = CI_SCRIPT.read_text()
    assert "apt-get install -y -q chromium" in text and "export BROWSER_PATH" in text
