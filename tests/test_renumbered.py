"""Ids and notebook names from before the lessons were renumbered (subwords and batching moved to 08, activation
patching split into 14 and 15): a student's copy made earlier still checks, predicts and grades, with a warning,
for one release."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from workbench.lessons import exercises as ex
from workbench.lessons.exercises.renumbered import OLD_IDS, OLD_NOTEBOOKS, current_id, lessons_of

REPO = Path(__file__).resolve().parents[1]
STEMS = {p.stem for p in (REPO / "notebooks").glob("[0-9][0-9]_*.py")}


def test_every_old_id_names_a_registered_one_and_none_is_still_in_use():
    registered = set(ex.EXERCISES) | set(ex.PREDICTIONS)
    assert set(OLD_IDS.values()) <= registered
    assert not set(OLD_IDS) & registered  # an old id that is also a new one would be ambiguous
    # the function the student writes keeps its name: only the number changed
    assert all(old.split(".", 1)[1] == new.split(".", 1)[1] for old, new in OLD_IDS.items())


def test_every_old_notebook_name_is_gone_and_maps_to_lessons_that_exist():
    numbers = {s[:2] for s in STEMS}
    assert not set(OLD_NOTEBOOKS) & STEMS
    assert all(set(v) <= numbers for v in OLD_NOTEBOOKS.values())
    # each old exercise and prediction lands in a lesson its old notebook maps to
    for old, new in OLD_IDS.items():
        stem = next(s for s in OLD_NOTEBOOKS if s.startswith(old[:2] + "_"))
        assert new[:2] in OLD_NOTEBOOKS[stem], (old, new)


def patch_hook(cached, position):
    """A right answer to 14.patch_hook, written as a student would (the package's own would be refused)."""
    def hook(module, inputs, output):
        patched = output.clone()
        patched[:, position] = cached[:, position].to(output.dtype)
        return patched

    return hook


def test_an_old_id_checks_and_predicts_under_its_new_id_with_a_warning():
    with pytest.warns(FutureWarning, match=r"'13.patch_hook' is an id from before .* '14.patch_hook'"):
        result = ex.check("13.patch_hook", patch_hook)
    assert result.passed and result.exercise == "14.patch_hook"
    with pytest.warns(FutureWarning, match="'15.best_layer'"):
        prediction = ex.predict("13.best_layer", "enc 2", "enc 2", "")
    assert prediction.prompt == "15.best_layer" and prediction.status == "right"
    with pytest.warns(FutureWarning):
        assert ex.grade_prediction("10.lstm_crossing", 128).prompt == "11.lstm_crossing"


def test_current_ids_pass_without_a_warning_and_unknown_ids_stay_unknown():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert current_id("14.patch_hook", ex.EXERCISES) == "14.patch_hook"
        assert current_id("99.nothing", ex.EXERCISES) == "99.nothing"
        with pytest.raises(KeyError, match="no exercise '99.nothing'"):
            ex.get("99.nothing")


def test_an_old_notebook_name_is_graded_as_the_lessons_that_hold_it_now():
    assert lessons_of("05_masked_attention") == (("05",), "")
    assert lessons_of("08_bpe_and_batching") == (("08",), "")
    numbers, note = lessons_of("13_activation_patching")
    assert numbers == ("14", "15") and "before the lessons were renumbered" in note and "14 and 15" in note
    assert lessons_of("15_bpe_and_batching")[0] == ("08",)


def test_an_old_copy_is_graded_only_on_the_exercises_and_prompts_it_holds():
    """A copy of old lesson 13 holds 13.patch_hook and 13.best_layer: the exercise and prompts added since (15's
    interval, 14's noising prompt) are not in it and must not be graded as missing; old 17 had none."""
    from workbench.lessons.exercises.renumbered import held_ids

    assert held_ids("13_activation_patching") == {"14.patch_hook", "15.best_layer"}
    assert held_ids("17_where_translation_is_decided") == set()
    assert held_ids("15_bpe_and_batching") == {"08.apply_merges", "08.padding_stats", "08.pieces_8000"}
    assert held_ids("14_activation_patching") is None  # today's name: everything of its lesson
    assert {"15.corrected_interval", "14.noising_breaks"} <= set(ex.EXERCISES) | set(ex.PREDICTIONS)
