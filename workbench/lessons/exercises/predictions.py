"""Predict-then-run prompts: a registered :class:`Prediction` says how a written answer is compared with the
measured value (exact counts, a relative tolerance that rejects the planted wrong answers, or a choice), and
:func:`grade_prediction` grades an answer with trusted code for a grader."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workbench.lessons.exercises.core import RESULTS, CheckResult
from workbench.lessons.exercises.renumbered import current_id


# -- predictions ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Prediction:
    """A predict-then-run prompt: how a written answer is compared with the measured value.

    ``kind`` "count": an exact integer; "number": within ``tolerance`` (relative); "choice": one of ``choices``
    (strings compared without case or surrounding spaces). ``wrong`` lists planted wrong answers ``(name, value)``
    that the rule must reject (a test checks it). ``expected(parameters)`` computes the right answer with trusted
    code from the lesson's parameters (a grader uses it); None when only the lesson's run can tell.
    """

    id: str  # "05.causal_true"
    question: str  # one line
    variable: str  # the notebook's answer variable: "PREDICT_CAUSAL_TRUE"
    kind: str  # "count", "number" or "choice"
    tolerance: float = 0.0  # relative, for "number"
    choices: tuple[Any, ...] = ()  # for "choice"
    wrong: tuple[tuple[str, Any], ...] = ()  # planted wrong answers: (what it forgets, value)
    expected: Callable[[dict[str, Any]], Any] | None = None  # the right answer from the lesson's parameters

    def __post_init__(self) -> None:
        if self.kind not in ("count", "number", "choice"):
            raise ValueError(f"prediction {self.id!r}: kind {self.kind!r} is not one of 'count', 'number', 'choice'")
        if self.kind == "number" and not 0 < self.tolerance < 1:
            raise ValueError(f"prediction {self.id!r}: a 'number' needs a relative tolerance in (0, 1), "
                             f"got {self.tolerance}")
        if self.kind == "choice" and not self.choices:
            raise ValueError(f"prediction {self.id!r}: a 'choice' needs its choices")

    def matches(self, answer: Any, measured: Any) -> bool:
        """Is ``answer`` right against ``measured`` by this prediction's rule?"""
        if self.kind == "choice":
            def norm(x: Any) -> Any:
                return " ".join(str(x).lower().split()) if isinstance(x, str) else x

            return norm(answer) == norm(measured)
        if isinstance(answer, bool) or not isinstance(answer, (int, float)) or isinstance(measured, bool):
            return False
        if self.kind == "count":
            return float(answer).is_integer() and int(answer) == int(round(float(measured)))
        return math.isclose(float(answer), float(measured), rel_tol=self.tolerance, abs_tol=1e-12)


PREDICTIONS: dict[str, Prediction] = {}  # every registered prediction, by id


def register_prediction(prediction: Prediction) -> Prediction:
    """Add ``prediction`` to :data:`PREDICTIONS` (ids are unique)."""
    if prediction.id in PREDICTIONS:
        raise ValueError(f"prediction {prediction.id!r} is registered twice")
    PREDICTIONS[prediction.id] = prediction
    return prediction


@dataclass
class PredictionResult:
    """A written prediction compared with what the lesson measured."""

    prompt: str
    status: str  # "no prediction", "right", "off" or "not graded"
    message: str
    answer: Any = None
    measured: Any = None

    def to_dict(self) -> dict[str, Any]:
        def simple(x: Any) -> Any:
            return x if isinstance(x, (bool, int, float, str)) or x is None else repr(x)

        return {"prediction": self.prompt, "status": self.status, "message": self.message,
                "answer": simple(self.answer), "measured": simple(self.measured)}

    def __repr__(self) -> str:
        mark = {"right": "✔", "off": "✘", "no prediction": "…", "not graded": "·"}[self.status]
        return f"{mark} prediction {self.prompt}: {self.message}"


def _rule(prompt_id: str, measured: Any) -> Prediction:
    """The registered rule of ``prompt_id``, or a strict default for an unregistered one (exact for integers and
    words, 5 % for other numbers)."""
    if prompt_id in PREDICTIONS:
        return PREDICTIONS[prompt_id]
    if isinstance(measured, bool) or not isinstance(measured, (int, float)):
        return Prediction(prompt_id, "", "", "choice", choices=(measured,))
    if isinstance(measured, int):
        return Prediction(prompt_id, "", "", "count")
    return Prediction(prompt_id, "", "", "number", tolerance=0.05)


def _tolerance_text(rule: Prediction) -> str:
    if rule.kind == "number":
        return f" (right within {rule.tolerance:.0%})"
    return " (exactly)" if rule.kind == "count" else ""


def predict(prompt_id: str, answer: Any, measured: Any, explanation: str) -> PredictionResult:
    """Compare the student's ``answer`` (None: nothing written) with ``measured`` by the rule registered for
    ``prompt_id`` (:data:`PREDICTIONS`), and explain. Never raises."""
    prompt_id = current_id(prompt_id, PREDICTIONS)
    try:
        rule = _rule(prompt_id, measured)
        result = _compare(rule, prompt_id, answer, measured, explanation)
    except Exception as exc:  # a strange answer (an object that cannot be compared): one line
        result = PredictionResult(prompt_id, "off", f"your answer {answer!r:.40} could not be compared with the "
                                  f"measurement ({type(exc).__name__}); measured {_show(measured)}. {explanation}",
                                  answer, measured)
    RESULTS[f"predict:{prompt_id}"] = result
    return result


def _compare(rule: Prediction, prompt_id: str, answer: Any, measured: Any, explanation: str) -> PredictionResult:
    if answer is None:
        return PredictionResult(prompt_id, "no prediction", f"no prediction written; measured {_show(measured)}. "
                                f"{explanation}", None, measured)
    right = rule.matches(answer, measured)
    verdict = "right" if right else "not what happened"
    return PredictionResult(prompt_id, "right" if right else "off", f"you predicted {_show(answer)}, measured "
                            f"{_show(measured)}{_tolerance_text(rule)}: {verdict}. {explanation}", answer, measured)


def grade_prediction(prompt_id: str, answer: Any, parameters: dict[str, Any] | None = None) -> PredictionResult:
    """Grade a written ``answer`` with trusted code: the right answer comes from the prediction's ``expected``
    at the lesson's ``parameters`` (its defaults when None), never from the student's run. Never raises; a
    prediction that only the lesson's run can measure is "not graded"."""
    prompt_id = current_id(prompt_id, PREDICTIONS)
    rule = PREDICTIONS.get(prompt_id)
    if rule is None:
        return PredictionResult(prompt_id, "not graded", f"no prediction {prompt_id!r} is registered", answer)
    if rule.expected is None:
        return PredictionResult(prompt_id, "not graded", "only the lesson's run measures this (run the lesson "
                                "to see it)", answer)
    try:
        measured = rule.expected(dict(parameters or {}))
    except Exception as exc:
        return PredictionResult(prompt_id, "not graded", f"the expected value could not be computed: "
                                f"{type(exc).__name__}: {str(exc)[:120]}", answer)
    try:
        return _compare(rule, prompt_id, answer, measured, rule.question)
    except Exception as exc:  # an answer no comparison can take (an integer of 400 digits): it is off, not a crash
        return PredictionResult(prompt_id, "off", f"{_show_answer(answer)} cannot be compared with the measured value "
                                f"({type(exc).__name__}): answer with a number of the size asked", answer)


def _show_answer(answer: Any) -> str:
    if isinstance(answer, int) and abs(answer) >= 10**30:  # str() of a huge int may itself refuse (4300 digits)
        return f"an integer of about {int(answer.bit_length() * 0.30103) + 1} digits"
    return repr(answer)[:60]


def _show(x: Any) -> str:
    return f"{x:.4g}" if isinstance(x, float) else repr(x)


def summary() -> dict[str, list[dict[str, Any]]]:
    """The session's checks and predictions as plain data, for a notebook's ``metrics.json``:
    ``{"exercises": [...], "predictions": [...]}``."""
    return {"exercises": [r.to_dict() for r in RESULTS.values() if isinstance(r, CheckResult)],
            "predictions": [r.to_dict() for r in RESULTS.values() if isinstance(r, PredictionResult)]}
