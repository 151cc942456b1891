"""While a student's function runs, the package's answer raises however the student's code reaches it: by name, by a
re-export, or by an alias made when the cell ran (a default argument, a closure, a list, the exercise's own
reference); everything works again afterwards."""

from __future__ import annotations

import torch

import workbench.model.masks as M
from workbench.lessons import exercises as ex

REFERENCE_CODE = M.causal_mask.__code__


def _default_argument():
    def causal_mask(T, _real=M.causal_mask):
        return _real(T)

    return causal_mask


def _closure():
    real = M.causal_mask

    def causal_mask(T):
        return real(T)

    return causal_mask


def _list():
    kept = [M.causal_mask]

    def causal_mask(T):
        return kept[0](T)

    return causal_mask


def _captured_reference():
    def causal_mask(T, _real=ex.get("05.causal_mask").reference):
        return _real(T)

    return causal_mask


def test_every_alias_of_the_package_answer_is_caught():
    for make in (_default_argument, _closure, _list, _captured_reference):
        result = ex.check("05.causal_mask", make())
        assert result.status == "failed", make.__name__
        assert "package" in result.message.lower() or "your own" in result.message.lower(), result.message


def test_the_package_works_again_afterwards():
    ex.check("05.causal_mask", _default_argument())
    assert M.causal_mask.__code__ is REFERENCE_CODE
    assert torch.equal(M.causal_mask(3), torch.ones(3, 3, dtype=torch.bool).tril())
    honest = ex.check("05.causal_mask", lambda T: torch.ones(T, T, dtype=torch.bool).tril())
    assert honest.passed, honest.message


def test_the_helpers_the_planted_mistakes_are_written_with_are_unavailable_too():
    """``variants`` plants one parametrised implementation whose default settings are the right answer: calling it
    with the defaults is reusing the answer, so it raises as the package's function does, and works afterwards."""
    from workbench.lessons.exercises import nb04, nb15, nb18
    from workbench.lessons.exercises.calling import _mistake_helpers

    def decision_layer(lens_logits):
        return nb18._wrong(lens_logits)

    def corrected_interval(scores, resamples, m, alpha=0.05):
        return nb15._wrong(scores, resamples, m, alpha)

    def marian_positions(max_len, d_model):
        return nb04._table(max_len, d_model, order="halves")

    for exercise_id, fn, helper in (("18.decision_layer", decision_layer, "nb18._wrong"),
                                    ("15.corrected_interval", corrected_interval, "nb15._wrong"),
                                    ("17.marian_positions", marian_positions, "nb04._table")):
        result = ex.check(exercise_id, fn)
        assert result.status == ex.FAILED and helper in result.message, result.message
    assert nb18._wrong(torch.zeros(2, 1, 1, 3)).tolist() == [[0]]  # restored
    # every exercise built with variants has its helper trapped
    with_variants = [e for e in ex.EXERCISES.values() if any(hasattr(m.fn, "func") for m in e.mistakes)]
    assert len(with_variants) >= 10 and all(_mistake_helpers(e) for e in with_variants)
