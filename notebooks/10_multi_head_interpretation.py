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
# # 10 · What the heads of a trained translator do
#
# Multi-head attention runs $h$ attention functions side by side on different learned projections and concatenates
# their outputs before $W^O$: $\mathrm{MultiHead}(Q,K,V) = \mathrm{Concat}(\mathrm{head}_1..\mathrm{head}_h)W^O$.
# Do the heads specialise? We look at every head of a German→English model: its patterns, how peaked it is
# (confidence, entropy), whether it tracks neighbouring positions, how much the loss depends on it (gradient importance,
# Michel et al. 2019), what happens when heads are switched off, and whether cross-attention lines up with a word aligner.

# %% tags=["parameters"]
SMOKE: bool = False  # tiny model and data (what CI runs)
SEED: int = 0  # seeds every random draw
CHECKPOINT: str = ""  # checkpoint file, run folder or shipped model name; empty: the shipped small-de-en
N_EVAL: int = 200  # validation sentences for statistics, importance and pruning (SMOKE: 40)
SENTENCE: str = "Ein kleines Mädchen klettert in ein Spielhaus aus Holz."  # sentence to inspect
PRONOUN_SENTENCE: str = "Eine Frau verwendet eine Bohrmaschine während ein Mann sie fotografiert."  # a pronoun after its antecedent
ANTECEDENT: str = "Frau"  # the word of PRONOUN_SENTENCE the pronoun refers to
PRONOUN: str = "sie"  # the German pronoun (its first occurrence after ANTECEDENT is used)

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
from workbench.translation.shipped import load_any
from workbench.translation.data import load_multi30k
from workbench.translation.batching import make_batch, token_batches
from workbench.inspect.heads import head_confidence, head_importance, prune_order  # head_entropy, positional_score: exercises below
from workbench.inspect.intervene import ablate_heads
from workbench.inspect.pronoun import EN_PRONOUNS, english_pronouns, pronoun_attention
from workbench.inspect.inspection import inspect_translation, to_bertviz
from workbench.inspect.align import ibm1, ibm1_align, word_spans, word_attention, alignment_agreement
from workbench.translation.decode import translate
from workbench.translation.metrics import corpus_bleu
# the translator that ships with the workbench (trained by its own recipe; see its card), or yours
model, tok, info = load_any(CHECKPOINT or "small-de-en")
if "card" in info:
    print(f"{info['card']['name']}: test_2016_flickr sacreBLEU {info['card']['bleu']['test_2016_flickr']['beam4']:.1f} (beam 4)")
n_eval = 40 if SMOKE else N_EVAL
val = load_multi30k("val", "de", "en")[:n_eval]
cfg = model.cfg
print(f"model: {cfg.n_enc_layers}+{cfg.n_dec_layers} layers, {cfg.n_heads} heads, d_model {cfg.d_model}")

# %% [markdown]
# ## Every head on one sentence

# %%
ins = inspect_translation(model, tok, SENTENCE)
print("translation:", ins.translation)
for kind in ("enc.self", "dec.self", "dec.cross"):
    q, k = ins.axes(kind)
    L = len(ins.cache.layers(kind))
    w = torch.stack([ins.weights(kind, l) for l in range(L)])           # (L, H, Tq, Tk)
    figures.head_grid(w, q, k, layer_labels=[f"{kind} L{l}" for l in range(L)], title=f"{kind}: every layer and head",
                      max_width=figures.PAGE_WIDTH).show()           # heads wrap onto rows that fit the page

# %% [markdown]
# ## A pronoun and its antecedent
#
# The study notes explain self-attention with *"The animal didn't cross the street because it was too tired"*: to
# encode "it", a head can look at "animal". Our model translates German into English, so we ask the same of a German
# sentence with a pronoun whose antecedent comes earlier, in two places:
#
# * **encoder self-attention** from the German pronoun: which source words does each head read to build its vector?
# * **cross-attention** from the decoder position that emits the English pronoun: which source words does each head
#   read while the model writes "he"/"she"/"it"?
#
# The notes-style sentence *"Der Hund rennt über die Wiese, weil er einen Ball fangen will."* does not serve: the
# model rephrases it without a pronoun (printed below). The default `PRONOUN_SENTENCE` is taken from the
# test_2016_flickr split (never trained on), where the reference has "her" too: German "sie" can be "she", "her" or
# "they", and the model has to pick the one that fits the woman being photographed. The measure is the weight each head
# puts on the antecedent's subword tokens, against the share uniform attention over the source would give them.

# %%
for sentence in ("Der Hund rennt über die Wiese, weil er einen Ball fangen will.", PRONOUN_SENTENCE):
    translation = inspect_translation(model, tok, sentence).translation
    print(f"{sentence}\n  -> {translation}   (English pronoun: {english_pronouns(translation) or 'none'})")
reading = pronoun_attention(model, tok, PRONOUN_SENTENCE, ANTECEDENT, PRONOUN)   # stops if there is no pronoun
pron, uniform = reading.inspection, reading.uniform
pron_stats = {kind: reading.stats(kind) for kind in ("enc.self", "dec.cross")}
for kind, stat in pron_stats.items():
    on_ante, (l, h) = reading.on_antecedent[kind], stat["best_head"]                # (L, H)
    query = PRONOUN if kind == "enc.self" else reading.pronoun_emitted
    figures.head_stat_figure(on_ante, [f"{kind} L{i}" for i in range(on_ante.shape[0])],
                             title=f"{kind}: weight from '{query}' on '{ANTECEDENT}' (uniform: {uniform:.2f})").show()
    most_read = sorted({reading.src_words[i] for i in reading.most_read_word[kind].flatten().tolist()})
    print(f"{kind}: largest weight on '{ANTECEDENT}' {stat['max']:.2f} (layer {l}, head {h}), mean over heads "
          f"{stat['mean']:.2f}, uniform {uniform:.2f}; heads whose most-read word is '{ANTECEDENT}': "
          f"{stat['heads_reading_antecedent_most']} of {on_ante.numel()}; most-read words: " + ", ".join(most_read))

# %% [markdown]
# The cross-attention head with the largest weight on the antecedent, read on every output token: does it pick the
# antecedent out only while the pronoun is written, or all the time?

# %%
bl, bh = pron_stats["dec.cross"]["best_head"]
best = reading.best_cross_row()                                         # (T_out, S): that head on every output token
figures.attention_heatmap(best, pron.out_tokens, pron.src_tokens,
                          title=f"cross-attention layer {bl}, head {bh}, while translating → {pron.translation}").show()
elsewhere = reading.antecedent_weight_elsewhere()
print(f"that head's weight on '{ANTECEDENT}': {float(best[reading.en_query, reading.antecedent_tokens].sum()):.2f} "
      f"from '{reading.pronoun_emitted}', {elsewhere:.2f} on average from the other output tokens")
metrics.update(pronoun_emitted=reading.pronoun_emitted, antecedent_uniform_share=uniform,
               antecedent_max_enc=pron_stats["enc.self"]["max"], antecedent_max_cross=pron_stats["dec.cross"]["max"],
               antecedent_best_cross_head=[bl, bh], antecedent_cross_elsewhere=elsewhere,
               heads_reading_antecedent_most_enc=pron_stats["enc.self"]["heads_reading_antecedent_most"],
               heads_reading_antecedent_most_cross=pron_stats["dec.cross"]["heads_reading_antecedent_most"])

# %% [markdown]
# How to read the numbers above for the default sentence (what they show is asserted at the end when
# `PRONOUN_SENTENCE` is the default): first, which English pronoun the model writes for "sie", and whether its case
# is right. In the encoder, does one head put most of its weight on "Frau" while encoding "sie" (compare the largest
# weight printed above with the uniform share in the figure's title), and for how many heads is "Frau" the most-read
# word, while the average over heads stays near a uniform share? While the decoder writes the pronoun, the best
# cross-attention head gives "Frau" more than a uniform share and far more than it gives "Frau" from the other output
# words, yet no cross head reads "Frau" *most*: other words ("sie" itself, "Mann", "fotografiert") draw more. So the
# link from pronoun to antecedent shows up clearly in the encoder's self-attention and only weakly in cross-attention:
# a weaker story than the study notes' "it → animal" picture, and the notebook says so rather than picking a sentence
# until one fits. (The choice rule: the first test sentence with "er"/"sie" whose translation renders that pronoun
# with an English one. This model mostly avoids pronouns, so few test sentences can serve.)
# One sentence and one small model prove nothing general: try other sentences with
# `PRONOUN_SENTENCE`, `ANTECEDENT` and `PRONOUN`, and expect heads like this to be found in some, not in all.

# %% [markdown]
# **Predict, then run.** Over the validation sentences, which kind of attention has the most peaked heads on average (the highest mean confidence, the largest weight of a row): `"enc.self"`, `"dec.self"` or `"dec.cross"`? Write your prediction in the next cell before you run the cells after it (leave `None` to skip: the lesson runs either way).

# %% tags=["answer"]
PREDICT_PEAKED_KIND: str | None = None  # "enc.self", "dec.self" or "dec.cross"

# %% [markdown]
# ## Confidence, entropy and positional heads over the validation set

# %% [markdown]
# ### Exercise 10.head_entropy · `head_entropy`
#
# How spread out is a head? The entropy of one row of weights is $H = -\sum_j w_j \log w_j$ (nats; a weight of 0
# adds nothing): 0 when the head looks at a single key, $\log T_k$ when it spreads evenly. Average it over the real
# query rows of a batch, for each head: a row counts when `query_mask` marks its query as real (all rows when it is
# `None`) and it attends to something. A head with no row that counts gets 0.
#
# Shapes: `weights` (B, H, Tq, Tk), `query_mask` (B, Tq) bool or `None` → (H,).

# %% tags=["exercise", "hide-input"]
def head_entropy(weights, query_mask=None):
    """Mean entropy (nats) of each head's rows over the real queries. Shapes: (B, H, Tq, Tk), (B, Tq) -> (H,)."""
    # BEGIN SOLUTION NO PROMPT
    ent = -torch.special.xlogy(weights, weights).sum(-1)  # (B, H, Tq); xlogy(0, 0) = 0
    valid = weights.sum(-1) > 0  # (B, H, Tq): rows that attend to something
    if query_mask is not None:
        valid = valid & query_mask[:, None, :]
    return (ent * valid).sum((0, 2)) / valid.sum((0, 2)).clamp_min(1)
    # END SOLUTION
    """ # BEGIN PROMPT
    raise NotImplementedError("write head_entropy, then run the check below")
    """  # END PROMPT

# %%
from workbench.lessons import exercises as ex
result = ex.check("10.head_entropy", head_entropy)
head_entropy = result.function  # yours if it passed, else the package's: the cells below work either way
result

# %% [markdown]
# ### Exercise 10.positional_score · `positional_score`
#
# A *previous-token head* puts its weight on key $i-1$ for query $i$. For an `offset` ($-1$: previous token, $+1$:
# next), take the weight of each query $i$ on key $i + \text{offset}$, and average it, for each head, over the real
# query rows that *have* such a key and attend to something. A query has the key when $0 \le i + \text{offset} < T$
# (query 0 has no previous token: it is left out, not counted as 0; a padding key counts, with its weight of 0). A
# row attends to something when its weights are not all 0 (a query whose every key was masked has a row of zeros).
# A head with no row that counts scores 0.
#
# Shapes: `weights` (B, H, T, T), `offset` an int, `query_mask` (B, T) bool or `None` → (H,).

# %% tags=["exercise", "hide-input"]
def positional_score(weights, offset, query_mask=None):
    """Mean weight each head puts on key i + offset. Shapes: (B, H, T, T), (B, T) -> (H,)."""
    # BEGIN SOLUTION NO PROMPT
    T_q, T_k = weights.shape[-2:]
    q = torch.arange(T_q)
    q = q[(q + offset >= 0) & (q + offset < T_k)]  # the queries that have a key at i + offset
    picked = weights[:, :, q, q + offset]  # (B, H, n)
    valid = weights[:, :, q].sum(-1) > 0  # (B, H, n)
    if query_mask is not None:
        valid = valid & query_mask[:, None, q]
    return (picked * valid).sum((0, 2)) / valid.sum((0, 2)).clamp_min(1)
    # END SOLUTION
    """ # BEGIN PROMPT
    raise NotImplementedError("write positional_score, then run the check below")
    """  # END PROMPT

# %%
result = ex.check("10.positional_score", positional_score)
positional_score = result.function
result

# %%
src_ids, tgt_ids = tok.encode_src([s for s, _ in val]), tok.encode_tgt([t for _, t in val])
idx = token_batches([len(s) for s in src_ids], [len(t) for t in tgt_ids], 1500, shuffle=False)
batches = [make_batch([src_ids[i] for i in b], [tgt_ids[i] for i in b], tok.pad_id) for b in idx]
stats = {}
for b in batches:
    with wb.capture_attention(model) as cache, torch.no_grad():
        model(b.src, b.tgt_in)
    qmask = {"enc.self": b.src != tok.pad_id, "dec.self": b.tgt_in != tok.pad_id, "dec.cross": b.tgt_in != tok.pad_id}
    for kind in ("enc.self", "dec.self", "dec.cross"):
        for l in cache.layers(kind):
            w = cache[kind, l]
            s = stats.setdefault((kind, l), {"conf": [], "ent": [], "prev": [], "next": [], "n": []})
            s["conf"].append(head_confidence(w, qmask[kind])); s["ent"].append(head_entropy(w, qmask[kind]))
            if kind != "dec.cross":
                s["prev"].append(positional_score(w, -1, qmask[kind])); s["next"].append(positional_score(w, +1, qmask[kind]))
            s["n"].append(int(qmask[kind].sum()))

# %% [markdown]
# Each head's statistics, averaged over the batches with each batch weighted by its number of real queries:

# %%
rows, conf, ent = [], [], []
for (kind, l), s in stats.items():
    wts = torch.tensor(s["n"], dtype=torch.float)[:, None]
    rows.append(f"{kind} L{l}")
    conf.append((torch.stack(s["conf"]) * wts).sum(0) / wts.sum()); ent.append((torch.stack(s["ent"]) * wts).sum(0) / wts.sum())
conf, ent = torch.stack(conf), torch.stack(ent)
figures.head_stat_figure(conf, rows, "confidence (mean max weight)").show()
figures.head_stat_figure(ent, rows, "entropy (nats)").show()

# %%
enc_prev = torch.stack([torch.stack(stats[("enc.self", l)]["prev"]).mean(0) for l in range(cfg.n_enc_layers)])
enc_next = torch.stack([torch.stack(stats[("enc.self", l)]["next"]).mean(0) for l in range(cfg.n_enc_layers)])
best_prev = float(enc_prev.max()); best_next = float(enc_next.max())
print(f"strongest previous-token head puts {best_prev:.2f} of its weight on position i-1; next-token head {best_next:.2f} on i+1")
metrics.update(max_confidence=float(conf.max()), min_entropy=float(ent.min()), max_entropy=float(ent.max()),
               best_prev_token_weight=best_prev, best_next_token_weight=best_next)

# %%
from workbench.lessons import exercises as ex
peaked_kind = max(("enc.self", "dec.self", "dec.cross"), key=lambda k: float(conf[[r.startswith(k + " ") for r in rows]].mean()))
metrics["peaked_kind"] = peaked_kind
ex.predict("10.peaked_kind", PREDICT_PEAKED_KIND, peaked_kind,
           "Confidence depends on how many keys a row can see: a decoder self-attention row at step t has only t + 1 keys (the first rows one or two), so its largest weight is large by construction. Compare the entropy figure, and normalise by the number of keys (lesson 17) before calling a kind more focused.")

# %% [markdown]
# ## Head importance and pruning
# Importance of head $h$ = $\mathbb{E}\,|\partial L/\partial \xi_h|$ where $\xi_h$ gates the head's output
# (Michel et al., 2019). Switching off the least important heads first should hurt far less than switching off the
# most important ones, and a random choice of the same number of heads should land in between.
#
# To keep the test honest, importance is measured on one half of the sentences and the damage on the *other* half:
# a ranking that only fits the sentences it was computed on would not pass. Per-layer normalisation makes heads
# comparable *within* a layer (the heatmap); the global pruning order uses the raw scores, because normalising gives
# every layer the same total and so over-ranks the heads of layers that matter little.

# %%
half_n = len(batches) // 2
rank_batches, test_batches = batches[:half_n], batches[half_n:]
test_val = [val[i] for b in idx[half_n:] for i in b]
raw_imp = head_importance(model, rank_batches, tok.pad_id, normalise=False)
imp = {key: v / v.norm().clamp_min(1e-12) for key, v in raw_imp.items()}  # per-layer normalised, for display
imp_rows = [f"{k} L{l}" for (k, l) in imp]
figures.head_stat_figure(torch.stack(list(imp.values())), imp_rows, "head importance (per-layer normalised)").show()
order = prune_order(raw_imp)  # global order from the raw scores, least important first

# %% [markdown]
# The pruning curve: switch heads off in that order, least important first and most important first, and score the
# held-out half greedily.

# %%
def val_loss(masked):
    with ablate_heads(model, masked):
        return wb.train.evaluate(model, test_batches, tok.pad_id)["loss"]
def val_bleu(masked):
    with ablate_heads(model, masked):
        return corpus_bleu(translate(model, tok, [s for s, _ in test_val], beam=1), [t for _, t in test_val]).score
fractions = [0.0, 0.25, 0.5] if SMOKE else [0.0, 0.1, 0.25, 0.4, 0.5, 0.6, 0.75, 0.9]
curve = {"least important first": [], "most important first": []}
for f in fractions:
    k = int(round(f * len(order)))
    curve["least important first"].append(val_bleu(order[:k]))
    curve["most important first"].append(val_bleu(order[::-1][:k]))
figures.line_figure([f * 100 for f in fractions], curve, xlabel="% of heads masked", ylabel="BLEU (greedy, held-out half)",
                    title="pruning curve").show()

# %% [markdown]
# Half of the heads off at once: the least important half, the most important half, and three random halves, scored
# by the loss on the held-out batches:

# %%
half = len(order) // 2
gen = torch.Generator().manual_seed(SEED)
random_halves = [[order[i] for i in torch.randperm(len(order), generator=gen)[:half].tolist()] for _ in range(3)]
loss_low, loss_high, loss_none = val_loss(order[:half]), val_loss(order[::-1][:half]), val_loss([])
loss_random = [val_loss(r) for r in random_halves]
print(f"held-out val loss: all heads {loss_none:.3f}; half the heads off: least important {loss_low:.3f}, "
      f"random {', '.join(f'{x:.3f}' for x in loss_random)}, most important {loss_high:.3f}")
metrics.update(bleu_all_heads=curve["least important first"][0], loss_all_heads=loss_none,
               loss_prune_least_half=loss_low, loss_prune_most_half=loss_high,
               loss_prune_random_half_mean=float(np.mean(loss_random)), pruning_curve=curve, fractions=fractions)

# %% [markdown]
# ## Cross-attention against a word aligner
# IBM Model 1, trained by EM on the training pairs, gives each English word its most likely German word. For every decoder layer we pool cross-attention from subwords to words and take the most-attended source word:

# %%
train_pairs = load_multi30k("train", "de", "en", limit=2000 if SMOKE else 10000)
t_prob = ibm1(train_pairs, iterations=5)
agree = {}
for src_text, _ in val[: (20 if SMOKE else 100)]:
    ins = inspect_translation(model, tok, src_text)
    ref = ibm1_align(t_prob, src_text, ins.translation)
    qw, kw = word_spans(ins.out_tokens), word_spans(ins.src_tokens)
    if max(qw) < 0 or max(kw) < 0:
        continue
    for l in range(cfg.n_dec_layers):
        heads = ins.weights("dec.cross", l)
        for h in list(range(cfg.n_heads)) + ["mean"]:
            w = heads.mean(0) if h == "mean" else heads[h]
            pred = word_attention(w, qw, kw).argmax(-1).tolist()
            agree.setdefault((l, h), []).append(alignment_agreement(pred, ref[: len(pred)]))
agreement = {k: float(np.nanmean(v)) for k, v in agree.items()}
best = max(agreement, key=agreement.get)
mean_src_words = float(np.mean([len(s.split()) for s, _ in val]))
print(f"best head {best}: {agreement[best]:.2f} agreement with IBM-1 (chance about {1/mean_src_words:.2f})")
figures.bar_figure([f"L{l} h{h}" for (l, h) in agreement], list(agreement.values()), title="agreement with IBM-1 alignment").show()
metrics.update(best_alignment_agreement=agreement[best], chance_alignment=1 / mean_src_words)

# %% [markdown]
# ## Explore freely
# The inspector below works offline (plotly). After it, `to_bertviz` feeds bertviz's `head_view`: bertviz loads its
# scripts (require.js, d3, jQuery) from a CDN, so **it needs a network connection** and stays blank offline (the book
# leaves it out); the plotly `head_lines` view after it draws the same lines between tokens with no network. To keep
# a figure: `figures.to_html(fig, "fig.html")` (interactive, offline) or `figures.to_image(fig, "fig.svg")` (PNG, SVG
# or PDF; needs kaleido and a Chromium).

# %%
from workbench.viz.widgets import AttentionInspector
inspector = AttentionInspector(model, tok, sentence=SENTENCE, card=info.get("card"))  # the card says what the model knows
inspector

# %%
from bertviz import head_view
ins = inspect_translation(model, tok, SENTENCE)
head_view(**to_bertviz(ins.cache, ins.src_tokens, ins.tgt_tokens))
figures.head_lines(ins.weights("dec.cross", -1), ins.out_tokens, ins.src_tokens, title="cross-attention, last layer (offline view)").show()

# %% [markdown]
# ## In your browser
#
# The book's page *Translate in your browser* runs this model in the reader's browser (ONNX Runtime Web, with the
# graphs of `workbench export small-de-en DIR --to onnx`): type German, read the English, pick any cross-attention head
# for any output word, then untick heads to switch them off and translate again. In the served book
# (`workbench book serve --dir book`) it appears below; in Jupyter the frame stays empty.

# %%
from IPython.display import IFrame
IFrame("_static/translate/embed.html", width="100%", height=1000)

# %%
metrics.update(ex.summary())  # every exercise's check and prediction, read back by `workbench notebooks grade`

# %%
with open("metrics.json", "w") as f:
    json.dump(metrics, f, indent=1)
# heads differ in how peaked they are: on a trained model the spread of entropies is large, not rounding noise
assert metrics["max_entropy"] - metrics["min_entropy"] > 0.5
# the measured kind is one of the prediction's choices, so a right prediction can be graded right
assert metrics["peaked_kind"] in ex.PREDICTIONS["10.peaked_kind"].choices
# importance ranks heads usefully, on sentences it was not computed on: least < random < most important
assert metrics["loss_prune_least_half"] < metrics["loss_prune_random_half_mean"] < metrics["loss_prune_most_half"]
# masking heads costs something: the full model is better than any half of its heads
assert metrics["loss_all_heads"] < metrics["loss_prune_least_half"]
# cross-attention points at the aligner's word far more often than a uniform guess over the source words would
assert metrics["best_alignment_agreement"] > 2 * metrics["chance_alignment"]
# the pronoun: the model emits one, and some head of each kind gives the antecedent more than a uniform share
assert metrics["pronoun_emitted"] in EN_PRONOUNS
assert metrics["antecedent_max_cross"] > metrics["antecedent_uniform_share"]
assert metrics["antecedent_max_enc"] > metrics["antecedent_uniform_share"]
if (PRONOUN_SENTENCE, ANTECEDENT, PRONOUN) == ("Eine Frau verwendet eine Bohrmaschine während ein Mann sie fotografiert.", "Frau", "sie"):
    # what the prose says of the default sentence, with the shipped model: "her"; at least one encoder head reads
    # "Frau" most, no cross head does, and the best cross head's weight on it is specific to the pronoun row (the
    # cells above print these weights)
    assert metrics["pronoun_emitted"] == "her"
    assert metrics["heads_reading_antecedent_most_cross"] == 0 and metrics["heads_reading_antecedent_most_enc"] >= 1
    assert metrics["antecedent_cross_elsewhere"] < metrics["antecedent_max_cross"] / 2   # specific to the pronoun row

# %% [markdown]
# ## Try it
#
# * `workbench notebooks run --only 10 -p SENTENCE="Zwei Hunde spielen im Schnee ."` — a sentence of your own in the
#   first head grid and in the inspector: which heads keep pointing at the previous or next token, whatever the words?
# * `workbench notebooks run --only 10 -p N_EVAL=500` — statistics, importance and pruning on 500 validation sentences:
#   do the least/random/most-important pruning losses keep their order, and does the importance heatmap change?
# * `workbench notebooks run --only 10 -p PRONOUN_SENTENCE="Ein sehr kleiner Junge guckt nach vorne während er in einen kleinen Gegenstand beißt."`
#   — another test sentence with "er" after "Junge": does the same cross-attention head read "Junge" while the model
#   writes "he"? (With `-p ANTECEDENT=... -p PRONOUN=...` any sentence works; many come back without a pronoun, as
#   "while petting a dog" for "während sie einen Hund streichelt", and the notebook then stops and says so.)
