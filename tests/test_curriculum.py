"""The curriculum notebooks on multi-head attention (03), the assembled layer (06) and the training recipe (07).

Structure checks run always; the SMOKE runs are marked ``notebook`` and read each notebook's metrics.json back
with tolerances that follow from what the notebook claims (the reason is written beside each check).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import nbformat
import pytest

from workbench.tools.book.notebooks import notebook_parameters

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
STEMS = ("03_multi_head_attention", "06_transformer_layer", "07_training_recipe")
FP32 = 1e-5  # float32 equalities: reordered sums of width <= 2048 move results by ~1e-7 relative, not more


def _close(value: float, target: float, tol: float) -> bool:
    return abs(value - target) <= tol


EXPECTED: dict[str, list[tuple[str, object]]] = {
    "03_multi_head_attention": [
        ("loop_vs_reshape_max_diff", lambda v: v < FP32),  # h small projections == one reshaped projection
        ("max_diff_vs_workbench", lambda v: v < FP32),  # by hand == wb.MultiHeadAttention (explicit and fused)
        ("max_diff_vs_torch_nn", lambda v: v < FP32),  # == torch.nn.MultiheadAttention with the mask converted
        ("padding_weight_max", lambda v: v == 0.0),  # masked keys get exactly zero weight
        ("unconverted_mask_diff", lambda v: v > 1e-2),  # the unconverted mask attends to the padding instead
        ("param_counts_equal", lambda v: v is True),  # same parameters for every head count
        ("param_count", lambda v: v == 4 * 32**2 + 4 * 32),  # SMOKE width 32: 4·d² + 4·d
        ("nn_param_count", lambda v: v == 4 * 32**2 + 4 * 32),
        ("toy_prev_weight_error", lambda v: v < FP32),  # designed head: e^s / (e^s + T - 1) on the previous word
        ("toy_same_word_error", lambda v: v < FP32),
        ("toy_repeated_words", lambda v: v == 2),  # "the" appears twice in the default sentence
        ("toy_uniform_error", lambda v: v < 1e-6),  # zero query: uniform weights
        ("toy_reads_previous_word", lambda v: v is True),
        ("toy_reads_next_word", lambda v: v is True),
        # four heads averaged: no key is the peak of more than two heads, so the mean peak is about half a head's
        ("toy_averaged_max_weight", lambda v: v < 0.6),
        ("cross_max_diff_vs_module", lambda v: v < FP32),  # cross-attention by hand == the decoder's module
        ("cross_max_diff_vs_capture", lambda v: v < FP32),  # == what capture_attention recorded in the model
        ("cross_max_diff_vs_torch_nn", lambda v: v < FP32),
        ("cross_padding_weight_max", lambda v: v == 0.0),
        ("cross_shape", lambda v: v == [3, 4, 5, 9]),  # (B, H, T, S) with T != S
    ],
    "06_transformer_layer": [
        ("layernorm_error", lambda v: v < FP32),
        ("wiring_error", lambda v: v < FP32),  # post-LN and pre-LN layers are wired as the formulas say
        ("post_resid_norm_error", lambda v: v < 0.08),  # every post-LN layer ends at norm sqrt(64) = 8 (1%)
        ("pre_resid_growth_enc", lambda v: v > 1.3),  # the pre-LN residual stream grows with depth (1.6-2.1 seen)
        ("pre_resid_growth_dec", lambda v: v > 1.3),
        ("post_dec_grad_ratio", lambda v: v > 1.5),  # post-LN decoder gradients grow towards the output
        ("pre_dec_grad_ratio", lambda v: v < 1.2),  # pre-LN's do not
        ("ffn_conv_max_diff", lambda v: v < FP32),  # FFN == two 1x1 convolutions
        ("ffn_share_encoder", lambda v: _close(v, 2 / 3, 2e-3)),  # 8d² of 12d², up to O(d) terms
        ("ffn_share_decoder", lambda v: _close(v, 1 / 2, 2e-3)),  # 8d² of 16d²
        ("embedding_error", lambda v: v < FP32),  # E[ids]·sqrt(d) + PE
        ("scaled_to_position_ratio", lambda v: _close(v, math.sqrt(2), 0.1)),  # sqrt(d) against sqrt(d/2)
        ("three_way_shared", lambda v: v is True),
        ("prob_sum_error", lambda v: v < FP32),
        ("logits_by_hand_error", lambda v: v < 1e-4),  # z = h·Eᵀ, width 64, logits of order 10
        ("base_total", lambda v: v == 63_082_496),  # computed by hand from the paper's sizes, vocabulary 37000
        ("big_total", lambda v: v == 214_245_376),
        ("base_components_match", lambda v: v is True),
        ("big_components_match", lambda v: v is True),
        # the paper's totals leave the vocabulary open ("about 37000") and are rounded to millions: a vocabulary
        # within ±10% (±3,700 rows) plus 0.5M is ±3.7% of 65M for base and ±2.0% of 213M for big
        ("base_relative", lambda v: abs(v) < (3700 * 512 + 0.5e6) / 65e6),
        ("big_relative", lambda v: abs(v) < (3700 * 1024 + 0.5e6) / 213e6),
    ],
    "07_training_recipe": [
        ("paper_peak_step", lambda v: v == 4000),  # the schedule peaks exactly at the warm-up step
        ("our_peak_step", lambda v: v == 800),
        ("paper_peak", lambda v: _close(v, 512**-0.5 * 4000**-0.5, 1e-12)),  # factor / sqrt(d_model · warmup)
        ("our_peak", lambda v: _close(v, 256**-0.5 * 800**-0.5, 1e-12)),
        ("warmup_linear_ratio", lambda v: _close(v, 2.0, 1e-9)),
        ("decay_ratio_4x", lambda v: _close(v, 0.5, 1e-9)),
        ("smoothing_tokens", lambda v: v == 8),  # 10 targets, 2 of them padding
        ("smoothing_hand_vs_package", lambda v: v < 1e-4),
        ("best_margin", lambda v: _close(v, math.log(1 + 0.9 * 24 / 0.1), 0.05 + 1e-9)),  # c* for V = 24, eps 0.1
        ("adam_matches_paper", lambda v: v is True),
        ("average_mean_error", lambda v: v < 1e-6),  # averaged weights are the element-wise mean
        ("length_penalty_formula_error", lambda v: v < FP32),
        ("length_nondecreasing", lambda v: v is True),  # larger alpha, longer (or equal) beam outputs
        ("length_gain", lambda v: v > 0),
    ],
}

# claims that relate two measurements of one run
RELATIONS: dict[str, list[tuple[str, object]]] = {
    "06_transformer_layer": [
        # SMOKE trains 100 steps: post-LN without warm-up lags post-LN with it (0.2-0.43 nats over four seeds), by
        # more than two standard errors of the validation loss; pre-LN without warm-up is far ahead of it
        ("post-LN needs the warm-up", lambda m: m["postln_no_warmup_val_loss"] > m["postln_warmup_val_loss"] + 0.05),
        ("pre-LN tolerates no warm-up", lambda m: m["preln_no_warmup_val_loss"] < m["postln_no_warmup_val_loss"] - 0.2),
        ("the trained model predicts the next token", lambda m: m["correct_next_prob"] > 1 / 24),  # above uniform over V
    ],
    "07_training_recipe": [
        ("loss falls", lambda m: m["loop_last_loss"] < m["loop_first_loss"] - 0.5),
        # below the unigram entropy, the best any source-blind predictor can do on uniformly drawn tokens
        ("uses the source", lambda m: m["val_loss_last"] < m["unigram_cross_entropy"] - 0.2),
        ("averaging beats a typical snapshot", lambda m: m["val_loss_average"] < m["val_loss_snapshots_mean"]),
        ("smoothed optimum is H(q)", lambda m: abs(m["loss_at_q"] - m["entropy_q"]) < 1e-4),
        ("over-confidence costs", lambda m: m["loss_at_largest_margin"] > m["loss_at_q"] + 0.5),
    ],
}


# the paper's curriculum, 01 to 11: each of these notebooks ends with exercises
CURRICULUM = sorted(p.stem for p in NOTEBOOKS.glob("[01][0-9]_*.ipynb") if 1 <= int(p.stem[:2]) <= 11)


def test_curriculum_is_complete():
    assert [s[:2] for s in CURRICULUM] == [f"{i:02d}" for i in range(1, 12)], CURRICULUM


@pytest.mark.parametrize("stem", CURRICULUM)
def test_curriculum_notebook_ends_with_try_it_prompts_naming_real_parameters(stem):
    """Each notebook closes with 2-3 exercises whose `-p NAME=VALUE` names a declared parameter, each saying what to
    look for (text after the command)."""
    nb = nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4)
    last = nb.cells[-1]
    assert last.cell_type == "markdown" and "Try it" in last.source
    bullets = re.split(r"^\* ", last.source, flags=re.M)[1:]
    prompts = [re.match(rf"`workbench notebooks run --only {stem[:2]}((?: -p [A-Z_0-9]+=[^`]+?)+)`\s+— (.+)", b, re.S)
               for b in bullets]
    assert 2 <= len(prompts) <= 3 and all(prompts), bullets
    named = [n for p in prompts for n in re.findall(r"-p ([A-Z_0-9]+)=", p[1])]
    assert set(named) <= set(notebook_parameters(NOTEBOOKS / f"{stem}.ipynb")), named
    assert all(len(p[2].split()) >= 5 for p in prompts), bullets  # each says what to look for


@pytest.mark.notebook
@pytest.mark.parametrize("stem", STEMS)
def test_curriculum_notebook_smoke_metrics(stem, smoke_runs):
    result = smoke_runs(NOTEBOOKS / f"{stem}.ipynb")  # conftest's: each notebook runs once a session
    assert result["status"] == "ok", result.get("error")
    metrics = result["metrics"]
    for key, check in EXPECTED[stem]:
        assert key in metrics, f"{stem}: metrics.json lacks {key!r}"
        assert check(metrics[key]), f"{stem}: {key} = {metrics[key]!r}"
    for claim, check in RELATIONS.get(stem, []):
        assert check(metrics), f"{stem}: {claim!r} does not hold"
    assert result["html_offline"]
