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
