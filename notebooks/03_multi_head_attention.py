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
# # 03 · Multi-head attention, taken apart
#
# One attention function gives every query **one** probability distribution over the keys. A token often needs
# several things at once (the word before it, the word it agrees with, the verb of its clause), and a single softmax
# row can only blend them into one average. The paper's answer is to run $h$ small attention functions side by
# side, each on its own learned projection of the same vectors, and to glue their results together:
#
# $$\mathrm{head}_i = \mathrm{Attention}(QW_i^Q,\; KW_i^K,\; VW_i^V),\qquad
#   \mathrm{MultiHead}(Q,K,V) = \mathrm{Concat}(\mathrm{head}_1,\dots,\mathrm{head}_h)\,W^O$$
#
# with $W_i^Q, W_i^K, W_i^V \in \mathbb{R}^{d_\text{model}\times d_\text{head}}$, $d_\text{head} = d_\text{model}/h$
# and $W^O \in \mathbb{R}^{h d_\text{head}\times d_\text{model}}$. In code the $h$ small projections are one big
# matrix whose output is *reshaped* into heads. This notebook does every step by hand, checks the result against
# the workbench's `MultiHeadAttention` and against `torch.nn.MultiheadAttention`, counts the parameters, builds a
# small example where each head visibly looks at something different, and finally does **cross-attention** (the
# decoder asking the encoder) by hand as well.

# %% tags=["parameters"]
SMOKE: bool = False  # smaller widths (what CI runs); every check is the same
SEED: int = 0  # seeds every random draw
D_MODEL: int = 64  # model width for the equality checks
N_HEADS: int = 8  # heads h (must divide D_MODEL)
BATCH: int = 3  # sentences per batch in the equality checks
SRC_LEN: int = 9  # encoder memory length S in the cross-attention check
TGT_LEN: int = 5  # decoder length T in the cross-attention check (differs from SRC_LEN on purpose)
SENTENCE: str = "the animal didn't cross the street because it was too tired"  # tokens of the designed-heads example
SHARPNESS: float = 40.0  # query scale of the designed heads: larger means more peaked weights

# %%
d_model = 32 if SMOKE else D_MODEL
n_heads = 4 if SMOKE else N_HEADS
d_head = d_model // n_heads
tokens = SENTENCE.split()
assert d_model % n_heads == 0, f"N_HEADS={N_HEADS} must divide D_MODEL={D_MODEL}"

# %%
import json, math
import torch
import workbench as wb
from workbench.viz import figures
figures.setup_offline_renderer()
wb.set_seed(SEED)
metrics = {}

# %%
from workbench.model.masks import padding_mask, causal_mask
torch.set_printoptions(precision=3, sci_mode=False)
gen = torch.Generator().manual_seed(SEED)
mha = wb.MultiHeadAttention(d_model, n_heads).eval()     # the workbench's block: packed in_proj_weight, out_proj
with torch.no_grad():                                     # give the (zero-initialised) biases values, so they count
    mha.in_proj_bias.normal_(0, 0.1, generator=gen)
    mha.out_proj.bias.normal_(0, 0.1, generator=gen)
print(mha)
print("in_proj_weight", tuple(mha.in_proj_weight.shape), "= [W^Q; W^K; W^V] stacked, each (h·d_head, d_model)")

# %% [markdown]
# ## 1 · Split, attend, concatenate, project — by hand
#
# Input: a batch of `BATCH` sequences of vectors, $X$ of shape `(B, T, d_model)`; the second sequence ends in two
# padding positions, which no query may attend to. The workbench stores $W^Q, W^K, W^V$ stacked in one
# `in_proj_weight` (as `torch.nn.MultiheadAttention` does), so one matrix product projects all three.
#
# The split into heads is only a reshape: the `d_model` output features of $XW^Q$ are read as `h` groups of
# `d_head`, and the head axis is moved in front of the time axis so that every head is a separate batch of
# ordinary attention.

# %%
T = 7
X = torch.randn(BATCH, T, d_model, generator=gen)                            # (B, T, d_model)
pad = torch.ones(BATCH, T, dtype=torch.bool); pad[1, -2:] = False            # (B, T) True = real token
mask = pad[:, None, None, :]                                                  # (B, 1, 1, Tk) broadcasts over H, Tq
W_q, W_k, W_v = mha.in_proj_weight.detach().chunk(3)                          # (h·d_head, d_model) each
b_q, b_k, b_v = mha.in_proj_bias.detach().chunk(3)
Q, K, V = X @ W_q.T + b_q, X @ W_k.T + b_k, X @ W_v.T + b_v                   # (B, T, d_model)
print("Q", tuple(Q.shape))

def split_heads(x):
    B, T_, _ = x.shape
    return x.view(B, T_, n_heads, d_head).transpose(1, 2)                     # (B, H, T, d_head)

Qh, Kh, Vh = split_heads(Q), split_heads(K), split_heads(V)
print("after the split:", tuple(Qh.shape), "= (B, H, T, d_head)")
assert Qh.shape == (BATCH, n_heads, T, d_head)
assert torch.equal(Qh[:, 2], Q[..., 2 * d_head:3 * d_head])                  # head 2 = feature slice 2 of Q

# %% [markdown]
# Each head now runs the attention of notebook 02 on its own `d_head`-wide queries and keys, so the scale is
# $1/\sqrt{d_\text{head}}$, not $1/\sqrt{d_\text{model}}$. The padding keys are set to $-\infty$ before the softmax.

# %%
scores = Qh @ Kh.transpose(-2, -1) / math.sqrt(d_head)                        # (B, H, Tq, Tk)
weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)    # (B, H, Tq, Tk)
heads = weights @ Vh                                                          # (B, H, T, d_head)
concat = heads.transpose(1, 2).reshape(BATCH, T, n_heads * d_head)            # (B, T, h·d_head): heads side by side
out_hand = concat @ mha.out_proj.weight.detach().T + mha.out_proj.bias.detach()   # (B, T, d_model)
print("per-head outputs", tuple(heads.shape), "-> concatenated", tuple(concat.shape), "-> W^O ->", tuple(out_hand.shape))
assert out_hand.shape == X.shape and torch.allclose(weights.sum(-1), torch.ones(BATCH, n_heads, T))
assert torch.equal(concat[..., d_head:2 * d_head], heads[:, 1])               # head 1 sits in features d_head..2·d_head

# %% [markdown]
# The same thing written the way the formula reads: $h$ separate small projections, one attention each, then
# `torch.cat`. Head $i$'s $W_i^Q$ is the block of columns $i\,d_\text{head}..(i+1)\,d_\text{head}$ of $W^Q$
# (PyTorch stores every weight transposed, as `(out, in)`, so in code it is a block of *rows*). It must agree with
# the reshape version, which is just a faster way of doing all heads in one product.

# %%
per_head = []
for i in range(n_heads):
    rows = slice(i * d_head, (i + 1) * d_head)
    q_i, k_i, v_i = X @ W_q[rows].T + b_q[rows], X @ W_k[rows].T + b_k[rows], X @ W_v[rows].T + b_v[rows]  # (B, T, d_head)
    w_i = torch.softmax((q_i @ k_i.transpose(-2, -1) / math.sqrt(d_head)).masked_fill(~pad[:, None, :], float("-inf")), -1)
    per_head.append(w_i @ v_i)                                                # (B, T, d_head)
loop_out = torch.cat(per_head, dim=-1) @ mha.out_proj.weight.detach().T + mha.out_proj.bias.detach()
metrics["loop_vs_reshape_max_diff"] = float((loop_out - out_hand).abs().max())
print(f"one head at a time vs one reshape: max |diff| = {metrics['loop_vs_reshape_max_diff']:.1e}")

# %% [markdown]
# ## Your turn: the three pieces of multi-head attention
#
# Each check tries your function on random inputs and edge cases (batch 1, length 1, one head, odd head counts such as 3 and 5, float64).

# %% [markdown]
# ### Exercise 03.split_heads · `to_heads`
#
# Cut the feature axis into `n_heads` contiguous slices of width $d_{head} = D/h$ and put the head axis before the positions, so that attention runs over the positions within each head.
#
# Shapes: `x` (B, T, D) → (B, H, T, D/H).

# %% tags=["exercise", "hide-input"]
def to_heads(x, n_heads):
    """(B, T, D) -> (B, H, T, D/H): head h owns features h*d_head ... (h+1)*d_head - 1."""
    # BEGIN SOLUTION NO PROMPT
    B, T, D = x.shape
    return x.view(B, T, n_heads, D // n_heads).transpose(1, 2)  # (B, T, H, d_head) -> (B, H, T, d_head)
    # END SOLUTION
    """ # BEGIN PROMPT
    raise NotImplementedError("write to_heads, then run the check below")
    """  # END PROMPT

# %%
from workbench.lessons import exercises as ex  # the checks: ex.check runs your function against the package's
result = ex.check("03.split_heads", to_heads)
to_heads = result.function  # yours if it passed, else the package's: the cells below work either way
result

# %% [markdown]
# ### Exercise 03.merge_heads · `merge_heads`
#
# The inverse: concatenate the heads' outputs along the features at every position, $\mathrm{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_h)$.
#
# Shapes: `z` (B, H, T, d_v) → (B, T, H·d_v).

# %% tags=["exercise", "hide-input"]
def merge_heads(z):
    """(B, H, T, d_v) -> (B, T, H*d_v): the heads side by side at each position."""
    # BEGIN SOLUTION NO PROMPT
    B, H, T, Dv = z.shape
    return z.transpose(1, 2).reshape(B, T, H * Dv)  # (B, T, H, d_v) -> (B, T, H*d_v)
    # END SOLUTION
    """ # BEGIN PROMPT
    raise NotImplementedError("write merge_heads, then run the check below")
    """  # END PROMPT

# %%
result = ex.check("03.merge_heads", merge_heads)
merge_heads = result.function  # yours if it passed, else the package's: the cells below work either way
result

# %% [markdown]
# ### Exercise 03.multi_head_attention · `multi_head_attention`
#
# Self-attention with $h$ heads: $Q = xW^Q$, $K = xW^K$, $V = xW^V$, split into heads, scaled dot-product attention in each head (mask True = may attend), heads concatenated, times $W^O$:
#
# $$\mathrm{MultiHead}(x) = \mathrm{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_h)W^O,\quad \mathrm{head}_i = \mathrm{softmax}\!\left(\frac{Q_iK_i^\top}{\sqrt{d_{head}}}\right)V_i$$
#
# Shapes: `x` (B, T, D), each `W_*` (D, D), `mask` (B, 1, 1, T) or None → (B, T, D). Use your two functions above. (`to_heads` is the `split_heads` of section 1 with the head count as an argument.)

# %% tags=["exercise", "hide-input"]
def multi_head_attention(x, W_q, W_k, W_v, W_o, n_heads, mask=None):
    """Concat(head_1..head_h) W_o. Shapes: x (B, T, D), W_* (D, D) -> (B, T, D)."""
    # BEGIN SOLUTION NO PROMPT
    q, k, v = (to_heads(x @ W, n_heads) for W in (W_q, W_k, W_v))   # (B, H, T, d_head) each
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])             # (B, H, T, T)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return merge_heads(torch.softmax(scores, dim=-1) @ v) @ W_o           # (B, T, D)
    # END SOLUTION
    """ # BEGIN PROMPT
    raise NotImplementedError("write multi_head_attention, then run the check below")
    """  # END PROMPT

# %%
result = ex.check("03.multi_head_attention", multi_head_attention)
multi_head_attention = result.function  # yours if it passed, else the package's: the cells below work either way
result

# %% [markdown]
# **Predict, then run.** Section 3 counts the parameters of one multi-head block at a fixed `d_model`. How many times more parameters has a block with 8 heads than a block with 1 head? Write your prediction in the next cell before you run the cells after it (leave `None` to skip: the lesson runs either way).

# %% tags=["answer"]
PREDICT_PARAMS_RATIO: float | None = None  # parameters with 8 heads / parameters with 1 head

# %% [markdown]
# ## 2 · The same numbers from the workbench and from `torch.nn.MultiheadAttention`
#
# `torch.nn.MultiheadAttention` keeps its weights in the same layout (`in_proj_weight`, `in_proj_bias`,
# `out_proj`), so the workbench's tensors can be copied into it. Two differences need care:
#
# * its boolean masks mean the **opposite**: `True` = *blocked*, where the workbench (and
#   `F.scaled_dot_product_attention`) use `True` = *may attend*. `wb.to_nn_mask` converts at the boundary;
# * by default it **averages** the attention weights over the heads (`average_attn_weights=True`), which hides
#   exactly what we want to look at; we ask for per-head weights.
#
# The comparison is made twice: with the padding mask, and with a causal mask (decoder self-attention) on top.

# %%
ref = torch.nn.MultiheadAttention(d_model, n_heads, bias=True, batch_first=True).eval()
with torch.no_grad():
    ref.in_proj_weight.copy_(mha.in_proj_weight)
    ref.in_proj_bias.copy_(mha.in_proj_bias)
    ref.out_proj.weight.copy_(mha.out_proj.weight)
    ref.out_proj.bias.copy_(mha.out_proj.bias)
    out_wb, w_wb = mha(X, mask=mask, need_weights=True)                       # (B, T, d_model), (B, H, T, T)
    out_fused, _ = mha(X, mask=mask)                                          # fused kernel, no weights
    out_nn, w_nn = ref(X, X, X, key_padding_mask=wb.to_nn_mask(pad), need_weights=True, average_attn_weights=False)
    causal = causal_mask(T)                                                   # (T, T) True = may attend
    out_wb_c, w_wb_c = mha(X, mask=mask & causal, need_weights=True)
    out_nn_c, w_nn_c = ref(X, X, X, key_padding_mask=wb.to_nn_mask(pad), attn_mask=wb.to_nn_mask(causal),
                           need_weights=True, average_attn_weights=False)

# %% [markdown]
# The largest difference of each pair:

# %%
diffs = {
    "hand vs workbench (explicit)": (out_hand - out_wb).abs().max(),
    "hand vs workbench (fused)": (out_hand - out_fused).abs().max(),
    "hand vs torch.nn": (out_hand - out_nn).abs().max(),
    "weights: hand vs workbench": (weights - w_wb).abs().max(),
    "weights: hand vs torch.nn": (weights - w_nn).abs().max(),
    "causal: workbench vs torch.nn": (out_wb_c - out_nn_c).abs().max(),
    "causal weights: workbench vs torch.nn": (w_wb_c - w_nn_c).abs().max(),
}
for name, d in diffs.items():
    print(f"{name:40s} max |diff| = {float(d):.1e}")
print("torch.nn weights shape with average_attn_weights=False:", tuple(w_nn.shape), "(B, H, Tq, Tk)")
metrics["max_diff_vs_workbench"] = float(max(diffs[k] for k in diffs if "workbench" in k and "torch" not in k))
metrics["max_diff_vs_torch_nn"] = float(max(diffs[k] for k in diffs if "torch" in k))
metrics["padding_weight_max"] = float(w_wb[1, ..., -2:].abs().max())

# %% [markdown]
# The mask convention matters: `torch.nn` reads `True` as *ignore*, ours as *may attend*. Passing our mask to it
# unconverted blocks the real tokens instead of the padding:

# %%
with torch.no_grad():  # the mask convention matters: passing our mask unconverted blocks the real tokens instead
    out_wrong, _ = ref(X, X, X, key_padding_mask=pad, need_weights=False)
metrics["unconverted_mask_diff"] = float((out_wrong[1] - out_hand[1]).abs().max())  # sentence 2: real and padded keys
print(f"same call with our mask NOT converted: max |diff| on sentence 2 = {metrics['unconverted_mask_diff']:.2f}")

# %% [markdown]
# ## 3 · More heads cost no more parameters
#
# Splitting into heads changes how the projected features are *grouped*, not how many there are: $W^Q, W^K, W^V$
# are always $d_\text{model}\times h\,d_\text{head} = d_\text{model}\times d_\text{model}$, and $W^O$ is
# $d_\text{model}\times d_\text{model}$, so with biases a block has $4d_\text{model}^2 + 4d_\text{model}$
# parameters for any $h$, exactly what one full-width head ($h=1$, $d_\text{head}=d_\text{model}$) has.
# The matrix products cost the same too; what changes is that the $T\times T$ weights are computed $h$ times,
# each from a $d_\text{head}$-wide dot product.

# %%
head_counts = [h for h in (1, 2, 4, 8, 16, 32) if d_model % h == 0]
counts = {h: wb.count_parameters(wb.MultiHeadAttention(d_model, h)) for h in head_counts}
formula = 4 * d_model**2 + 4 * d_model
nn_count = wb.count_parameters(torch.nn.MultiheadAttention(d_model, n_heads, batch_first=True))
print(f"4·d_model² + 4·d_model = {formula:,}; torch.nn.MultiheadAttention: {nn_count:,}")
for h, c in counts.items():
    print(f"  h = {h:2d}, d_head = {d_model // h:3d}: {c:,} parameters")
figures.bar_figure([str(h) for h in counts], list(counts.values()), xlabel="heads h", ylabel="parameters",
                   title=f"parameters of one multi-head block, d_model = {d_model}").show()
metrics.update(param_counts_equal=len(set(counts.values())) == 1, param_count=counts[n_heads], param_formula=formula,
               nn_param_count=nn_count, head_counts_compared=len(counts))

# %%
ex.predict("03.params_ratio", PREDICT_PARAMS_RATIO,
           wb.count_parameters(wb.MultiHeadAttention(64, 8)) / wb.count_parameters(wb.MultiHeadAttention(64, 1)),
           "the same four d_model x d_model matrices are cut into h slices of width d_model/h: more heads "
           "share the width, they do not add parameters")

# %% [markdown]
# ## 4 · What each head sees: heads built by hand
#
# Trained heads are studied in notebook 09. Here the point is the mechanism, so the weights are **set by hand** on
# an embedding that can be read directly: each token of `SENTENCE` is the concatenation of a one-hot code of its
# word and a one-hot code of its position (padded with zeros up to `d_model`). Four heads, four different query/key
# projections of the *same* vectors:
#
# * head 0, **previous word**: its queries are the position code shifted by one, its keys the position code;
# * head 1, **same word**: queries and keys are the word code, so a word finds its repetitions;
# * head 2, **next word**: the shift in the other direction;
# * head 3, **everything**: a zero query, so every score is 0 and the softmax is uniform (a bag of words).
#
# Every head's values are the word code, and $W^O$ is the identity, so the output of each token lists, block by
# block, the word before it, itself, the word after it, and the average of the sentence. A query scale of
# `SHARPNESS` makes a designed score $s = $ `SHARPNESS`$/\sqrt{d_\text{head}}$ for the wanted key and 0 for the
# others, so the weight on it must be exactly $e^{s}/(e^{s} + T - 1)$.

# %%
words = sorted(set(tokens))
n_tok, n_words = len(tokens), len(words)
block = n_tok                                    # width of each one-hot code (a sentence has at most T distinct words)
d_toy, h_toy = 4 * block, 4                      # four heads of width d_head = block
word_id = torch.tensor([words.index(w) for w in tokens])
E = torch.zeros(n_tok, d_toy)                                                 # (T, d_model) the readable embedding
E[torch.arange(n_tok), word_id] = 1.0                                         # word code in features 0..block
E[torch.arange(n_tok), block + torch.arange(n_tok)] = 1.0                     # position code in block..2·block
eye, shift = torch.eye(block), torch.diag(torch.ones(block - 1), -1)          # shift @ onehot(t) = onehot(t + 1)
word_part, pos_part = slice(0, block), slice(block, 2 * block)
W = {name: torch.zeros(h_toy, block, d_toy) for name in ("q", "k", "v")}     # per head (d_head, d_model)
W["q"][0][:, pos_part], W["k"][0][:, pos_part] = SHARPNESS * shift.T, eye     # previous: query code t-1
W["q"][1][:, word_part], W["k"][1][:, word_part] = SHARPNESS * eye, eye       # same word
W["q"][2][:, pos_part], W["k"][2][:, pos_part] = SHARPNESS * shift, eye       # next: query code t+1
# head 3 keeps W^Q = 0: uniform weights
for h in range(h_toy):
    W["v"][h][:, word_part] = eye                                              # every head passes on the word code

# %% [markdown]
# The four heads' projections go into one `MultiHeadAttention` (stacked as its packed $W^Q, W^K, W^V$, with an
# identity $W^O$), which then runs on the readable embedding:

# %%
toy = wb.MultiHeadAttention(d_toy, h_toy, bias=False).eval()
with torch.no_grad():
    toy.in_proj_weight.copy_(torch.cat([W[n].reshape(h_toy * block, d_toy) for n in ("q", "k", "v")]))
    toy.out_proj.weight.copy_(torch.eye(d_toy))
    toy_out, toy_w = toy(E[None], need_weights=True)                          # (1, T, d_model), (1, H, T, T)
toy_w, toy_out = toy_w[0], toy_out[0]
figures.head_grid(toy_w, tokens, tokens, title="what each head sees: 0 previous word, 1 same word, 2 next word, 3 everything").show()
figures.attention_heatmap(toy_w.mean(0), tokens, tokens,
                          title="the same four heads averaged (torch.nn's default average_attn_weights=True)").show()
print("embedding", tuple(E.shape), "| weights", tuple(toy_w.shape), "| output", tuple(toy_out.shape))
assert toy_w.shape == (h_toy, n_tok, n_tok)

# %% [markdown]
# Reading the output back: in block 0 each token now holds the word before it, in block 2 the word after it. One
# softmax could not have done this: to collect both neighbours it would have to split its weight between them and
# would return their *average*, with no way to tell which one came first.

# %%
s = SHARPNESS / math.sqrt(block)
expected_peak = math.exp(s) / (math.exp(s) + n_tok - 1)
prev_w = toy_w[0, torch.arange(1, n_tok), torch.arange(0, n_tok - 1)]        # weight of token t on token t-1
next_w = toy_w[2, torch.arange(0, n_tok - 1), torch.arange(1, n_tok)]
same = (word_id[:, None] == word_id[None, :]).float()                        # (T, T) 1 where the words match
reps = same.sum(-1)                                                           # (T,) occurrences of each token's word
expected_same = reps * math.exp(s) / (reps * math.exp(s) + n_tok - reps)      # r·e^s / (r·e^s + T - r)
read_prev = toy_out[1:, 0:block].argmax(-1)                                   # word code read from block 0
read_next = toy_out[:-1, 2 * block:3 * block].argmax(-1)
for t in range(1, 4):
    print(f"{tokens[t]!r}: block 0 reads {words[int(read_prev[t - 1])]!r} (weight {float(prev_w[t - 1]):.4f}), "
          f"block 2 reads {words[int(toy_out[t, 2 * block:3 * block].argmax())]!r}")
print(f"expected weight on the designed key: e^s/(e^s + T - 1) = {expected_peak:.4f} with s = {s:.2f}")
metrics.update(
    toy_prev_weight_error=float((prev_w - expected_peak).abs().max()),
    toy_next_weight_error=float((next_w - expected_peak).abs().max()),
    toy_same_word_error=float(((toy_w[1] * same).sum(-1) - expected_same).abs().max()),
    toy_repeated_words=int((reps > 1).sum()),
    toy_uniform_error=float((toy_w[3] - 1 / n_tok).abs().max()),
    toy_reads_previous_word=bool(torch.equal(read_prev, word_id[:-1])),
    toy_reads_next_word=bool(torch.equal(read_next, word_id[1:])),
    toy_expected_peak=expected_peak,
    toy_head_max_weight=float(toy_w[0].max()),
    toy_averaged_max_weight=float(toy_w.mean(0).max()),
)

# %% [markdown]
# ## 5 · Cross-attention by hand: the decoder asks, the encoder answers
#
# In the decoder's second sub-layer the **queries** come from the decoder's own states (one per target position),
# while the **keys and values** are projections of the encoder output, the *memory* (one per source position).
# Nothing else changes, but the weight matrix is now target × source, `(B, H, T, S)`, and it is rectangular:
# `TGT_LEN` ≠ `SRC_LEN`. Source padding is masked; there is no causal mask here, since the whole source is known.
#
# Below, the memory is the real output of a (freshly initialised) workbench Transformer's encoder, the decoder
# state is what its first decoder layer feeds to its cross-attention, and the by-hand computation is compared with
# the weights that `wb.capture_attention` records while the model itself runs.

# %%
cfg = wb.ModelConfig(d_model=d_model, n_heads=n_heads, d_ff=2 * d_model, n_enc_layers=2, n_dec_layers=2, dropout=0.0, max_len=64)
model = wb.build_model(cfg, 50, 50, pad_id=0).eval()
src = torch.randint(4, 50, (BATCH, SRC_LEN), generator=gen); src[1, -3:] = 0   # sentence 2 has 3 padding tokens
tgt = torch.randint(4, 50, (BATCH, TGT_LEN), generator=gen)
layer = model.decoder_layers[0]
with torch.no_grad(), wb.capture_attention(model, kinds=["dec.cross"], layers=[0]) as cache:
    logits = model(src, tgt)
    memory = model.encode(src)                                                # (B, S, d_model)
    x = model.tgt_embed(tgt)                                                  # (B, T, d_model)
    y = layer.norm1(x + layer.self_attn(x, is_causal=True)[0])                # decoder state after masked self-attention (post-LN)
ca = layer.cross_attn
Wq, Wk, Wv = ca.in_proj_weight.detach().chunk(3)
bq, bk, bv = ca.in_proj_bias.detach().chunk(3)
q = split_heads(y @ Wq.T + bq)                                                # (B, H, T, d_head) from the decoder
k, v = split_heads(memory @ Wk.T + bk), split_heads(memory @ Wv.T + bv)       # (B, H, S, d_head) from the encoder
src_pad = padding_mask(src, 0)[:, None, None, :]                              # (B, 1, 1, S)
cross_w = torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(d_head)).masked_fill(~src_pad, float("-inf")), -1)  # (B, H, T, S)
cross_out = (cross_w @ v).transpose(1, 2).reshape(BATCH, TGT_LEN, d_model) @ ca.out_proj.weight.detach().T + ca.out_proj.bias.detach()

# %% [markdown]
# Against the package's own cross-attention module, and the weights captured from the whole model:

# %%
with torch.no_grad():
    wb_out, wb_w = ca(y, memory, mask=src_pad, need_weights=True)
print("cross-attention weights:", tuple(cross_w.shape), "= (B, H, T, S); captured from the model:", tuple(cache["dec.cross", 0].shape))
figures.head_grid(cross_w[1], [f"y{t}" for t in range(TGT_LEN)], [f"x{s}" if src[1, s] else "<pad>" for s in range(SRC_LEN)],
                  title="cross-attention of sentence 2 (untrained model): target rows, source columns").show()
assert cross_w.shape == (BATCH, n_heads, TGT_LEN, SRC_LEN)
metrics.update(
    cross_max_diff_vs_module=float(max((cross_out - wb_out).abs().max(), (cross_w - wb_w).abs().max())),
    cross_max_diff_vs_capture=float((cross_w - cache["dec.cross", 0]).abs().max()),
    cross_padding_weight_max=float(cross_w[1, ..., -3:].abs().max()),
    cross_shape=list(cross_w.shape),
)

# %% [markdown]
# And against `torch.nn.MultiheadAttention` loaded with the same weights (its padding mask is the opposite convention:
# `True` = ignore, hence `to_nn_mask`):

# %%
ref_cross = torch.nn.MultiheadAttention(d_model, n_heads, batch_first=True).eval()
ref_cross.load_state_dict({"in_proj_weight": ca.in_proj_weight, "in_proj_bias": ca.in_proj_bias,
                           "out_proj.weight": ca.out_proj.weight, "out_proj.bias": ca.out_proj.bias})
with torch.no_grad():
    nn_cross, nn_cross_w = ref_cross(y, memory, memory, key_padding_mask=wb.to_nn_mask(padding_mask(src, 0)),
                                     average_attn_weights=False)
metrics["cross_max_diff_vs_torch_nn"] = float(max((nn_cross - cross_out).abs().max(), (nn_cross_w - cross_w).abs().max()))
print({k_: f"{v_:.1e}" for k_, v_ in metrics.items() if k_.startswith("cross_max")})

# %% [markdown]
# ## 6 · What this notebook showed
#
# The assertions restate the claims above as checks on what was computed. Equalities are in float32, where
# reordering the sums of a `d_model`-wide product moves results by about $10^{-7}$ relative; `1e-5` leaves room
# for that and nothing else (a wrong head order, a missing bias or the unscaled $1/\sqrt{d_\text{model}}$ all
# give differences of order $10^{-1}$).

# %%
metrics.update(ex.summary())  # every exercise's check and prediction, read back by `workbench notebooks grade`

# %%
with open("metrics.json", "w") as f:
    json.dump(metrics, f, indent=1)
assert metrics["loop_vs_reshape_max_diff"] < 1e-5                  # h small projections = one reshaped projection
assert metrics["max_diff_vs_workbench"] < 1e-5                     # by hand = wb.MultiHeadAttention (both paths)
assert metrics["max_diff_vs_torch_nn"] < 1e-5                      # = torch.nn.MultiheadAttention (converted mask)
assert metrics["padding_weight_max"] == 0.0                        # padding keys get exactly zero weight
assert metrics["unconverted_mask_diff"] > 1e-2                     # the conventions really are opposite
assert metrics["param_counts_equal"] and metrics["head_counts_compared"] >= 3
assert metrics["param_count"] == metrics["param_formula"] == metrics["nn_param_count"]   # 4·d² + 4·d for any h
assert metrics["toy_prev_weight_error"] < 1e-5 and metrics["toy_next_weight_error"] < 1e-5   # e^s/(e^s+T-1) exactly
assert metrics["toy_same_word_error"] < 1e-5                        # same-word head: r·e^s/(r·e^s+T-r) on the repetitions
assert metrics["toy_uniform_error"] < 1e-6                         # zero query: uniform 1/T
if metrics["toy_expected_peak"] > 0.5:  # the wanted word then outweighs all others together, so it must be read back
    assert metrics["toy_reads_previous_word"] and metrics["toy_reads_next_word"]   # both neighbours at once
# averaging blurs the heads: the previous- and next-word heads never peak on the same key, so at most two of the
# four heads (one of them the same-word head) peak on any key and the average is about half a head's peak or less
assert metrics["toy_averaged_max_weight"] < 0.6 * metrics["toy_head_max_weight"]
assert metrics["cross_max_diff_vs_module"] < 1e-5 and metrics["cross_max_diff_vs_capture"] < 1e-5
assert metrics["cross_max_diff_vs_torch_nn"] < 1e-5
assert metrics["cross_padding_weight_max"] == 0.0 and metrics["cross_shape"] == [BATCH, n_heads, TGT_LEN, SRC_LEN]

# %% [markdown]
# ## Try it
#
# * `workbench notebooks run --only 03 -p N_HEADS=1` — a single full-width head: every equality still holds and the
#   parameter count in section 3 does not move; the weight tensors have one head instead of eight.
# * `workbench notebooks run --only 03 -p SHARPNESS=4` — the designed heads soften: the weight on the wanted key falls
#   to $e^s/(e^s+T-1)$ with a small $s$, and the output blocks of section 4 become blends of the whole sentence.
# * `workbench notebooks run --only 03 -p SENTENCE="a dog and a cat and a bird"` — repeated words: the same-word head
#   splits its weight evenly over every repetition, while the previous/next heads stay one-to-one.
