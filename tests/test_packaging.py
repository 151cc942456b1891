"""The package runs without the source tree: build the wheel, install it in a fresh virtual environment and run a
notebook from an empty folder with nothing but the installed package.

The virtual environment sees the system's packages (``--system-site-packages``: torch, papermill... are not
installed again) and gets the wheel with ``--no-deps``; the test checks that it imports the wheel's ``workbench``,
not a checkout's (an editable install of this repository may sit in the system's site-packages).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import require, require_module  # tests/conftest.py
from test_notebooks import DERIVED, EXPECTED  # what notebook 02's metrics must show (tests/test_notebooks.py)

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = "02_scaled_dot_product_attention"  # the cheapest SMOKE notebook with metrics checked in test_notebooks
BUILD_INPUTS = ("pyproject.toml", "README.md", "LICENSE", "workbench", "notebooks")
JUNK = ("__pycache__", ".ipynb_checkpoints")


def _can_build_wheels() -> bool:
    """setuptools builds wheels itself from 70.1 on; before that it needs the ``wheel`` package. (Read from the
    metadata: importing setuptools here would clash with the distutils that other tests' imports loaded.)"""
    try:
        version = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        return False
    major, minor = (int(x) for x in version.split(".")[:2])
    return (major, minor) >= (70, 1) or importlib.util.find_spec("wheel") is not None


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def _expected_files(src: Path) -> set[str]:
    """What the wheel must hold: every file of the package folder, and the notebook pairs as notebook_files/."""
    files = {p.relative_to(src).as_posix() for p in (src / "workbench").rglob("*")
             if p.is_file() and not any(part in JUNK for part in p.parts) and p.suffix != ".pyc"}
    files |= {f"workbench/notebook_files/{p.name}" for p in (src / "notebooks").glob("[0-9][0-9]_*")
              if p.suffix in (".ipynb", ".py")}
    return files


@pytest.mark.slow
def test_wheel_runs_a_notebook_without_the_source_tree(tmp_path):
    require_module("pip", "install pip for this Python")
    require_module("venv", "install the venv module (Debian: apt-get install python3-venv)")
    require(_can_build_wheels(), "a setuptools that builds wheels (>= 70.1, or the wheel package)",
            "pip install 'setuptools>=70.1' (the dev extra lists it)")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "WORKBENCH_NOTEBOOKS")}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")

    # 1. the wheel, built from a copy of the build inputs (an in-tree build would leave build/ in the checkout)
    src = tmp_path / "src"
    for name in BUILD_INPUTS:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, src / name, ignore=shutil.ignore_patterns(*JUNK, "*.pyc"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(source, src / name)
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(dist), str(src)],
         tmp_path, env, 600)
    (wheel,) = dist.glob("attention_workbench-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        inside = {n for n in zf.namelist() if n.startswith("workbench/")}
    missing = sorted(_expected_files(src) - inside)
    assert not missing, f"the wheel lacks {missing}: list their folder in pyproject.toml [tool.setuptools]"

    # 2. a fresh virtual environment that sees the system's packages, with the wheel and nothing else installed
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], tmp_path, env, 300)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        tmp_path, env, 60).stdout.strip())
    if sys.prefix != sys.base_prefix:  # tests run in a virtual environment: its packages are "the system's"
        import site

        (purelib / "_outer_environment.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    # Jupyter's data files (nbconvert's HTML templates, kernelspecs) of the packages seen from the system: a
    # virtual environment only searches its own share/jupyter
    from jupyter_core.paths import jupyter_path

    env["JUPYTER_PATH"] = os.pathsep.join(jupyter_path())
    _run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", str(wheel)], tmp_path, env, 600)

    # 3. from an empty folder: the wheel's workbench is imported, and it finds its own notebooks
    work = tmp_path / "empty"
    work.mkdir()
    probe = ("import json, workbench, workbench.tools.book.notebooks as n; "
             "print(json.dumps({'file': workbench.__file__, 'notebooks': str(n.notebooks_dir()), "
             "'names': [p.name for p in n.list_notebooks()]}))")
    seen = json.loads(_run([str(python), "-c", probe], work, env, 120).stdout.strip().splitlines()[-1])
    assert Path(seen["file"]).resolve() == (purelib / "workbench" / "__init__.py").resolve(), seen["file"]
    assert Path(seen["notebooks"]).resolve() == (purelib / "workbench" / "notebook_files").resolve()
    assert seen["names"] == sorted(p.name for p in (REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))

    # the one-liner: the shipped translator loads from the wheel, hash-verified, with no network and no
    # Multi30k folder (the card carries the scores)
    env_offline = {k: v for k, v in env.items() if k != "WORKBENCH_MULTI30K"}
    one_liner = "import workbench as wb; m, t, c = wb.pretrained('small-de-en'); print(json.dumps([c['bleu'], m.training]))"
    bleu, training = json.loads(_run([str(python), "-c", "import json; " + one_liner], work, env_offline,
                                     120).stdout.strip().splitlines()[-1])
    card = json.loads((REPO / "workbench" / "pretrained" / "small-de-en" / "card.json").read_text())
    assert bleu == card["bleu"] and training is False

    # 4. `workbench notebooks run` on SMOKE parameters, then `notebooks copy` of editable copies
    _run([str(python), "-m", "workbench", "notebooks", "run", "--only", NOTEBOOK[:2], "--smoke", "--out", "reports"],
         work, env, 900)
    report = work / "reports" / NOTEBOOK
    metrics = json.loads((report / "metrics.json").read_text())
    for key, check in EXPECTED[NOTEBOOK]:
        assert check(metrics[key]), f"{key} = {metrics[key]!r}"
    for what, check in DERIVED[NOTEBOOK]:
        assert check(metrics), f"{what} fails with {metrics}"
    executed = json.loads((report / f"{NOTEBOOK}.ipynb").read_text())
    ran = Path(executed["metadata"]["papermill"]["input_path"]).resolve()
    assert ran == (purelib / "workbench" / "notebook_files" / f"{NOTEBOOK}.ipynb").resolve()  # the shipped copy

    _run([str(python), "-m", "workbench", "notebooks", "copy", "mine", "--only", NOTEBOOK[:2]], work, env, 120)
    assert sorted(p.name for p in (work / "mine").iterdir()) == [f"{NOTEBOOK}.ipynb", f"{NOTEBOOK}.py"]
    assert (work / "mine" / f"{NOTEBOOK}.py").read_bytes() == (REPO / "notebooks" / f"{NOTEBOOK}.py").read_bytes()
