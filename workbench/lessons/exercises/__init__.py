"""Exercises of the lessons: the student writes a function, :func:`check` runs it against the package's own on
fixed, edge-case and randomly drawn inputs, tests the properties a right answer has (values, the caller's inputs
unchanged, gradients, the objects it fills, its own work) and names the mistake when it recognises one (each
exercise carries a catalogue of planted mistakes); :func:`predict` compares a written prediction with the
measurement by the rule registered in :data:`PREDICTIONS`.

In a notebook::

    from workbench.lessons import exercises as ex
    result = ex.check("02.attention_weights", attention_weights)   # never raises
    attention_weights = result.function                            # the package's unless yours passed
    result

For marks, a grader keeps the two halves of a check apart: :func:`observe` runs the student's function (in a
sandboxed process) and records plain data; :func:`judge` decides in a process the student's code never ran in.
After a failed exercise, later exercises of the same notebook run with the package's function under its name
(``get(id).reference``), as the lessons do.

One module per notebook (``nb01`` ... ``nb18``) registers that notebook's exercises in
:data:`EXERCISES` and its predictions in :data:`PREDICTIONS`; ``predictions_08_17`` holds the later lessons' prompts.
Ids from before the lessons were renumbered are accepted for one release, with a warning (:mod:`.renumbered`).
"""

from __future__ import annotations

from workbench.lessons.exercises import (  # noqa: F401  (registers)
    nb01,
    nb02,
    nb03,
    nb04,
    nb05,
    nb06,
    nb07,
    nb08,
    nb09,
    nb10,
    nb11,
    nb12,
    nb13,
    nb14,
    nb15,
    nb16,
    nb17,
    nb18,
    predictions_08_17,
)
from workbench.lessons.exercises.core import (
    EXERCISES,
    FAILED,
    N_DRAWS,
    NOT_ATTEMPTED,
    PASSED,
    RESULTS,
    TIME_LIMIT,
    Case,
    CheckResult,
    Exercise,
    Invariant,
    Mistake,
    PackageAnswerCalled,
    Property,
    check,
    exercises_of,
    get,
    judge,
    observe,
    recognised,
    variants,
)
from workbench.lessons.exercises.predictions import (
    PREDICTIONS,
    Prediction,
    PredictionResult,
    grade_prediction,
    predict,
    register_prediction,
    summary,
)

__all__ = ["EXERCISES", "FAILED", "N_DRAWS", "NOT_ATTEMPTED", "PASSED", "PREDICTIONS", "RESULTS", "TIME_LIMIT", "Case",
           "CheckResult", "Exercise", "Invariant", "Mistake", "PackageAnswerCalled", "Prediction", "PredictionResult",
           "Property", "check", "exercises_of", "get", "grade_prediction", "judge", "observe", "predict", "recognised",
           "register_prediction", "summary", "variants"]
