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
# # 05 · Masks: padding, the future, and what the decoder may see
#
# Attention lets every query look at every key. Two kinds of keys must be hidden from it.
#
# * **Padding.** Sentences in a batch have different lengths, so the short ones are filled up with a `<pad>`
#   token. Padding carries no meaning and must receive no attention.
# * **The future.** In training the decoder is given the whole reference translation at once (*teacher forcing*)
#   and predicts every next token in parallel. Position $t$ must therefore be kept from seeing positions after
#   $t$, or it could simply read the answer.
#
# Both are boolean masks (in the workbench, `True` = *may attend*). They are applied to the scores before the
# softmax by writing $-\infty$ where attention is not allowed; $e^{-\infty} = 0$, so those weights come out as exact
# zeros. This notebook draws the masks, checks the zeros, shows the one-position shift of teacher forcing, proves
# that no information leaks from the future, and shows that step-by-step decoding with a key/value cache computes
# the same thing.

# %% tags=["parameters"]
SMOKE: bool = False  # tiny model (what CI runs)
SEED: int = 0  # seeds every random draw
SOURCE: str = "Zwei Hunde spielen im tiefen Schnee ."  # first source sentence
TARGET: str = "Two dogs play in the deep snow ."  # its translation
SHORT_SOURCE: str = "Ein Hund läuft ."  # a shorter second sentence, so the batch needs padding
SHORT_TARGET: str = "A dog runs ."  # its translation
LEAK_POSITION: int = 3  # target tokens after this position are changed in the leak test
PRESET: str = "small"  # model size for the leak and cache checks (SMOKE uses "tiny")
MAX_EXTRA: int = 20  # greedy decoding budget beyond the source length

# %%
preset_name = "tiny" if SMOKE else PRESET

# %%
import json
import numpy as np
import torch
import workbench as wb
from workbench.viz import figures
figures.setup_offline_renderer()
wb.set_seed(SEED)
metrics = {}

# %%
from IPython.display import Markdown, display
from workbench.viz.figures import markdown_table
from workbench.model.masks import padding_mask, causal_mask, attention_mask
from workbench.lessons.causality import future_leak_check, decoder_dependency, incremental_logits
from workbench.lessons.measure import median_seconds
from workbench.translation.batching import make_batch
from workbench.translation.tokenizer import WordTokenizer
pairs = [(SOURCE, TARGET), (SHORT_SOURCE, SHORT_TARGET)]
tok = WordTokenizer.train(pairs)
batch = make_batch(tok.encode_src([s for s, _ in pairs]), tok.encode_tgt([t for _, t in pairs]), tok.pad_id)
src_tok = [[tok.id_to_token(i, "src") for i in row] for row in batch.src.tolist()]
tin_tok = [[tok.id_to_token(i, "tgt") for i in row] for row in batch.tgt_in.tolist()]
tout_tok = [[tok.id_to_token(i, "tgt") for i in row] for row in batch.tgt_out.tolist()]
S, T = batch.src.shape[1], batch.tgt_in.shape[1]
print("source ids:\n", batch.src, "\nsource tokens:", *src_tok, sep="\n")

# %% [markdown]
# ## The masks as matrices
#
# Rows are queries, columns are keys; blue cells may attend. For the second (shorter) sentence of the batch:
#
# * **encoder self-attention**: every source position may look at every real source token, never at `<pad>`;
# * **decoder self-attention**: causal, position $t$ sees positions $0..t$ only;
# * **causal + padding**: the two combined (the padded target queries at the bottom are ignored by the loss anyway);
# * **cross-attention**: each target position may look at every real source token (a target × source matrix).

# %%
src_pad = padding_mask(batch.src, tok.pad_id)                       # (B, S) True at real tokens
tgt_pad = padding_mask(batch.tgt_in, tok.pad_id)                    # (B, T)
masks = {
    "encoder self (padding)": attention_mask(src_pad)[1, 0].expand(S, S),                  # (S, S)
    "decoder self (causal)": causal_mask(T),                                                # (T, T)
    "decoder self (causal + padding)": attention_mask(tgt_pad, causal=True, Tq=T)[1, 0],    # (T, T)
    "cross (target → source)": attention_mask(src_pad)[1, 0].expand(T, S),                 # (T, S)
}
figures.masks_side_by_side(masks, title="True = may attend (second sentence of the batch)", cell_px=20).show()
figures.mask_figure(masks["cross (target → source)"], tin_tok[1], src_tok[1], title="cross-attention mask with tokens").show()
metrics["padding_keys_blocked"] = bool((~masks["cross (target → source)"][:, batch.src[1] == tok.pad_id]).all())
metrics["causal_is_lower_triangular"] = bool(torch.equal(masks["decoder self (causal)"], torch.ones(T, T).tril().bool()))

# %% [markdown]
# The explorer below builds the same combined mask with the workbench's one helper (`attention_mask`) for a sentence of
# `T` positions: move the number of real tokens and switch the causal part on and off. With padding alone every row
# is the same; with the causal part the visible keys form a staircase that stops at the last real token.

# %%
from workbench.viz.lesson_widgets import mask_explorer
mask_explorer(length=T)

# %% [markdown]
# ## Your turn: the two masks
#
# Both masks are boolean with **True = may attend**, the convention of `F.scaled_dot_product_attention` (`torch.nn.Transformer` uses the opposite).

# %% [markdown]
# ### Exercise 05.padding_mask · `padding_mask`
#
# True at real tokens, False at padding.
#
# Shapes: `tokens` (B, T) integer ids, `pad_id` an int → (B, T) bool.

# %% tags=["exercise", "hide-input"]
def padding_mask(tokens, pad_id):
    """True at real tokens. Shapes: (B, T) -> (B, T) bool."""
    # BEGIN SOLUTION NO PROMPT
    return tokens != pad_id
    # END SOLUTION
    """ # BEGIN PROMPT
    raise NotImplementedError("write padding_mask, then run the check below")
    """  # END PROMPT

# %%
from workbench.lessons import exercises as ex  # the checks: ex.check runs your function against the package's
result = ex.check("05.padding_mask", padding_mask)
padding_mask = result.function  # yours if it passed, else the package's: the cells below work either way
result

# %% [markdown]
# ### Exercise 05.causal_mask · `causal_mask`
#
# Query $i$ may attend to keys $j \le i$: itself and the past, never the future.
#
# Shapes: `T` an int → (T, T) bool.

# %% tags=["exercise", "hide-input"]
def causal_mask(T):
    """True where key j <= query i. Shapes: -> (T, T) bool."""
    # BEGIN SOLUTION NO PROMPT
    return torch.ones(T, T, dtype=torch.bool).tril()
    # END SOLUTION
    """ # BEGIN PROMPT
    raise NotImplementedError("write causal_mask, then run the check below")
    """  # END PROMPT

# %%
result = ex.check("05.causal_mask", causal_mask)
causal_mask = result.function  # yours if it passed, else the package's: the cells below work either way
result

# %% [markdown]
# **Predict, then run.** How many entries of a 10 × 10 causal mask are True (may attend)? Write your prediction in the next cell before you run the cells after it (leave `None` to skip: the lesson runs either way).

# %% tags=["answer"]
PREDICT_CAUSAL_TRUE: int | None = None  # the number of True entries of causal_mask(10)

# %%
ex.predict("05.causal_true", PREDICT_CAUSAL_TRUE, int(causal_mask(10).sum()),
           "query i (counting from 1) sees keys 1..i, so the mask holds 1 + 2 + ... + 10 = 10·11/2 = 55 "
           "Trues: a little over half of the 100 pairs")

# %% [markdown]
# ## $-\infty$ before the softmax gives exact zeros after
#
# Random scores for the target length, blocked cells set to $-\infty$, softmax along each row. The blocked weights are
# exactly `0.0` (not merely small), and each row still sums to one over what it may see. A query with *no*
# visible key would be a row of $-\infty$, for which a plain softmax returns NaN; the workbench defines its weights
# as zeros instead.

# %%
scores = torch.randn(T, T, generator=torch.Generator().manual_seed(SEED))
blocked = scores.masked_fill(~causal_mask(T), float("-inf"))
w = torch.softmax(blocked, dim=-1)
print(np.array2string(w.numpy(), precision=3, suppress_small=True))
empty = torch.zeros(1, 1, 1, 4, dtype=torch.bool)                   # a query that may see nothing
plain = torch.softmax(torch.randn(1, 1, 1, 4).masked_fill(~empty, float("-inf")), -1)
ours = wb.attention_weights(torch.randn(1, 1, 1, 8), torch.randn(1, 1, 4, 8), mask=empty)
print("fully masked row: plain softmax ->", plain.flatten().tolist(), "| workbench ->", ours.flatten().tolist())
metrics.update(future_weights_exactly_zero=bool((w.triu(1) == 0).all()), rows_sum_error=float((w.sum(-1) - 1).abs().max()),
               plain_softmax_nan_on_empty_row=bool(plain.isnan().all()), workbench_zero_on_empty_row=bool((ours == 0).all()))

# %% [markdown]
# ## Teacher forcing and the one-position shift
#
# The decoder's input is the reference shifted one step to the right: it starts with `<bos>` and drops the last
# token. The label at each position is the token that comes next, ending with `<eos>`. So position $t$ reads
# $y_0..y_{t-1}$ (thanks to the causal mask, and nothing more) and is trained to output $y_t$: every position of the
# sentence is a training example, all computed in one pass.

# %%
n_real = int(tgt_pad[0].sum())
rows = [{"position": t, "decoder sees": " ".join(tin_tok[0][: t + 1]), "input token": tin_tok[0][t], "label": tout_tok[0][t]}
        for t in range(n_real)]
display(Markdown(markdown_table(rows)))
metrics["shift_ok"] = (batch.tgt_in[0, 1:n_real].tolist() == batch.tgt_out[0, : n_real - 1].tolist()
                       and tin_tok[0][0] == "<bos>" and tout_tok[0][n_real - 1] == "<eos>")

# %% [markdown]
# ## No leak from the future
#
# A freshly initialised model is enough to test the wiring (no training needed): change every target token after
# position `LEAK_POSITION` and run the model again. The logits at positions $0..$`LEAK_POSITION` must be identical
# bit for bit, while the later ones change. The figure below measures the same thing for every pair of positions
# with autograd: how strongly the output at position $t$ (row) depends on the decoder input at position $s$
# (column). Everything above the diagonal is exactly zero.

# %%
model = wb.build_model(wb.preset(preset_name, dropout=0.0), tok.src_vocab_size, tok.tgt_vocab_size, pad_id=tok.pad_id).eval()
leak = future_leak_check(model, batch.src, batch.tgt_in, LEAK_POSITION, generator=torch.Generator().manual_seed(SEED))
print("changed decoder input:", [tok.id_to_token(i) for i in leak["tgt_changed"][0].tolist()])
print(f"positions 0..{LEAK_POSITION}: identical = {leak['past_identical']} (max diff {leak['past_max_diff']:.1e}); "
      f"later positions: max diff {leak['future_max_diff']:.2f}")
dep = decoder_dependency(model, batch.src[:1], batch.tgt_in[:1])          # (T, T)
figures.attention_heatmap(dep / dep.max(), tin_tok[0], tin_tok[0], title="dependence of output t (row) on input s (column)").show()
metrics.update(no_leak=leak["past_identical"], past_max_diff=leak["past_max_diff"], future_changes=leak["future_max_diff"] > 0,
               dependency_upper_max=float(dep.triu(1).abs().max()), dependency_lower_min=float(dep.tril().diagonal().min()))

# %% [markdown]
# ## Your turn: a key/value cache and the greedy loop
#
# Decoding one token at a time, the keys and values of earlier positions never change, so they can be kept instead of recomputed. Write one decoding step of single-head causal self-attention with a cache; the check runs it step by step over a sequence and compares every step with the package's full causal attention.

# %% [markdown]
# ### Exercise 05.attend_with_cache · `attend_with_cache`
#
# Project the new position ($q = x W_q$, $k = x W_k$, $v = x W_v$), append its key and value to `cache.k` and `cache.v` (None before the first step; concatenate along the positions), then attend from $q$ to every cached position, itself included: $\mathrm{softmax}(qK^\top/\sqrt{D})V$.
#
# Shapes: `x_new` (B, 1, D), `cache.k`, `cache.v` (B, t, D) → (B, 1, D); the cache grows to (B, t+1, D). The check
# also takes gradients through it, as through every attention exercise: write it without `torch.no_grad()`.

# %% tags=["exercise", "hide-input"]
import math


def attend_with_cache(x_new, cache, W_q, W_k, W_v):
    """One decoding step with a key/value cache. Shapes: x_new (B, 1, D) -> (B, 1, D)."""
    # BEGIN SOLUTION NO PROMPT
    k_new, v_new = x_new @ W_k, x_new @ W_v                                   # (B, 1, D)
    cache.k = k_new if cache.k is None else torch.cat([cache.k, k_new], dim=1)  # (B, t+1, D)
    cache.v = v_new if cache.v is None else torch.cat([cache.v, v_new], dim=1)
    scores = (x_new @ W_q) @ cache.k.transpose(1, 2) / math.sqrt(x_new.shape[-1])  # (B, 1, t+1)
    return torch.softmax(scores, dim=-1) @ cache.v
    # END SOLUTION
    """ # BEGIN PROMPT
    raise NotImplementedError("write attend_with_cache, then run the check below")
    """  # END PROMPT

# %%
result = ex.check("05.attend_with_cache", attend_with_cache)
attend_with_cache = result.function  # yours if it passed, else the package's: the cells below work either way
result

# %% [markdown]
# ### Exercise 05.greedy_loop · `greedy_loop`
#
# Greedy decoding of one sentence: start from `[bos_id]`, append the most probable next token (`next_logits(prefix).argmax()`) until it is `eos_id`; when the budget of `max_len` tokens runs out, the last token is eos. Return the tokens after bos, eos included.
#
# Shapes: `next_logits(prefix: list[int])` → logits (V,); returns a list of at most `max_len` ints.

# %% tags=["exercise", "hide-input"]
def greedy_loop(next_logits, bos_id, eos_id, max_len):
    """Greedy decoding: tokens after bos, eos included, at most max_len of them."""
    # BEGIN SOLUTION NO PROMPT
    prefix = [bos_id]
    for t in range(max_len):
        nxt = int(next_logits(prefix).argmax())
        if t + 1 >= max_len:
            nxt = eos_id  # out of budget: end it
        prefix.append(nxt)
        if nxt == eos_id:
            break
    return prefix[1:]
    # END SOLUTION
    """ # BEGIN PROMPT
    raise NotImplementedError("write greedy_loop, then run the check below")
    """  # END PROMPT

# %%
result = ex.check("05.greedy_loop", greedy_loop)
greedy_loop = result.function  # yours if it passed, else the package's: the cells below work either way
result

# %% [markdown]
# Your step, run token by token with a fresh cache, against the package's causal attention computed in one pass over the whole sequence:

# %%
from workbench.lessons.exercises.nb05 import run_step_by_step, full_causal_attention
x_seq = torch.randn(2, 6, 8)
W_seq = [torch.randn(8, 8) / math.sqrt(8) for _ in range(3)]
stepwise_gap = float((run_step_by_step(attend_with_cache, x_seq, *W_seq) - full_causal_attention(x_seq, *W_seq)).abs().max())
print(f"largest difference, step by step with the cache vs one causal pass: {stepwise_gap:.1e}")

# %% [markdown]
# ## Step-by-step decoding with a key/value cache
#
# At inference there is no reference: the decoder produces one token, appends it to its input and runs again. Keys
# and values of earlier positions never change (the causal mask guarantees it), so each layer keeps them in a
# cache and only the new token is computed; the cross-attention keys and values come from the encoder output and are
# computed once, at the first step. The results must be the same as running the whole prefix each time, up to
# floating-point rounding, and greedy decoding must produce the same tokens either way.

# %%
with torch.no_grad():
    full = model(batch.src, batch.tgt_in)                                         # (B, T, V) in one pass
steps, cache = incremental_logits(model, batch.src, batch.tgt_in)         # (B, T, V) one token at a time
cache_diff = float((steps - full).abs().max())
layer0 = cache.layers[0]
print(f"max |step-by-step - full| = {cache_diff:.1e}; cache holds {cache.length} tokens: self-attention keys "
      f"{tuple(layer0.self_attn.k.shape)}, cross-attention keys {tuple(layer0.cross_attn.k.shape)}")
g_cache = wb.decode.greedy_decode(model, batch.src, bos_id=tok.bos_id, eos_id=tok.eos_id, max_extra=MAX_EXTRA, use_cache=True)
g_plain = wb.decode.greedy_decode(model, batch.src, bos_id=tok.bos_id, eos_id=tok.eos_id, max_extra=MAX_EXTRA, use_cache=False)
t_cache = median_seconds(lambda: wb.decode.greedy_decode(model, batch.src, max_extra=MAX_EXTRA, use_cache=True), 3)
t_plain = median_seconds(lambda: wb.decode.greedy_decode(model, batch.src, max_extra=MAX_EXTRA, use_cache=False), 3)
print(f"greedy outputs identical: {torch.equal(g_cache, g_plain)} ({g_cache.shape[1]} steps); "
      f"time with cache {t_cache*1e3:.1f} ms, without {t_plain*1e3:.1f} ms (untrained model, so the output is gibberish)")
metrics.update(cache_max_diff=cache_diff, cache_length=cache.length, cache_same_greedy_output=bool(torch.equal(g_cache, g_plain)),
               greedy_ms_cache=t_cache * 1e3, greedy_ms_no_cache=t_plain * 1e3)

# %%
metrics.update(ex.summary())  # every exercise's check and prediction, read back by `workbench notebooks grade`

# %%
with open("metrics.json", "w") as f:
    json.dump(metrics, f, indent=1)
assert metrics["padding_keys_blocked"] and metrics["causal_is_lower_triangular"]
assert metrics["future_weights_exactly_zero"] and metrics["rows_sum_error"] < 1e-6      # -inf -> exact zeros
assert metrics["plain_softmax_nan_on_empty_row"] and metrics["workbench_zero_on_empty_row"]
assert metrics["shift_ok"]                                                               # tgt_in = <bos> + tgt_out[:-1]
assert metrics["no_leak"] and metrics["past_max_diff"] == 0.0 and metrics["future_changes"]   # bit-exact past
assert metrics["dependency_upper_max"] == 0.0 and metrics["dependency_lower_min"] > 0   # depends on s <= t only
assert metrics["cache_max_diff"] < 1e-4 and metrics["cache_length"] == T                # cache = full pass
assert metrics["cache_same_greedy_output"]

# %% [markdown]
# ## Try it
#
# * `workbench notebooks run --only 05 -p LEAK_POSITION=0` — only the first target position is kept unchanged: its
#   logits must still be identical bit for bit, while every later position now differs.
# * `workbench notebooks run --only 05 -p SHORT_SOURCE="Ein Hund ."` — a shorter second sentence, so more padding:
#   count the blocked columns in the encoder and cross-attention masks; the padding checks must still hold.
# * `workbench notebooks run --only 05 -p MAX_EXTRA=100` — a longer greedy decoding budget: without the cache every
#   step recomputes the whole prefix, with it only the new token; does the time gap between the two grow?
