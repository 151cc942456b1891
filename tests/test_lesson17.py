"""Lesson 18 (where the translation is decided) on SMOKE parameters: its metrics say what its prose claims."""

from __future__ import annotations

from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "18_where_translation_is_decided.ipynb"


@pytest.mark.notebook
def test_18_where_translation_is_decided_smoke_metrics(smoke_runs):
    result = smoke_runs(NOTEBOOK)  # conftest's: each notebook runs once a session
    assert result["status"] == "ok", result.get("error")
    m = result["metrics"]
    assert m["smoke"] is True
    # the lens's last layer is the model's output: KL 0 there, above 0 before it; the tuned lens is closer
    assert m["kl_logit_lens"][-1] == 0 and m["kl_tuned_lens"][-1] == 0
    assert all(k > 0 for k in m["kl_logit_lens"][:-1])
    assert sum(m["kl_tuned_lens"][:-1]) < sum(m["kl_logit_lens"][:-1])
    lo, hi = m["decision_layer_interval"]
    assert lo <= m["median_decision_layer"] <= hi
    assert abs(sum(m["decided_share_by_layer"]) - 1) < 1e-9
    # the sink audit covers both shipped models and its four shares sum to 1 per head
    assert set(m["sink_shares"]) == {"small-de-en", "gru-de-en"}
    assert set(m["sink_shares"]["gru-de-en"]) == {"dec.cross"}
    assert m["sink_row_sum_error"] < 1e-6
    assert {"bleu", "n_heads"} <= set(m["ablation"])
    # integrated gradients complete within 5 %, and the pair's edits carry the difference at the embeddings
    assert m["ig_completeness_error_max"] < 0.05
    assert 0.9 < m["ig_edit_share"] < 1.1
    assert all(0 <= r["iia"] <= 1 and r["iia_lo"] <= r["iia"] <= r["iia_hi"] for r in m["das"])
    # every stated finding names what cleared what (nothing stated by default)
    assert isinstance(m["findings"], list)
