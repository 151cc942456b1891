# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 02 · Scaled dot-product attention
#
# Lesson 01's decoder attended with a query $q = s_t$ (its state) against keys and values that were the same vectors,
# the encoder states ($K = V = h_i$). The Transformer keeps the look-up and separates the roles. In self-attention every
# token plays all three. As a **query** it asks "which other tokens matter to me?", as a
# **key** it is what the queries are compared against, and as a **value** it is what gets passed on once the
# comparison is made. All three are linear maps of the same token vectors $X$ (embeddings plus positions):
#
# $$Q = XW^Q,\qquad K = XW^K,\qquad V = XW^V$$
#
# The paper's attention function compares every query with every key by a dot product, divides by $\sqrt{d_k}$,
# turns each row of scores into weights with a softmax, and returns the weighted sum of the values:
#
# $$\mathrm{Attention}(Q,K,V) = \mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}\right)V$$
#
# This notebook computes it by hand on a tiny example, checks that the hand computation, PyTorch's fused kernel
# and the workbench agree, measures **why** the $1/\sqrt{d_k}$ is there, and compares the dot product with the
# older additive (Bahdanau) score.

# %% tags=["parameters"]
SMOKE: bool = False  # shrink every measurement (what CI runs)
SEED: int = 0  # seeds every random draw
EXAMPLE: str = "the cat sat down"  # tokens of the worked example (split on spaces)
D_MODEL: int = 6  # width of the worked example's token vectors
D_K: int = 4  # query/key/value width of the worked example
PAIRS: int = 20000  # random query/key pairs per d_k for the variance measurement
N_KEYS: int = 16  # keys per softmax in the saturation measurement
MAX_LOG2_DK: int = 10  # largest d_k measured is 2**MAX_LOG2_DK
SEQ_LEN: int = 128  # longest sequence in the additive vs dot-product timing
D_HIDDEN: int = 64  # width d of queries/keys and of the additive score's hidden layer in the timing
REPEATS: int = 5  # timed repetitions (the median is kept)

# %%
pairs = 2000 if SMOKE else PAIRS
d_ks = [2 ** i for i in range(2, (8 if SMOKE else MAX_LOG2_DK) + 1)]
seq_lens = [8, 16, 32] if SMOKE else [16, 32, 64, SEQ_LEN]
d_hidden = 16 if SMOKE else D_HIDDEN
repeats = 2 if SMOKE else REPEATS
tokens = EXAMPLE.split()

# %%
import json, math
import numpy as np
import torch
import workbench as wb
from workbench.viz import figures
figures.setup_offline_renderer()
wb.set_seed(SEED)
metrics = {}

# %%
from workbench.lessons.scores import additive_scores, dot_scores, scaling_study, score_cost
from workbench.lessons.measure import counted_flops, median_seconds
np.set_printoptions(precision=2, suppress=True)
gen = torch.Generator().manual_seed(SEED)

# %% [markdown]
# ## 1 · A worked example with real numbers
#
# The tokens of `EXAMPLE`, each a vector of width `D_MODEL`, and three projection matrices of shape
# `D_MODEL × D_K`. The numbers are random but rounded, so every step below can be checked with a pencil.

# %%
X = torch.round(torch.randn(len(tokens), D_MODEL, generator=gen), decimals=1)            # (T, D_MODEL)
W_q, W_k, W_v = (torch.round(torch.randn(D_MODEL, D_K, generator=gen) / math.sqrt(D_MODEL), decimals=2)
                 for _ in range(3))                                                        # (D_MODEL, D_K)
Q, K, V = X @ W_q, X @ W_k, X @ W_v                                                        # (T, D_K) each
print("X =\n", X.numpy(), "\nQ = X W_q =\n", Q.numpy(), "\nK = X W_k =\n", K.numpy(), "\nV = X W_v =\n", V.numpy())

# %% [markdown]
# Row $i$ of $QK^\top$ holds query $i$ compared with every key. Dividing by $\sqrt{d_k}$ and applying a softmax along
# the row turns these scores into weights that are positive and sum to one. The output row $i$ is the
# weight-averaged value vectors.

# %%
scores = Q @ K.T                                  # (T, T): query i against key j
scaled = scores / math.sqrt(D_K)
weights = torch.softmax(scaled, dim=-1)           # each row sums to 1
out = weights @ V                                 # (T, D_K)
print(f"QKᵀ =\n{scores.numpy()}\n\nQKᵀ/√{D_K} =\n{scaled.numpy()}\n\nsoftmax (rows) =\n{weights.numpy()}")
print("row sums:", weights.sum(-1).numpy())
by_hand = sum(weights[0, j] * V[j] for j in range(len(tokens)))   # output of token 0, written out
print(f"\noutput of {tokens[0]!r} = Σ_j w[0, j]·V[j] =", by_hand.numpy(), "  (row 0 of weights @ V:", out[0].numpy(), ")")
figures.attention_heatmap(weights, tokens, tokens, title="softmax(QKᵀ/√d_k): who attends to whom").show()
metrics["example_rows_sum_to_one"] = float((weights.sum(-1) - 1).abs().max())
metrics["example_by_hand_difference"] = float((by_hand - out[0]).abs().max())

# %% [markdown]
# ## 2 · Three implementations, one answer
#
# The same function exists three times: written out as above, as PyTorch's fused kernel
# `F.scaled_dot_product_attention` (which never materialises the weights), and in `workbench.model.attention`, which
# takes the fused path unless the weights are asked for. On a batch with several heads and a padding mask (the last
# two keys of the second sentence are padding), all of them must agree.

# %%
B, H, T, dk = 2, 3, 5, 8
q, k, v = (torch.randn(B, H, T, dk, generator=gen) for _ in range(3))     # (B, H, T, d_k)
mask = torch.ones(B, 1, 1, T, dtype=torch.bool); mask[1, ..., -2:] = False  # True = may attend
w_hand = torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(dk)).masked_fill(~mask, float("-inf")), -1)
out_hand = w_hand @ v                                                      # (B, H, T, d_k)
out_torch = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
out_fused, _ = wb.scaled_dot_product_attention(q, k, v, mask=mask)
out_explicit, w_explicit = wb.scaled_dot_product_attention(q, k, v, mask=mask, need_weights=True)
diffs = {"torch fused": float((out_torch - out_hand).abs().max()),
         "workbench fused": float((out_fused - out_hand).abs().max()),
         "workbench explicit": float((out_explicit - out_hand).abs().max()),
         "weights": float((w_explicit - w_hand).abs().max())}
print({k_: f"{v_:.1e}" for k_, v_ in diffs.items()})
metrics["max_path_difference"] = max(diffs.values())
metrics["padding_weight_max"] = float(w_explicit[1, ..., -2:].abs().max())

# %% [markdown]
# ## Your turn: scaled dot-product attention by hand
#
# Two functions, each checked against the workbench's on random and edge-case inputs: batch 1, one head, length 1, a padding mask, a causal mask, a query whose every key is masked, cross-attention with Tq ≠ Tk, float64.

# %% [markdown]
# ### Exercise 02.attention_weights · `attention_weights`
#
# The attention weights $\mathrm{softmax}(QK^\top/\sqrt{d_k})$ over the keys, with a boolean mask (True = may attend): masked keys get weight 0, and a query whose every key is masked gets a row of zeros (not NaN).
#
# Shapes: `q` (B, H, Tq, d_k), `k` (B, H, Tk, d_k), `mask` broadcastable to (B, H, Tq, Tk) or None → (B, H, Tq, Tk).

# %% tags=["exercise", "hide-input"]
def attention_weights(q, k, mask=None):
    """softmax(Q K^T / sqrt(d_k)), masked. Shapes: (B, H, Tq, d_k), (B, H, Tk, d_k) -> (B, H, Tq, Tk)."""
    # BEGIN SOLUTION NO PROMPT
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])   # (B, H, Tq, Tk)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)  # rows with no key: 0, not NaN
    return weights
    # END SOLUTION
    """ # BEGIN PROMPT
    raise NotImplementedError("write attention_weights, then run the check below")
    """  # END PROMPT

# %%
from workbench.lessons import exercises as ex  # the checks: ex.check runs your function against the package's
result = ex.check("02.attention_weights", attention_weights)
attention_weights = result.function  # yours if it passed, else the package's: the cells below work either way
result

# %% [markdown]
# ### Exercise 02.attention · `attention`
#
# The attention output $\mathrm{softmax}(QK^\top/\sqrt{d_k})V$, using your `attention_weights`.
#
# Shapes: `q` (B, H, Tq, d_k), `k` (B, H, Tk, d_k), `v` (B, H, Tk, d_v), `mask` as above → (B, H, Tq, d_v).

# %% tags=["exercise", "hide-input"]
def attention(q, k, v, mask=None):
    """softmax(Q K^T / sqrt(d_k)) V. Shapes: ..., v (B, H, Tk, d_v) -> (B, H, Tq, d_v)."""
    # BEGIN SOLUTION NO PROMPT
    return attention_weights(q, k, mask) @ v
    # END SOLUTION
    """ # BEGIN PROMPT
    raise NotImplementedError("write attention, then run the check below")
    """  # END PROMPT

# %%
result = ex.check("02.attention", attention)
attention = result.function  # yours if it passed, else the package's: the cells below work either way
result

# %%
out_yours = attention(q, k, v, mask)   # section 2's batch: the padded second sentence
print("largest difference to the workbench:", float((out_yours - out_fused).abs().max()))

# %% [markdown]
# **Predict, then run.** Section 3 measures the variance of $q\cdot k$ for random unit-variance vectors. By what factor does it grow each time $d_k$ doubles? Write your prediction in the next cell before you run the cells after it (leave `None` to skip: the lesson runs either way).

# %% tags=["answer"]
PREDICT_VARIANCE_FACTOR: float | None = None  # Var(q·k) at 2·d_k divided by Var(q·k) at d_k

# %% [markdown]
# ## 3 · Why divide by $\sqrt{d_k}$?
#
# If the entries of $q$ and $k$ are independent with mean 0 and variance 1, then $q\cdot k=\sum_{i=1}^{d_k} q_i k_i$
# is a sum of $d_k$ independent terms of variance 1, so its variance is $d_k$: the typical score grows like
# $\sqrt{d_k}$. Fed to a softmax, large scores make one weight close to 1 and the rest close to 0 (the softmax
# *saturates*), and a saturated softmax passes back almost no gradient: its Jacobian $\mathrm{diag}(p)-pp^\top$
# vanishes when $p$ is one-hot. Dividing by $\sqrt{d_k}$ brings the variance back to 1 for every width.
#
# Measured below on random vectors, for $d_k$ from 4 up, with and without the scaling: the variance of $q\cdot k$
# (fitted on log-log axes, where a slope of 1 means "proportional to $d_k$"), how peaked the softmax over
# `N_KEYS` keys is (largest weight and entropy; a uniform softmax has entropy $\log$ `N_KEYS`), and the size of its
# Jacobian.

# %%
study = scaling_study(d_ks, n_pairs=pairs, n_keys=N_KEYS, generator=gen)
fit = wb.complexity.fit_loglog_slope(d_ks, study["var_dot"])
figures.loglog_figure(d_ks, {"Var(q·k)": study["var_dot"], "Var(q·k/√d_k)": study["var_scaled"]},
                      fits={"Var(q·k)": fit}, xlabel="d_k", ylabel="variance",
                      title="variance of the dot product grows like d_k; scaled it stays at 1").show()
figures.line_figure(d_ks, {"largest weight, unscaled": study["max_weight_unscaled"],
                           "largest weight, scaled": study["max_weight_scaled"],
                           "entropy / log(N_KEYS), unscaled": np.array(study["entropy_unscaled"]) / math.log(N_KEYS),
                           "entropy / log(N_KEYS), scaled": np.array(study["entropy_scaled"]) / math.log(N_KEYS)},
                    xlabel="d_k", log_x=True, title="softmax saturation over N_KEYS keys").show()
figures.line_figure(d_ks, {"unscaled": study["jacobian_unscaled"], "scaled": study["jacobian_scaled"]},
                    xlabel="d_k", ylabel="‖∂softmax/∂z‖_F", log_x=True,
                    title="gradient through the softmax (mean Jacobian norm)").show()
print(f"fitted slope of log Var(q·k) against log d_k: {fit[0]:.3f}")
metrics.update(
    variance_slope=fit[0], scaled_variance_mean=float(np.mean(study["var_scaled"])), largest_dk=d_ks[-1],
    max_weight_unscaled_largest_dk=study["max_weight_unscaled"][-1], max_weight_scaled_largest_dk=study["max_weight_scaled"][-1],
    entropy_unscaled_largest_dk=study["entropy_unscaled"][-1], entropy_scaled_largest_dk=study["entropy_scaled"][-1],
    jacobian_unscaled_largest_dk=study["jacobian_unscaled"][-1], jacobian_scaled_largest_dk=study["jacobian_scaled"][-1],
    jacobian_unscaled_smallest_dk=study["jacobian_unscaled"][0],
)

# %%
ex.predict("02.variance_factor", PREDICT_VARIANCE_FACTOR, 2 ** fit[0],
           "q·k is a sum of d_k independent products of variance 1, so its variance is d_k: it doubles with d_k "
           "(the fitted log-log slope is 1), and the typical score grows like sqrt(d_k)")

# %% [markdown]
# Without scaling, the largest weight creeps towards 1, the entropy falls towards 0 and the gradient shrinks as
# $d_k$ grows; with scaling, all three stay where they were at $d_k=4$. This is the paper's argument for the factor
# (its footnote 4 gives the variance computation).
#
# ## 4 · Additive versus dot-product attention
#
# Before the Transformer, a widely used score was Bahdanau's *additive* attention, a one-hidden-layer network applied to
# every (query, key) pair: $e_{ij} = v^\top \tanh(W_q q_i + W_k k_j)$. Its cost grows the same way,
# $O(T_q T_k d)$, but it needs a `(B, Tq, Tk, d)` hidden tensor and element-wise work on it, while the dot product
# is one matrix multiplication into a `(B, Tq, Tk)` matrix. The paper notes the two score functions do about
# equally well for small $d_k$ and that additive wins over *unscaled* dot products for large $d_k$, which is what the
# scaling repairs. Below: the FLOPs (analytic, and counted by PyTorch's FLOP counter on the matrix products) and
# the time on this machine.

# %%
batch = 4
timings = {"additive": [], "dot-product": []}
for T in seq_lens:
    q_, k_ = torch.randn(batch, T, d_hidden, generator=gen), torch.randn(batch, T, d_hidden, generator=gen)
    w_q_, w_k_, v_ = torch.randn(d_hidden, d_hidden, generator=gen), torch.randn(d_hidden, d_hidden, generator=gen), torch.randn(d_hidden, generator=gen)
    timings["additive"].append(median_seconds(lambda: additive_scores(q_, k_, w_q_, w_k_, v_), repeats))
    timings["dot-product"].append(median_seconds(lambda: dot_scores(q_, k_), repeats))
cost_add = score_cost("additive", batch, T, T, d_hidden)
cost_dot = score_cost("dot", batch, T, T, d_hidden)
counted_dot = counted_flops(lambda: dot_scores(q_, k_))
counted_add = counted_flops(lambda: additive_scores(q_, k_, w_q_, w_k_, v_))
figures.loglog_figure(seq_lens, timings, xlabel="sequence length T", ylabel="seconds (median)",
                      title=f"score matrix for batch {batch}, d = {d_hidden}").show()
figures.bar_figure(["additive", "dot-product"], [cost_add["flops"], cost_dot["flops"]], ylabel="FLOPs",
                   title=f"analytic FLOPs at T = {T}").show()
print(f"T={T}: additive {timings['additive'][-1]*1e3:.2f} ms vs dot-product {timings['dot-product'][-1]*1e3:.3f} ms")
print(f"FLOPs analytic: additive {cost_add['flops']:.3g}, dot {cost_dot['flops']:.3g}; counted matrix-product FLOPs: additive {counted_add:.3g}, dot {counted_dot:.3g}")
print(f"largest intermediate: additive {cost_add['largest_intermediate']:,} floats, dot {cost_dot['largest_intermediate']:,}")
metrics.update(
    additive_ms=timings["additive"][-1] * 1e3, dot_ms=timings["dot-product"][-1] * 1e3,
    additive_flops=cost_add["flops"], dot_flops=cost_dot["flops"], dot_flops_counted=counted_dot,
    additive_flops_counted=counted_add, intermediate_ratio=cost_add["largest_intermediate"] / cost_dot["largest_intermediate"],
)

# %% [markdown]
# ## 5 · What this notebook showed
# The metrics are written to `metrics.json`; the assertions restate the claims above as checks on the measurements.

# %%
metrics.update(ex.summary())  # every exercise's check and prediction, read back by `workbench notebooks grade`

# %%
with open("metrics.json", "w") as f:
    json.dump(metrics, f, indent=1)
assert metrics["example_rows_sum_to_one"] < 1e-6 and metrics["example_by_hand_difference"] < 1e-6
assert metrics["max_path_difference"] < 1e-5, metrics["max_path_difference"]      # hand = fused = explicit
assert metrics["padding_weight_max"] == 0.0                                        # padding keys get exactly 0
assert abs(metrics["variance_slope"] - 1) < 0.1, metrics["variance_slope"]         # Var(q·k) ∝ d_k
assert abs(metrics["scaled_variance_mean"] - 1) < 0.1                               # scaled back to ~1
assert metrics["max_weight_unscaled_largest_dk"] > metrics["max_weight_scaled_largest_dk"] + 0.3   # saturation
assert metrics["entropy_unscaled_largest_dk"] < 0.5 * metrics["entropy_scaled_largest_dk"]
assert metrics["jacobian_unscaled_largest_dk"] < 0.5 * metrics["jacobian_scaled_largest_dk"]     # vanishing gradient
assert metrics["jacobian_unscaled_largest_dk"] < metrics["jacobian_unscaled_smallest_dk"]
assert metrics["dot_flops_counted"] == metrics["dot_flops"]                         # the count matches 2·B·T²·d
assert metrics["additive_flops"] > metrics["dot_flops"] and metrics["intermediate_ratio"] == d_hidden
assert metrics["additive_flops_counted"] > metrics["dot_flops_counted"]             # counted by torch as well
if not SMOKE:  # wall-clock claims only at full size (tiny smoke sizes are dominated by overheads)
    assert metrics["additive_ms"] > metrics["dot_ms"], (metrics["additive_ms"], metrics["dot_ms"])

# %% [markdown]
# ## Try it
#
# * `workbench notebooks run --only 02 -p MAX_LOG2_DK=12` — key widths up to 4096: in section 3, how close does the
#   unscaled largest weight get to 1 and the unscaled Jacobian norm to 0, while the scaled curves stay flat?
# * `workbench notebooks run --only 02 -p N_KEYS=256` — a softmax over 256 keys instead of 16: the uniform entropy is
#   now $\log 256$; at which $d_k$ does the unscaled softmax start to saturate, compared with the default run?
# * `workbench notebooks run --only 02 -p D_HIDDEN=256` — a wider additive scorer: its `(B, Tq, Tk, d)` hidden tensor
#   grows with $d$ while the dot product's `(B, Tq, Tk)` score matrix does not (both cost $O(T^2 d)$ FLOPs); does the
#   timing ratio of section 4 move, and which way?
