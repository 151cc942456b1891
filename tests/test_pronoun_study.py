"""Lesson 14's study functions (workbench/lessons/pronoun_study.py): roles of a pair's positions, and findings that
must clear both controls with intervals corrected for the number of cells tested, never at the answer row."""

from __future__ import annotations

import numpy as np

from workbench.lessons import pronoun_study as ps
from workbench.lessons.pronoun_pairs import PronounPair

LAYERS = {"enc.resid": ["embed", "enc 0"], "dec.memory": ["dec 0"], "dec.resid": ["embed", "dec 0"]}


def _pair(kind="subject"):
    return PronounPair(kind=kind, split="val", clean_text="Ein Mann hält seinen Hund .",
                       corrupt_text="Eine Frau hält ihren Hund .", clean_src=(5, 6, 7, 8, 9, 10, 3),
                       corrupt_src=(15, 16, 7, 18, 9, 10, 3), tgt=(2, 40, 41, 42), corrupt_tgt=(2, 40, 51, 42), pos=3,
                       good=60, bad=61, edit=(0, 1, 3), translation="A man holds his dog .")


def test_roles_split_the_edited_positions_and_draw_one_random_unedited_one():
    toks = ["▁Ein", "▁Mann", "▁hält", "▁seinen", "▁Hund", "▁.", "<eos>"]
    roles = ps.source_roles(_pair(), toks, np.random.default_rng(0))
    assert roles["possessive"] == [3] and roles["subject"] == [0, 1] and roles["edit"] == [0, 1, 3]
    assert roles["eos"] == [6] and roles["random"][0] in (2, 4, 5)  # never an edited position, never eos
    tgt = ps.target_roles(_pair(), np.random.default_rng(0))
    assert tgt["pronoun row"] == [3] and tgt["man/woman"] == [2] and tgt["random"] == [1]
    assert all(k.startswith("number·") for k in ps.target_roles(_pair("number"), np.random.default_rng(0)))


def _collected(n=40, effect=0.8, control=0.1, noise=0.05, seed=0):
    rng = np.random.default_rng(seed)

    def rows(level, layers):
        return [np.full(layers, level) + rng.normal(0, noise, layers) for _ in range(n)]

    c = {("enc.resid", "clean", "subject"): rows(effect, 2), ("enc.resid", "clean", "random"): rows(control, 2),
         ("enc.resid", "unrelated", "subject"): rows(control, 2),
         ("dec.resid", "clean", "pronoun row"): rows(1.0, 2), ("dec.resid", "clean", "random"): rows(control, 2)}
    return c


def test_a_clear_effect_is_a_finding_and_the_answer_row_never_is():
    out = ps.findings(_collected(), LAYERS, min_effect=0.1)
    assert out["tested"] == 2 and out["level"] == 1 - 0.05 / 2  # enc embed and enc 0 at "subject"
    assert all(c["clears"] for c in out["cells"])
    assert not any(c["group"] in ps.BY_CONSTRUCTION for c in out["cells"])  # the answer row is calibration only
    lines = ps.finding_lines(out["cells"], number=False)
    assert len(lines) == 2 and "restores" in lines[0] and "carried" not in lines[0]


def test_an_effect_at_the_controls_level_or_below_min_effect_is_not_a_finding():
    assert not any(c["clears"] for c in ps.findings(_collected(effect=0.12), LAYERS, min_effect=0.1)["cells"])
    assert not any(c["clears"] for c in ps.findings(_collected(effect=0.3, control=0.0), LAYERS,
                                                   min_effect=0.5)["cells"])


def test_the_correction_for_many_cells_widens_the_intervals():
    base = _collected(n=12, effect=0.2, control=0.1, noise=0.1, seed=3)
    few = ps.findings(base, LAYERS, min_effect=0.0)
    many = dict(base)  # the same cells, plus 40 more groups tested alongside them
    for g in range(40):
        many[("enc.resid", "clean", f"g{g}")] = base[("enc.resid", "clean", "subject")]
        many[("enc.resid", "unrelated", f"g{g}")] = base[("enc.resid", "unrelated", "subject")]
    wide = ps.findings(many, LAYERS, min_effect=0.0)
    assert wide["tested"] == few["tested"] + 80
    a = next(c for c in few["cells"] if c["group"] == "subject" and c["layer"] == "enc 0")
    b = next(c for c in wide["cells"] if c["group"] == "subject" and c["layer"] == "enc 0")
    assert b["low"] < a["low"] and b["high"] > a["high"]  # the same data, a wider corrected interval
