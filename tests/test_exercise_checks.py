"""The checks' machinery: observe/judge kept apart (plain data that crosses processes), per-student seeds, the
package's answer unavailable and restored, feedback beyond the catalogue, and prediction rules that separate the
right answer from the planted wrong ones."""

from __future__ import annotations

import ast
import io
import math
import re
from pathlib import Path

import pytest
import torch

import workbench as wb
from workbench.lessons import exercises as ex
from workbench.lessons.exercises.compare import plain

REPO = Path(__file__).resolve().parents[1]


def _round_trip(observation):
    buffer = io.BytesIO()
    torch.save(observation, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.mark.parametrize("exercise_id", ["02.attention_weights", "05.attend_with_cache", "05.greedy_loop",
                                         "07.average_checkpoints", "09.ngram_matches"])
def test_an_observation_is_plain_data_and_judged_the_same_in_another_process(exercise_id):
    e = ex.get(exercise_id)
    for fn in (e.reference, e.mistakes[0].fn):
        observation = ex.observe(exercise_id, fn, seed=3, own_work=False)
        here = ex.judge(exercise_id, observation)
        there = ex.judge(exercise_id, _round_trip(observation))  # weights_only: no code can come back
        assert (here.status, here.message) == (there.status, there.message)


def test_a_forged_or_foreign_observation_is_not_a_pass():
    observation = ex.observe("05.causal_mask", ex.get("05.causal_mask").reference, own_work=False)
    other = ex.judge("05.padding_mask", observation)
    assert other.status == ex.FAILED and "could not be judged" in other.message
    fewer = dict(observation, cases=observation["cases"][:2])  # "the inputs I was given"
    assert ex.judge("05.causal_mask", fewer).status == ex.FAILED
    assert ex.judge("05.causal_mask", observation, seed=99).status == ex.FAILED  # not the grader's seed
    assert ex.judge("05.causal_mask", {"exercise": "05.causal_mask", "cases": "garbage"}).status == ex.FAILED


def test_seeds_draw_other_inputs_so_answers_cannot_be_copied_as_numbers():
    e = ex.get("02.attention_weights")
    a, b = e.all_cases(seed=1), e.all_cases(seed=2)
    assert [c.name for c in a][: len(e.cases())] == [c.name for c in b][: len(e.cases())]  # the fixed cases
    assert [c.name for c in a] != [c.name for c in b]
    assert [c.name for c in e.all_cases(seed=1)] == [c.name for c in a]  # reproducible
    for exercise in ex.EXERCISES.values():
        assert exercise.draw is not None, f"{exercise.id} draws no random inputs"


def test_the_package_answer_is_unavailable_while_the_student_runs_and_restored_after():
    original = wb.attention_weights

    def sneaky(q, k, mask=None):
        try:
            return wb.attention_weights(q, k, mask)
        except Exception:  # the trap is a BaseException: `except Exception` cannot hide it
            return q

    result = ex.check("02.attention_weights", sneaky)
    assert result.status == ex.FAILED and "workbench.model.attention.attention_weights" in result.message
    assert wb.attention_weights is original and wb.model.attention.attention_weights is original
    assert ex.get("02.attention_weights").reference is not None
    via_exercise = ex.check("02.attention_weights", lambda q, k, mask=None: ex.get("02.attention_weights").reference(q, k, mask))
    assert via_exercise.status == ex.FAILED and "own reference" in via_exercise.message


def test_a_novel_wrong_answer_names_the_broken_invariant_and_shows_both_outputs():
    def renormalised_badly(q, k, mask=None):
        w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1)
        return w if mask is None else (w * mask) * 0.9  # masked, but the rows no longer sum to 1

    result = ex.check("02.attention_weights", renormalised_badly)
    assert result.status == ex.FAILED and result.mistake is None
    assert "breaks 'each row of weights sums to 1" in result.message and "yours " in result.message
    assert "expected " in result.message

    def no_eos(next_logits, bos_id, eos_id, max_len):
        return [int(next_logits([bos_id]).argmax())]

    loop = ex.check("05.greedy_loop", no_eos)
    assert "breaks 'ends with eos within the budget" in loop.message, loop.message


@pytest.mark.parametrize("exercise_id", ["02.attention_weights", "02.attention", "03.multi_head_attention"])
def test_the_mistake_of_lesson_01_is_recognised_where_it_recurs(exercise_id):
    assert any(m.name.startswith("masked after the softmax") for m in ex.get(exercise_id).mistakes)
    name = next(m.name for m in ex.get(exercise_id).mistakes if m.name.startswith("masked after the softmax"))
    assert ex.recognised(exercise_id, name).mistake == name


def test_each_property_is_reported_in_one_line():
    result = ex.check("01.dot_score", lambda s, H: (H * s[:, None, :]).sum(-1))
    names = [p.name for p in result.properties]
    assert result.passed and len(names) == 4
    assert any(n.startswith("values on") for n in names) and "the caller's inputs unchanged" in names
    assert any("gradients" in n for n in names) and any("own work" in n for n in names)
    assert all("\n" not in p.line() for p in result.properties)
    assert len(repr(result).splitlines()) == 1 + len(names)


def test_plain_turns_objects_into_data_and_never_code():
    class Thing:
        def __init__(self):
            self.t = torch.ones(2)

    assert plain(Thing())["t"].tolist() == [1.0, 1.0]
    assert "numpy" in plain(__import__("numpy").zeros(3))["__opaque__"]
    assert plain(lambda: 1)["__opaque__"] == "a function"
    _round_trip(plain({"a": [Thing(), (1, 2.0, "x", None)], "m": torch.nn.Linear(2, 2)}))


# -- predictions -------------------------------------------------------------------------------------------------
def _notebook_parameters(number: str) -> dict:
    text = next((REPO / "notebooks").glob(f"{number}_*.py")).read_text()
    cell = re.search(r'# %% tags=\["parameters"\]\n(.*?)\n# %%', text, re.S).group(1)
    return {node.target.id: ast.literal_eval(node.value) for node in ast.parse(cell).body
            if isinstance(node, ast.AnnAssign)}


@pytest.mark.parametrize("prediction_id", sorted(p.id for p in ex.PREDICTIONS.values() if p.expected is not None))
def test_a_prediction_rule_separates_the_right_answer_from_the_planted_wrong_ones(prediction_id):
    rule = ex.PREDICTIONS[prediction_id]
    right = rule.expected(_notebook_parameters(prediction_id[:2]))
    assert ex.grade_prediction(prediction_id, right, _notebook_parameters(prediction_id[:2])).status == "right"
    for name, value in rule.wrong:
        graded = ex.grade_prediction(prediction_id, value, _notebook_parameters(prediction_id[:2]))
        assert graded.status == "off", (name, value, right)


def test_counts_are_exact_and_the_diagonal_forgotten_is_wrong():
    assert ex.grade_prediction("05.causal_true", 55).status == "right"
    assert ex.grade_prediction("05.causal_true", 45).status == "off"  # 25 % used to pass it
    assert ex.grade_prediction("05.causal_true", 54).status == "off"
    assert ex.grade_prediction("05.causal_true", 55.0).status == "right"
    assert ex.grade_prediction("05.causal_true", "55").status == "off"
    assert ex.grade_prediction("05.causal_true", None).status == "no prediction"
    assert ex.grade_prediction("09.better_decoder", "beam 4").status == "not graded"
    assert ex.predict("05.causal_true", 45, 55, "why").status == "off"


def test_the_peaked_kind_is_a_site_kind_and_an_old_spelling_counts_with_a_warning():
    assert ex.PREDICTIONS["10.peaked_kind"].choices == ("enc.self", "dec.self", "dec.cross")
    assert ex.predict("10.peaked_kind", " Dec.Cross ", "dec.cross", "why").status == "right"
    with pytest.warns(DeprecationWarning, match="'cross' is an old site spelling"):
        assert ex.predict("10.peaked_kind", "cross", "dec.cross", "why").status == "right"
    with pytest.warns(DeprecationWarning, match="'enc_self' is an old site spelling"):
        assert ex.predict("10.peaked_kind", "enc_self", "dec.cross", "why").status == "off"
    assert ex.predict("10.peaked_kind", "resid_enc", "dec.cross", "why").status == "off"  # no attention kind


def test_every_prediction_of_the_notebooks_is_registered_with_its_variable_and_defaults():
    for path in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.py")):
        text = path.read_text()
        for pid, variable in re.findall(r'ex\.predict\("([^"]+)",\s*(\w+)', text):
            assert pid in ex.PREDICTIONS, f"{path.name}: prediction {pid} is not registered"
            assert ex.PREDICTIONS[pid].variable == variable, (pid, variable)
            assert re.search(rf'^{variable}: .*= None', text, re.M), f"{path.name}: no answer cell for {variable}"
    from workbench.lessons.exercises import nb04, nb07

    assert nb04.D_MODEL == _notebook_parameters("04")["D_MODEL"]
    assert nb07.PAPER_WARMUP == _notebook_parameters("07")["PAPER_WARMUP"]


def test_the_integrated_gradients_reference_is_captums_right_riemann_sum():
    """13.integrated_gradients is checked against the lesson's own reference: it must be what Captum computes with
    ``method="riemann_right"`` (Captum needs at least 2 steps), on the exercise's own inputs."""
    from captum.attr import IntegratedGradients

    e = ex.get("13.integrated_gradients")
    for case in e.cases():
        x, baseline, W1, w2, n_steps = case.args
        if n_steps < 2:
            continue

        def f(inputs, W1=W1, w2=w2):
            return torch.tanh(inputs @ W1) @ w2

        ours = e.reference(f, x, baseline, n_steps)
        theirs = IntegratedGradients(f).attribute(x, baselines=baseline, n_steps=n_steps, method="riemann_right")
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5)
        assert not torch.allclose(ours, e.reference(f, x, baseline, n_steps + 5), rtol=1e-4, atol=1e-5)  # steps count


def test_the_patch_hook_reference_patches_as_the_package_does():
    """14.patch_hook's reference, registered on a layer, patches as :func:`workbench.inspect.patching.patch` does a
    site's position: position ``pos`` from the cache, every other position from this run, and the hook removed."""
    e = ex.get("14.patch_hook")
    for case in e.cases():
        x, layer, cached, pos = case.args
        out = e.driver(e.reference, x, layer, cached, pos)
        plain_run = layer(x)
        assert torch.equal(out[:, pos], cached[:, pos].to(out.dtype))
        keep = torch.arange(x.shape[1]) != pos
        assert torch.equal(out[:, keep], plain_run[:, keep])
        assert not layer._forward_hooks  # the driver removes its hook
