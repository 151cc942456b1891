"""Exercise and prediction ids from before the lessons were renumbered (subwords and batching moved before the
translator it feeds, activation patching split in two), accepted for one release with a warning so that a student's
notebook copied earlier still checks and grades.

``ex.check("13.patch_hook", ...)`` in such a copy finds ``"14.patch_hook"``; a grader given the old notebook
``13_activation_patching.ipynb`` grades the exercises of lessons 14 and 15 (:func:`lessons_of`).
"""

from __future__ import annotations

import warnings

# old id -> new id (exercises and predictions)
OLD_IDS: dict[str, str] = {
    "08.ngram_matches": "09.ngram_matches", "08.brevity_penalty": "09.brevity_penalty",
    "08.better_decoder": "09.better_decoder",
    "09.head_entropy": "10.head_entropy", "09.positional_score": "10.positional_score",
    "09.peaked_kind": "10.peaked_kind",
    "10.layer_macs": "11.layer_macs", "10.path_length": "11.path_length", "10.lstm_crossing": "11.lstm_crossing",
    "11.verdict": "12.verdict", "11.paired_verdict": "12.paired_verdict", "11.signs_hold": "12.signs_hold",
    "12.integrated_gradients": "13.integrated_gradients", "12.agreeing_heads_matter": "13.agreeing_heads_matter",
    "13.patch_hook": "14.patch_hook", "13.best_layer": "15.best_layer",
    "14.rerank_finished": "16.rerank_finished", "14.longer_alpha": "16.longer_alpha",
    "15.apply_merges": "08.apply_merges", "15.padding_stats": "08.padding_stats", "15.pieces_8000": "08.pieces_8000",
    "16.marian_positions": "17.marian_positions", "16.held_out": "17.held_out",
}
# old notebook stem -> the lessons that hold its exercises and predictions now
OLD_NOTEBOOKS: dict[str, tuple[str, ...]] = {
    "08_translation_training": ("09",), "09_multi_head_interpretation": ("10",), "10_complexity": ("11",),
    "11_variations": ("12",), "12_attention_as_explanation": ("13",), "13_activation_patching": ("14", "15"),
    "14_one_sentence_end_to_end": ("16",), "15_bpe_and_batching": ("08",), "16_production_translator": ("17",),
    "17_where_translation_is_decided": ("18",),
}


def current_id(any_id: str, registered: dict) -> str:
    """The registered id for ``any_id``: itself when registered, else its new id (with a FutureWarning) when it is an
    id from before the renumbering, else itself (the caller reports it unknown)."""
    if any_id in registered or any_id not in OLD_IDS:
        return any_id
    new = OLD_IDS[any_id]
    warnings.warn(f"{any_id!r} is an id from before the lessons were renumbered: it is {new!r} now (the old id is "
                  "accepted until the next release; copy the lesson again with `workbench notebooks copy`)",
                  FutureWarning, stacklevel=3)
    return new


def lessons_of(stem: str) -> tuple[tuple[str, ...], str]:
    """(the lesson numbers whose exercises a notebook named ``stem`` holds, a note: "" unless ``stem`` is a notebook
    name from before the renumbering)."""
    if stem in OLD_NOTEBOOKS:
        numbers = OLD_NOTEBOOKS[stem]
        return numbers, (f"{stem} is a notebook name from before the lessons were renumbered: graded as lesson"
                         f"{'s' if len(numbers) > 1 else ''} {' and '.join(numbers)}")
    return (stem.split("_", 1)[0],), ""


def held_ids(stem: str) -> set[str] | None:
    """For a notebook name from before the renumbering, the (new) ids of the exercises and predictions such a copy
    holds: exercises and prompts added since are not in it, so they are not graded as missing. None for a current
    name (everything of its lesson)."""
    if stem not in OLD_NOTEBOOKS:
        return None
    number = stem.split("_", 1)[0]
    return {new for old, new in OLD_IDS.items() if old.split(".", 1)[0] == number}

