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
    """The committed table that notebook 12 reads: every row from every seed, the same budget, made as described."""
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


def _committed_table3() -> dict:
    from workbench.tools.provenance import PACKAGE_DIR

    path = table3.latest_results(PACKAGE_DIR.parent / "bench" / "results" / "table3")
    require(path is not None, "a finished bench/results/table3/table3-*.json (the repository's, not an installed "
            "package's)", "run the tests from a checkout, or make one with python bench/table3.py --json FILE")
    return table3.load_results(path)


def _verdicts_by_hand(data: dict, claims: dict[str, tuple[str, int]], key: str) -> dict[str, str]:
    """Each claim's verdict recomputed from the file's per-seed numbers with plain arithmetic (not judge_seeded):
    the variant's figure minus the base's, seed by seed; their mean against two standard errors of it."""
    by = {(r["row"], r["seed"]): r[key] for r in data["runs"]}
    out = {}
    for claim, (variant, direction) in claims.items():
        d = [by[(variant, s)] - by[("base", s)] for s in data["seeds"]]
        mean = sum(d) / len(d)
        margin = 2 * math.sqrt(sum((x - mean) ** 2 for x in d) / (len(d) - 1)) / math.sqrt(len(d))
        trend = direction * mean
        out[claim] = (("agrees" if abs(mean) <= margin else "differs") if direction == 0 else
                      "agrees" if trend > margin else "opposite" if trend < -margin else "within noise")
    return out


CLAIMS = ((table3.PAPER_PPL_CLAIMS, "val_loss"), (table3.PAPER_BLEU_CLAIMS, "val_bleu"))


def test_the_committed_table3_verdicts_follow_from_its_per_seed_numbers():
    """What notebook 12 shows for the committed table, judged by the package, equals the verdicts recomputed by hand
    from the per-seed numbers, and they are not all alike (a table where every claim were "within noise" would make
    this check weak)."""
    data = _committed_table3()
    verdicts = {}
    for claims, key in CLAIMS:
        judged = {c: v["verdict"] for c, v in table3.judge_seeded(data["runs"], claims, key).items()}
        assert judged == _verdicts_by_hand(data, claims, key)
        verdicts.update(judged)
    assert len(set(verdicts.values())) >= 2, verdicts


def test_a_planted_flip_in_one_seed_changes_the_verdict_and_fails_the_check():
    """Flip one seed's number in a copy of the committed file (the variant's figure mirrored about the base's, so
    that seed now goes the other way, by a lot): the recomputed verdict of an agreeing claim changes, so a check
    comparing the stated verdicts with the per-seed numbers fails on the planted file."""
    import copy

    data = _committed_table3()
    stated = {c: v["verdict"] for claims, key in CLAIMS
              for c, v in table3.judge_seeded(data["runs"], claims, key).items()}
    claims, key = next((cl, k) for cl, k in CLAIMS if any(stated[c] == "agrees" for c in cl))
    claim = next(c for c in claims if stated[c] == "agrees")
    variant, direction = claims[claim]
    planted = copy.deepcopy(data)
    seed = data["seeds"][0]
    base_value = next(r[key] for r in planted["runs"] if r["row"] == "base" and r["seed"] == seed)
    for r in planted["runs"]:
        if r["row"] == variant and r["seed"] == seed:  # this seed's difference becomes -20x what it was
            r[key] = base_value - 20 * (r[key] - base_value)
    recomputed = _verdicts_by_hand(planted, claims, key)
    assert recomputed[claim] != "agrees"
    assert table3.judge_seeded(planted["runs"], claims, key)[claim]["verdict"] == recomputed[claim]
    assert {c: stated[c] for c in claims} != recomputed  # the stated verdicts no longer follow from the numbers
