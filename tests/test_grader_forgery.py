"""A submission cannot forge its observations: the grader's worker observes each exercise in a child process where
the package's answer to that exercise is unavailable from before the student's code runs, so patching the recorder
(observe, plain) at definition time or from inside a function finds no answer to forge from."""

from __future__ import annotations

import io
import json
import os
import textwrap

import pytest
import torch

from workbench.lessons import exercises as ex
from workbench.tools.grading.worker import read_frames, run_checks

HONEST_TO_HEADS = """
def to_heads(x, n_heads):
    B, T, D = x.shape
    return x.view(B, T, n_heads, D // n_heads).transpose(1, 2)
"""
UNSOLVED_MERGE = """
def merge_heads(z):
    raise ValueError("not done")
"""

# each forges the observation of the next exercise (merge_heads) from the package's own answer
FORGE_OBSERVE_FROM_A_CALL = """
def to_heads(x, n_heads):
    import workbench.lessons.exercises as E
    if not getattr(E.observe, "forged", False):
        real = E.observe
        def forged(eid, fn, **kw):
            kw.pop("own_work", None)
            return real(eid, E.get(eid).reference, own_work=False, **kw)
        forged.forged = True
        E.observe = forged
    B, T, D = x.shape
    return x.view(B, T, n_heads, D // n_heads).transpose(1, 2)
"""
FORGE_OBSERVE_AT_DEFINITION = """
class Helper:
    import workbench.lessons.exercises as E
    _real = E.observe
    def _forged(eid, fn, _real=_real, E=E, **kw):
        kw.pop("own_work", None)
        return _real(eid, E.get(eid).reference, own_work=False, **kw)
    E.observe = _forged
"""
FORGE_PLAIN = """
def to_heads(x, n_heads):
    import workbench.lessons.exercises.core as C
    import torch
    if not getattr(C.plain, "forged", False):
        real = C.plain
        def forged(value):
            if isinstance(value, torch.Tensor) and value.dim() == 3:  # merge_heads' output: swap in the answer
                pass
            return real(value)
        forged.forged = True
        C.plain = forged
        real_run = C._run
        def run(exercise, fn, args):
            try:
                return real_run(exercise, fn, args)
            except Exception:
                return real_run(exercise, C.get(exercise.id).reference, args)
        C._run = run
    B, T, D = x.shape
    return x.view(B, T, n_heads, D // n_heads).transpose(1, 2)
"""


# a child observing to_heads can reach merge_heads' answer: it writes that exercise's observation itself (for every
# file name the worker might use), and the child observing merge_heads leaves at once, at definition time
FORGE_ANOTHER_EXERCISE = """
import os as _os
import pathlib as _pl

def to_heads(x, n_heads):
    import torch
    import workbench.lessons.exercises as E
    if not _pl.Path("forged.flag").exists():
        _pl.Path("forged.flag").write_text("1")
        forged = E.observe("03.merge_heads", E.get("03.merge_heads").reference, own_work=False)
        for name in ("obs-1.pt", "child-1.pt"):
            torch.save(forged, name)
    B, T, D = x.shape
    return x.view(B, T, n_heads, D // n_heads).transpose(1, 2)

class _Leave:
    if _pl.Path("forged.flag").exists() and _pl.Path("obs-1.pt").exists():
        _os._exit(0)
"""


def _grade(tmp_path, *cells: str) -> dict[str, str]:
    job = {"mode": "checks", "seed": 0, "time_limit": 10.0, "exercises": ["03.split_heads", "03.merge_heads"],
           "statements": [{"where": f"cell {i}", "code": textwrap.dedent(c)} for i, c in enumerate(cells)]}
    channel = tmp_path.parent / f"{tmp_path.name}.channel"  # outside the job's folder, as the grader's pipe is
    job["channel_fd"] = os.open(channel, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    (tmp_path / "job.json").write_text(json.dumps(job))
    cwd = os.getcwd()
    os.chdir(tmp_path)  # the sandbox runs the worker in the job's folder
    try:
        run_checks(job, tmp_path)
    finally:
        os.chdir(cwd)
        os.close(job["channel_fd"])
    frames, problem = read_frames(channel.read_bytes(), 64 * 2**20)
    assert problem is None
    out = {}
    for k, exercise_id in enumerate(job["exercises"]):
        if k not in frames:
            out[exercise_id] = "missing"
            continue
        observation = torch.load(io.BytesIO(frames[k]), weights_only=True)
        out[exercise_id] = ex.judge(exercise_id, observation, seed=0, n_draws=ex.N_DRAWS).status  # as the grader does
    return out


def test_an_honest_submission_is_graded_as_before(tmp_path):
    solved_merge = "def merge_heads(z):\n    B, H, T, d = z.shape\n    return z.transpose(1, 2).reshape(B, T, H * d)\n"
    assert _grade(tmp_path, HONEST_TO_HEADS, solved_merge) == {"03.split_heads": "passed", "03.merge_heads": "passed"}


@pytest.mark.parametrize("forgery", [FORGE_OBSERVE_FROM_A_CALL, FORGE_OBSERVE_AT_DEFINITION, FORGE_PLAIN,
                                     FORGE_ANOTHER_EXERCISE],
                         ids=["observe patched by a call", "observe patched at definition", "recorder internals",
                              "another exercise's file"])
def test_a_forged_observation_does_not_pass(tmp_path, forgery):
    cells = [forgery, UNSOLVED_MERGE] if "def to_heads" in forgery else [forgery, HONEST_TO_HEADS, UNSOLVED_MERGE]
    grades = _grade(tmp_path, *cells)
    assert grades["03.merge_heads"] != "passed", grades
