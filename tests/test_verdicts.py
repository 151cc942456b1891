"""Notebook 12's verdicts as a package function: a trend against a claim, with a noise yardstick."""

from __future__ import annotations

import pytest

from workbench.errors import ConfigError
from workbench.lessons.verdicts import judge_claims, verdict


@pytest.mark.parametrize("delta, direction, margin, expected", [
    (0.3, +1, 0.1, "agrees"), (-0.3, +1, 0.1, "opposite"), (0.05, +1, 0.1, "within noise"),
    (0.1, +1, 0.1, "within noise"),  # exactly the yardstick is not beyond it
    (-0.3, -1, 0.1, "agrees"), (0.3, -1, 0.1, "opposite"), (-0.1, -1, 0.1, "within noise"),
    (0.1, 0, 0.1, "agrees"), (-0.05, 0, 0.1, "agrees"), (0.2, 0, 0.1, "differs"), (-0.2, 0, 0.1, "differs"),
    (0.0, +1, 0.0, "within noise"), (0.01, +1, 0.0, "agrees"),
])
def test_verdict(delta, direction, margin, expected):
    assert verdict(delta, direction, margin) == expected


def test_bad_direction_or_margin_is_refused():
    with pytest.raises(ConfigError, match="direction=2"):
        verdict(0.1, 2, 0.1)
    with pytest.raises(ConfigError, match="margin=-0.1"):
        verdict(0.1, 1, -0.1)


def test_judge_claims_measures_against_the_base_with_the_two_base_runs_as_yardstick():
    values = {"base": 1.00, "again": 1.04, "one head": 1.20, "no smoothing": 0.98, "learned": 1.10}
    claims = {"one head is worse": ("one head", +1), "smoothing raises it": ("no smoothing", -1),
              "positions the same": ("learned", 0)}
    judged, margin = judge_claims(values, claims, "base", "again")
    assert margin == pytest.approx(0.04)
    assert judged["one head is worse"] == {"variant": "one head", "delta": pytest.approx(0.2), "verdict": "agrees"}
    assert judged["smoothing raises it"]["verdict"] == "within noise"  # -0.02 is inside 0.04
    assert judged["positions the same"]["verdict"] == "differs"
    with pytest.raises(ConfigError, match="no measured value for runs \\['deeper'\\]"):
        judge_claims(values, {"x": ("deeper", +1)}, "base", "again")
