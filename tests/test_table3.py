"""Table 3 at small scale: the variants are the paper's rows, and seeded runs are judged on paired differences."""

from __future__ import annotations

import json
import math

import pytest

import workbench as wb
from tests.conftest import require
from workbench.errors import ConfigError
from workbench.lessons import table3


def _runs(values: dict[str, list[float]], key: str = "val_loss") -> list[dict]:
    return [{"row": row, "seed": seed, key: v} for row, vs in values.items() for seed, v in enumerate(vs)]


def test_variants_change_one_thing_each_and_match_the_paper_rows():
    base = wb.preset("small", d_model=64, n_heads=4, d_ff=256, n_enc_layers=2, n_dec_layers=2, max_len=128)
    rows = table3.variants(base)
    assert set(rows) >= {claim_row for claim_row, _ in table3.PAPER_PPL_CLAIMS.values()}
    assert set(rows) >= {claim_row for claim_row, _ in table3.PAPER_BLEU_CLAIMS.values()}
    params = {}
    for name, (model_kw, train_kw) in rows.items():
        assert len(model_kw) + len(train_kw) <= 2, name  # (B) sets d_head and keeps d_v: one change
        cfg = wb.ModelConfig(**{**base.to_dict(), **model_kw})
        params[name] = wb.count_parameters(wb.build_model(cfg, 100, 100))
        wb.TrainConfig(max_steps=1, **train_kw)  # the recipe change is a valid recipe
    # (A) at constant computation: the same parameters as the base; (B) smaller keys only: fewer
    assert params["(A) h=1, d_k=D"] == params["(A) h=8, d_k=D/8"] == params["base"]
    assert params["(B) d_k=D/8 (smaller keys)"] < params["base"]
    assert params["(C) 1 layer"] < params["base"] and params["(E) learned positions"] > params["base"]
    assert rows["(D) no label smoothing"] == ({}, {"label_smoothing": 0.0})


def test_variants_refuse_a_width_the_key_rows_cannot_divide():
    with pytest.raises(ConfigError, match="d_model=36"):
        table3.variants(wb.ModelConfig(d_model=36, n_heads=4, d_ff=64))


def test_seeded_judging_pairs_the_seeds():
    # the base moves a lot from seed to seed, the variant always 0.1 above it: paired, that is a clear trend, while
    # an unpaired comparison of the two rows' spreads would call it noise
    runs = _runs({"base": [1.0, 1.5, 2.0], "(A) h=1, d_k=D": [1.1, 1.6, 2.1]})
    judged = table3.judge_seeded(runs, {"one head is worse": ("(A) h=1, d_k=D", +1)}, "val_loss")
    j = judged["one head is worse"]
    assert j["delta"] == pytest.approx(0.1) and j["sd"] == pytest.approx(0.0, abs=1e-12)
    assert j["verdict"] == "agrees" and j["seeds_agreeing"] == 3 and j["seeds"] == 3


def test_seeded_judging_margin_is_two_standard_errors():
    runs = _runs({"base": [1.0, 1.0, 1.0], "v": [1.1, 1.3, 0.9]})  # differences 0.1, 0.3, -0.1
    j = table3.judge_seeded(runs, {"c": ("v", +1)}, "val_loss")["c"]
    sd = math.sqrt(((0.1 - 0.1) ** 2 + (0.3 - 0.1) ** 2 + (-0.1 - 0.1) ** 2) / 2)
    assert j["margin"] == pytest.approx(2 * sd / math.sqrt(3))
    assert j["verdict"] == "within noise" and j["seeds_agreeing"] == 2
    assert table3.judge_seeded(runs, {"c": ("v", -1)}, "val_loss")["c"]["verdict"] == "within noise"
    # "no difference": agrees while the mean stays inside the margin
    assert table3.judge_seeded(runs, {"c": ("v", 0)}, "val_loss")["c"]["verdict"] == "agrees"


def test_seeded_judging_needs_two_common_seeds():
    runs = _runs({"base": [1.0, 1.2], "v": [1.1]})
    with pytest.raises(ConfigError, match="at least 2 common seeds"):
        table3.judge_seeded(runs, {"c": ("v", +1)}, "val_loss")


def test_row_summary_means_and_spreads():
    runs = _runs({"base": [1.0, 2.0, 3.0], "v": [2.0, 2.0, 2.0]})
    out = {r["row"]: r for r in table3.row_summary(runs, keys=("val_loss",))}
    assert out["base"]["val_loss"] == pytest.approx(2.0) and out["base"]["val_loss_sd"] == pytest.approx(1.0)
    assert out["v"]["val_loss_sd"] == 0.0 and out["v"]["seeds"] == 3
    ordered = table3.row_summary(runs, keys=("val_loss",), order=["v", "base", "never run"])
    assert [r["row"] for r in ordered] == ["v", "base"]  # the asked order; a row without runs is left out


def test_results_files_are_checked_and_the_newest_complete_one_is_read(tmp_path):
    with pytest.raises(ConfigError, match="bench/table3.py"):
        table3.load_results(tmp_path / "missing.json")
    (tmp_path / "table3-aaa.json").write_text(json.dumps({"runs": [], "budget": 1, "base": {},
                                                           "finished_utc": "2026-01-02T00:00:00+00:00"}))
    (tmp_path / "table3-bbb.json").write_text(json.dumps({"runs": [], "budget": 1, "base": {},
                                                           "finished_utc": "2026-03-01T00:00:00+00:00"}))
    (tmp_path / "table3-ccc.json").write_text(json.dumps({"runs": [], "budget": 1, "base": {}}))  # unfinished
    assert table3.latest_results(tmp_path).name == "table3-bbb.json"
    assert table3.latest_results(tmp_path / "nothing-here") is None
    (tmp_path / "other.json").write_text(json.dumps({"runs": []}))
    with pytest.raises(ConfigError, match="lacks 'budget'"):
        table3.load_results(tmp_path / "other.json")


def test_committed_table3_results_are_complete():
    """The committed table that notebook 11 reads: every row from every seed, the same budget, made as described."""
    from workbench.tools.provenance import PACKAGE_DIR

    path = table3.latest_results(PACKAGE_DIR.parent / "bench" / "results" / "table3")
    require(path is not None, "a finished bench/results/table3/table3-*.json (the repository's, not an installed "
            "package's)", "run the tests from a checkout, or make one with python bench/table3.py --json FILE")
    data = table3.load_results(path)
    base = wb.ModelConfig(**data["base"])
    have = {(r["row"], r["seed"]) for r in data["runs"]}
    assert have == {(row, s) for row in table3.variants(base) for s in data["seeds"]} and len(data["seeds"]) >= 3
    assert all(r["steps"] == data["budget"] for r in data["runs"])
    probe = data["budget_run"]
    assert probe["stopped"] == "early stopping"
    assert data["budget"] == probe["epoch_steps"][probe["best_epoch"] - 1]
    assert data["commit"] and data["dirty"] is False
