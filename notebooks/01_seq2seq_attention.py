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
# # 01 · Seq2seq attention: from a bottleneck to a weighted look-up
#
# A recurrent encoder reads the source one token at a time and leaves a state $h_i$ per position. Without attention,
# the decoder sees the source only through the encoder's **last** state $h_S$, in two places (this is what
# `workbench.model.rnn` does with `attention=False`): its initial state is $s_0 = \tanh(W_b h_S + b)$, and at *every* step the
# same $h_S$ is fed again as the context, concatenated with the decoder state before the output layer, exactly where
# the attention model puts its context vector. So the baseline is not starved of the source after the first step;
# it is given one fixed summary of it at every step. Whatever word it is producing, the whole sentence has to
# squeeze through that one vector. Attention lets the decoder, at every step $t$, look back at all encoder states
# instead (its initial state comes from $h_S$ in the same way):
#
# 1. score every source position with a dot product, $e_i = s_t \cdot h_i$;
# 2. turn the scores into a distribution, $\alpha = \mathrm{softmax}(e)$;
# 3. take the weighted sum $a_t = \sum_i \alpha_i h_i$ (the context vector);
# 4. predict the next word from $[a_t; s_t]$, the context concatenated with the decoder state: $o_t = \tanh(W_c[a_t; s_t])$,
#
# In the words lesson 02 uses for the Transformer: the decoder state is the **query** ($q = s_t$), the encoder states
# are both the **keys** the query is compared with and the **values** that get averaged ($K = V = [h_1, \dots, h_S]$).
# Here the keys and values are the raw encoder states; the Transformer gives each role its own learned projection.
#    $P(y_t) = \mathrm{softmax}(W_o o_t)$. (The baseline computes the same with $h_S$ in place of $a_t$.)
#
# This notebook does the four steps by hand with real numbers, then trains the same GRU model with and without
# attention and compares them, including how BLEU changes with source length. Both models train for the same number
# of optimizer steps on the same batches, so every machine reaches the same numbers (a slower one just takes longer).

# %% tags=["parameters"]
SMOKE: bool = False  # tiny data and a few seconds of training (what CI runs)
SEED: int = 0  # seeds every random draw in the notebook
TRAIN_STEPS: int = 200  # optimizer steps per model, with and without attention (about a minute each on one core)
TRAIN_PAIRS: int = 12000  # Multi30k training pairs used (de -> en)
D_MODEL: int = 256  # GRU state size

# %%
import json
import torch
import workbench as wb
from workbench.viz import figures
figures.setup_offline_renderer()
wb.set_seed(SEED)
metrics = {}

# %% [markdown]
# **Predict, then run.** In the worked example below, which encoder state gets the largest attention weight: $h_1$, $h_2$ or $h_3$? Work out the three dot products with $s_t$ in your head first. Write your prediction in the next cell before you run the cells after it (leave `None` to skip: the lesson runs either way).

# %% tags=["answer"]
PREDICT_LARGEST_STATE: int | None = None  # 1, 2 or 3

# %% [markdown]
# ## The four steps on a worked example
# Three encoder states of width 4 and one decoder state:

# %%
H = torch.tensor([[1.0, 0.0, 1.0, 0.0],   # h_1
                  [0.0, 2.0, 0.0, 1.0],   # h_2
                  [1.0, 1.0, 1.0, 1.0]])  # h_3
s = torch.tensor([0.5, 1.0, 0.0, -0.5])   # decoder state s_t
e = H @ s                                  # scores e_i = s_t . h_i
alpha = torch.softmax(e, dim=0)            # attention distribution
a = alpha @ H                              # context vector a_t = sum_i alpha_i h_i
concat = torch.cat([a, s])                 # [a_t; s_t], input of the output layer
print("scores  e     =", e.tolist())
print("weights alpha =", [round(x, 4) for x in alpha.tolist()], " sum =", float(alpha.sum()))
print("context a_t   =", [round(x, 4) for x in a.tolist()])
print("[a_t; s_t]    =", [round(x, 4) for x in concat.tolist()])
manual = sum(alpha[i] * H[i] for i in range(3))
assert torch.allclose(a, manual) and abs(float(alpha.sum()) - 1) < 1e-6
assert int(alpha.argmax()) == int(e.argmax())  # the best-matching state gets the most weight
metrics["worked_alpha"] = alpha.tolist()

# %%
from workbench.lessons import exercises as ex  # predictions and exercise checks
ex.predict("01.largest_state", PREDICT_LARGEST_STATE, int(alpha.argmax()) + 1,
           f"the softmax keeps the order of the scores e = {[round(x, 2) for x in e.tolist()]}, so the state "
           "with the largest dot product s_t·h_i gets the most weight, however small the gap")

# %% [markdown]
# The same computation, batched, is what `workbench.rnn.DotProductAttention` does for every decoder step at once.

# %%
attn = wb.model.rnn.DotProductAttention()
ctx, w = attn(s[None, None], H[None], torch.ones(1, 3, dtype=torch.bool))
assert torch.allclose(w[0, 0], alpha) and torch.allclose(ctx[0, 0], a)

# %% [markdown]
# ## Your turn: the three steps as functions
#
# Write each step for a whole batch of sentences. Each check runs your function against the package's on random inputs and edge cases (batch 1, one source position, float64) and, when something is off, says what in a line or two. Stuck? The lesson goes on with the package's function.

# %% [markdown]
# ### Exercise 01.dot_score · `dot_score`
#
# The score of every source position for one decoder state, $e_i = s_t \cdot h_i$, for a batch.
#
# Shapes: `s` (B, D), `H` (B, S, D) → `e` (B, S).

# %% tags=["exercise", "hide-input"]
def dot_score(s, H):
    """e_i = s · h_i for every source position. Shapes: s (B, D), H (B, S, D) -> (B, S)."""
    # BEGIN SOLUTION NO PROMPT
    return (H * s[:, None, :]).sum(-1)  # (B, S, D) summed over the features
    # END SOLUTION
    """ # BEGIN PROMPT
    raise NotImplementedError("write dot_score, then run the check below")
    """  # END PROMPT

# %%
result = ex.check("01.dot_score", dot_score)
dot_score = result.function  # yours if it passed, else the package's: the cells below work either way
result

# %% [markdown]
# ### Exercise 01.attention_distribution · `attention_distribution`
#
# The attention distribution $\alpha = \mathrm{softmax}(e)$ over the *real* source positions: padded positions (mask `False`) must get weight exactly 0, and each sentence's weights sum to 1.
#
# Shapes: `e` (B, S), `mask` (B, S) bool, True at real tokens → `alpha` (B, S).

# %% tags=["exercise", "hide-input"]
def attention_distribution(e, mask):
    """alpha = softmax(e) over the real positions; padding gets 0. Shapes: (B, S), (B, S) bool -> (B, S)."""
    # BEGIN SOLUTION NO PROMPT
    scores = e.masked_fill(~mask, float("-inf"))  # padding can never win
    return torch.softmax(scores, dim=-1)
    # END SOLUTION
    """ # BEGIN PROMPT
    raise NotImplementedError("write attention_distribution, then run the check below")
    """  # END PROMPT

# %%
result = ex.check("01.attention_distribution", attention_distribution)
attention_distribution = result.function  # yours if it passed, else the package's: the cells below work either way
result

# %% [markdown]
# ### Exercise 01.context_vector · `context_vector`
#
# The context vector $a_t = \sum_i \alpha_i h_i$: the encoder states averaged with the attention weights.
#
# Shapes: `alpha` (B, S), `H` (B, S, D) → `a` (B, D).

# %% tags=["exercise", "hide-input"]
def context_vector(alpha, H):
    """a_t = sum_i alpha_i h_i. Shapes: alpha (B, S), H (B, S, D) -> (B, D)."""
    # BEGIN SOLUTION NO PROMPT
    return (alpha[:, :, None] * H).sum(1)  # weight each state, sum over the source positions
    # END SOLUTION
    """ # BEGIN PROMPT
    raise NotImplementedError("write context_vector, then run the check below")
    """  # END PROMPT

# %%
result = ex.check("01.context_vector", context_vector)
context_vector = result.function  # yours if it passed, else the package's: the cells below work either way
result

# %% [markdown]
# Composed, your three functions are one step of the decoder's attention; the package's `DotProductAttention` must give the same context and weights on a padded batch:

# %%
from workbench.lessons.exercises.nb01 import package_step
s_b, H_b = torch.randn(2, 4), torch.randn(2, 5, 4)
mask_b = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
alpha_b = attention_distribution(dot_score(s_b, H_b), mask_b)
ctx_pkg, alpha_pkg = package_step(s_b, H_b, mask_b)
print("largest difference to the package:", float((alpha_b - alpha_pkg).abs().max()), float((context_vector(alpha_b, H_b) - ctx_pkg).abs().max()))
assert torch.allclose(alpha_b, alpha_pkg, atol=1e-6) and torch.allclose(context_vector(alpha_b, H_b), ctx_pkg, atol=1e-6)

# %% [markdown]
# ## Training the recurrent model with and without attention
# SMOKE uses a synthetic reversal task; the full run uses German→English Multi30k.

# %%
from workbench.translation.data import load_multi30k, synthetic_pairs
from workbench.translation.tokenizer import SubwordTokenizer, WordTokenizer
from workbench.translation.train import fit
from workbench.translation.decode import translate
from workbench.translation.metrics import corpus_bleu, bleu_by_length
if SMOKE:
    train = synthetic_pairs("reverse", 3000, 4, 14, 12, seed=SEED)
    val = synthetic_pairs("reverse", 200, 4, 14, 12, seed=SEED + 1)
    tok = WordTokenizer.train(train)
    d_model, steps = 64, 150  # the reversal task: attention leads clearly by then (val loss ~0.4 vs ~1.5)
else:
    train = load_multi30k("train", "de", "en", limit=TRAIN_PAIRS)
    val = load_multi30k("val", "de", "en")
    tok = SubwordTokenizer.train(train, vocab_size=6000)
    d_model, steps = D_MODEL, TRAIN_STEPS
print(f"{len(train)} training pairs, {len(val)} validation pairs, vocabulary {tok.src_vocab_size} / {tok.tgt_vocab_size}")

# %% [markdown]
# Both models get the same recipe, the same seed and so the same batches in the same order: the only difference
# between them is whether the decoder may look back at the encoder's states.

# %%
cfg = wb.TrainConfig(epochs=1000, max_steps=steps, warmup_steps=200, lr_factor=0.5 if SMOKE else 1.0,
                     max_tokens=2000, eval_bleu=False, seed=SEED, device="cpu", label_smoothing=0.1,
                     precision="fp32")  # fp32: the same figures on every machine
models, histories = {}, {}
for use_attention in (True, False):
    wb.set_seed(SEED)
    m = wb.build_rnn(wb.RNNConfig(d_model=d_model, n_layers=1, dropout=0.1, attention=use_attention),
                     tok.src_vocab_size, tok.tgt_vocab_size)
    histories[use_attention] = fit(m, tok, train, val, cfg)
    models[use_attention] = m
print({k: round(h.val_loss[-1], 3) for k, h in histories.items()})
assert all(h.stopped_reason == "max steps" for h in histories.values())  # both got exactly `steps` updates

# %%
sources, refs = [s for s, _ in val], [t for _, t in val]
hyps = {k: translate(m, tok, sources, beam=1) for k, m in models.items()}
bleu = {k: corpus_bleu(h, refs).score for k, h in hyps.items()}
bins = [0, 6, 9, 12, 15, 100]
by_len = {k: bleu_by_length(sources, h, refs, bins) for k, h in hyps.items()}
fig = figures.line_figure([r[0] for r in by_len[True]],
                          {"with attention": [r[2] for r in by_len[True]],
                           "without attention": [r[2] for r in by_len[False]]},
                          xlabel="source length (words)", ylabel="BLEU", title="BLEU by source length")
fig.show()
print(f"BLEU with attention {bleu[True]:.2f}, without {bleu[False]:.2f}")
metrics.update(bleu_attention=bleu[True], bleu_no_attention=bleu[False],
               val_loss_attention=histories[True].val_loss[-1], val_loss_no_attention=histories[False].val_loss[-1])

# %% [markdown]
# ## The bottleneck grows with the sentence
#
# One fixed vector has to carry the whole source, so the longer the source, the more it must hold. A task where every
# output token depends on one input position makes this visible: reverse a sequence of 5 to 60 random words. Both
# models train for the same number of steps on the same batches; then we measure, on held-out sequences grouped by
# length, how often each predicts the next output token right (teacher-forced token accuracy).

# %%
from workbench.translation.batching import make_batch
from workbench.translation.train import evaluate
rev_train = synthetic_pairs("reverse", 3000, 5, 60, 12, seed=SEED)
rev_val = synthetic_pairs("reverse", 400, 5, 60, 12, seed=SEED + 1)
rev_tok = WordTokenizer.train(rev_train)
rev_cfg = wb.TrainConfig(epochs=1000, max_steps=200 if SMOKE else 300, warmup_steps=100, lr_factor=1.0, max_tokens=3000,
                         eval_bleu=False, seed=SEED, device="cpu", label_smoothing=0.0, precision="fp32")
length_bins = [(5, 15), (15, 30), (30, 45), (45, 61)]
rev_acc = {}
for use_attention in (True, False):
    wb.set_seed(SEED)
    m = wb.build_rnn(wb.RNNConfig(d_model=64, n_layers=1, dropout=0.0, attention=use_attention, max_len=128),
                     rev_tok.src_vocab_size, rev_tok.tgt_vocab_size)
    fit(m, rev_tok, rev_train, rev_val, rev_cfg)
    accs = []
    for lo, hi in length_bins:
        group = [p for p in rev_val if lo <= len(p[0].split()) < hi]
        batch = make_batch(rev_tok.encode_src([s for s, _ in group]), rev_tok.encode_tgt([t for _, t in group]), rev_tok.pad_id)
        accs.append(evaluate(m, [batch], rev_tok.pad_id)["accuracy"])
    rev_acc[use_attention] = accs

# %% [markdown]
# Token accuracy per length group, for both models: where a single final state has to carry the whole sequence,
# the longer groups should suffer most.

# %%
labels = [f"{lo}-{hi - 1}" for lo, hi in length_bins]
figures.line_figure(labels, {"with attention": rev_acc[True], "without attention (last state only)": rev_acc[False]},
                    xlabel="source length (words)", ylabel="token accuracy", title="reversing 5 to 60 words").show()
gaps = [a - b for a, b in zip(rev_acc[True], rev_acc[False])]
print("token accuracy by length", dict(zip(labels, [f"{a:.2f} vs {b:.2f}" for a, b in zip(rev_acc[True], rev_acc[False])])))
print(f"the gap widens from {gaps[0]:.2f} on the shortest sequences to {gaps[-1]:.2f} on the longest")
metrics.update(reverse_accuracy_attention=rev_acc[True], reverse_accuracy_no_attention=rev_acc[False], reverse_gaps=gaps)

# %% [markdown]
# Read the plot from left to right: without attention the accuracy falls as the sequences grow, because everything
# must pass through the last encoder state; with attention each output step reads the one position it needs, so
# length costs it much less, and the gap between the two widens with length.

# %% [markdown]
# ## Where the decoder looked
# The captured weights of one validation sentence: each output token (row) spreads one unit of attention over the source tokens (columns).

# %%
src_text = sources[0]
ids = torch.tensor([tok.encode_src([src_text])[0]])
out = wb.decode.greedy_decode(models[True], ids)
hyp = [i for i in out[0].tolist() if i != 0]
tgt_in = torch.tensor([[tok.bos_id] + hyp[:-1]])
with wb.capture_attention(models[True]) as cache:
    models[True](ids, tgt_in)
w = cache["dec.cross", 0][0, 0]
figures.attention_heatmap(w, [tok.id_to_token(i) for i in hyp], tok.tokens_src(src_text),
                          title="GRU dot-product attention (alignment)").show()
assert torch.allclose(w.sum(-1), torch.ones(w.shape[0]), atol=1e-5)
metrics["alignment_rows_sum_to_one"] = True

# %% [markdown]
# The model above trained for about a minute, so its alignment is still blurry. The workbench ships the same
# architecture trained for 100 CPU minutes (`gru-de-en`; its test_2016_flickr score is on its card, see
# `workbench pretrained list`):
# its attention lines most output words up with the source word they translate.

# %%
from workbench.inspect.inspection import inspect_translation
gru, gru_tok, gru_card = wb.pretrained("gru-de-en")
ins = inspect_translation(gru, gru_tok, "Ein kleines Mädchen spielt mit einem roten Ball im Park .")
w_shipped = ins.weights("dec.cross", 0)[0]                                  # (Tq, Tk): one attention function
figures.attention_heatmap(w_shipped, ins.out_tokens, ins.src_tokens,
                          title=f"gru-de-en: dot-product attention while translating → {ins.translation}").show()
peak = float(w_shipped.max(-1).values.mean())
print(f"mean of each output token's largest weight: {peak:.2f} (uniform over {w_shipped.shape[1]} source tokens: "
      f"{1 / w_shipped.shape[1]:.2f})")
metrics["shipped_gru_mean_peak_weight"] = peak
metrics["shipped_gru_uniform_weight"] = 1 / w_shipped.shape[1]

# %%
metrics.update(ex.summary())  # every exercise's check and prediction, read back by `workbench notebooks grade`

# %%
with open("metrics.json", "w") as f:
    json.dump(metrics, f, indent=1)
# what this notebook demonstrated
assert metrics["val_loss_attention"] < metrics["val_loss_no_attention"], "attention should fit the data better"
assert metrics["bleu_attention"] > metrics["bleu_no_attention"]  # strictly: two models that learnt nothing tie at 0
# the bottleneck: attention is ahead at every length, the last-state model falls with length, and the gap widens
assert all(g > 0 for g in metrics["reverse_gaps"])
assert metrics["reverse_accuracy_no_attention"][-1] < metrics["reverse_accuracy_no_attention"][0]
assert metrics["reverse_gaps"][-1] > metrics["reverse_gaps"][0]
# a trained attention decoder looks at a few source tokens, not everywhere: its average peak weight is more than
# three times the uniform weight (this run's two figures, printed)
print(f"shipped gru-de-en on this sentence: mean peak weight {metrics['shipped_gru_mean_peak_weight']:.2f}, "
      f"uniform weight {metrics['shipped_gru_uniform_weight']:.2f}")
assert metrics["shipped_gru_mean_peak_weight"] > 3 * metrics["shipped_gru_uniform_weight"]

# %% [markdown]
# ## Try it
#
# * `workbench notebooks run --only 01 -p TRAIN_STEPS=800` — four times the training for both models: does the
#   validation-loss gap between attention and the last-state baseline grow or shrink, and does the alignment heatmap
#   of the notebook's own model start to look like the shipped `gru-de-en`'s?
# * `workbench notebooks run --only 01 -p D_MODEL=64` — a four times narrower state, so a tighter bottleneck: in the
#   BLEU-by-length figure, which model loses more on the longest sentences?
# * `workbench notebooks run --only 01 -p TRAIN_PAIRS=3000` — a quarter of the data on the same number of steps, so
#   four times as many passes over each sentence: does either model start to over-fit (training loss well under
#   validation loss), and which one gains less from the repetition?
