"""Exercises of the by-hand lessons (notebooks 01-08): the student writes a function, :func:`check` runs it against
the package's own on random and edge-case inputs and names the mistake when it recognises one (each exercise
carries a catalogue of planted mistakes), :func:`predict` compares a written prediction with the measurement.

In a notebook::

    from workbench.lessons import exercises as ex
    result = ex.check("02.attention_weights", attention_weights)   # never raises
    attention_weights = result.function                            # the package's unless yours passed
    result

One module per notebook (``nb01`` ... ``nb08``) registers that notebook's exercises in :data:`EXERCISES`.
"""

from __future__ import annotations

from workbench.lessons.exercises import nb01, nb02, nb03, nb04, nb05, nb06, nb07, nb08  # noqa: F401  (registers)
from workbench.lessons.exercises.core import (
    EXERCISES,
    FAILED,
    NOT_ATTEMPTED,
    PASSED,
    RESULTS,
    TIME_LIMIT,
    Case,
    CheckResult,
    Exercise,
    Mistake,
    PredictionResult,
    check,
    exercises_of,
    get,
    predict,
    recognised,
    summary,
    variants,
)

__all__ = ["EXERCISES", "FAILED", "NOT_ATTEMPTED", "PASSED", "RESULTS", "TIME_LIMIT", "Case", "CheckResult", "Exercise",
           "Mistake", "PredictionResult", "check", "exercises_of", "get", "predict", "recognised", "summary",
           "variants"]
