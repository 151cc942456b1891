"""The predict-then-run prompts of lessons 08 and 10-18: one per lesson, each before the result it predicts.

Registered here (not in ``nb08``, ``nb10`` ... ``nb17``, which hold those lessons' exercises) so that the prompts and their
rules land together; each notebook asks with a cell tagged ``answer`` (``PREDICT_X: ... | None = None``) and compares
with :func:`~workbench.lessons.exercises.core.predict` once the lesson has measured the value. Only lesson 11's can be
computed from the parameters alone; the others need the lesson's own run (``expected=None``: not graded offline).
"""

from __future__ import annotations

from typing import Any

from workbench.lessons.exercises.predictions import Prediction, register_prediction
from workbench.model.sites import OLD_KINDS, kind_name

D_FIXED = 64  # lesson 11's default width during the n sweep (tests/test_exercise_checks.py reads the notebook's)


def _lstm_crossing(params: dict) -> int:
    """n at which a self-attention layer with its projections (2n²d + 4nd²) costs an LSTM layer's 8nd²: n = 2d."""
    d = 32 if params.get("SMOKE") else int(params.get("D_FIXED", D_FIXED))
    return 2 * d


class _KindChoice(Prediction):
    """A choice among attention kinds: an old spelling (``"cross"``) counts as its kind (``"dec.cross"``), with the
    DeprecationWarning of :mod:`workbench.model.sites`."""

    def matches(self, answer: Any, measured: Any) -> bool:
        old = answer.strip().lower() if isinstance(answer, str) else None
        if OLD_KINDS.get(old) in self.choices:
            answer = kind_name(old, self.choices, what="attention kind")  # warns
        return super().matches(answer, measured)


register_prediction(Prediction(
    "08.pieces_8000", "how many pieces does a validation sentence take on average with 8,000 joint pieces?",
    "PREDICT_PIECES_8000", "number", tolerance=0.15))
register_prediction(_KindChoice(
    "10.peaked_kind", "which kind of attention has the most peaked heads on average over the validation set?",
    "PREDICT_PEAKED_KIND", "choice", choices=("enc.self", "dec.self", "dec.cross")))
register_prediction(Prediction(
    "11.lstm_crossing", "with the projections counted, at which n does self-attention cost as much as an LSTM layer?",
    "PREDICT_LSTM_CROSSING", "count",
    wrong=(("attention's core against a plain RNN, n = d", D_FIXED), ("the four gates counted twice, n = 4d", 4 * D_FIXED),
           ("half a gate's work, n = d / 2", D_FIXED // 2)),
    expected=_lstm_crossing))
register_prediction(Prediction(
    "12.signs_hold", "for how many of the paper's Table 3 claims does the sign hold beyond the seeds' spread?",
    "PREDICT_SIGNS_HOLD", "count"))
register_prediction(Prediction(
    "13.agreeing_heads_matter", "do the heads that agree most with attribution cost more log-probability when "
    "switched off than random heads?", "PREDICT_AGREEING_HEADS_MATTER", "choice", choices=("more", "less")))
register_prediction(Prediction(
    "14.noising_breaks", "patched the other way (noising), does the denoising sweep's best site take away more than "
    "half of the answer?", "PREDICT_NOISING_BREAKS", "choice", choices=("yes", "no")))
register_prediction(Prediction(
    "15.best_layer", "at which encoder layer does patching the edited words restore the most?", "PREDICT_BEST_LAYER",
    "choice", choices=("embed", "enc 0", "enc 1", "enc 2")))
register_prediction(Prediction(
    "16.longer_alpha", "which length penalty returns the longer translation, ALPHA or ALPHA_OTHER?",
    "PREDICT_LONGER_ALPHA", "choice", choices=("0.6", "1.4", "same")))
register_prediction(Prediction(
    "17.held_out", "does the head chosen on half the sentences score higher, equal or lower on the other half than "
    "the in-sample best?", "PREDICT_HELD_OUT", "choice", choices=("higher", "equal", "lower")))
register_prediction(Prediction(
    "18.decided_early", "under the tuned lens, are most words decided before the last decoder layer?",
    "PREDICT_DECIDED_EARLY", "choice", choices=("yes", "no")))
