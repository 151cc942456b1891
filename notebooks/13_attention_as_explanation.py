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
# # 13 · Attention as explanation
#
# A cross-attention map is tempting to read as "the model translated *girl* by looking at *Mädchen*". Jain and
# Wallace (2019, "Attention is not Explanation") showed that attention weights often disagree with gradient-based
# measures of which inputs matter; Wiegreffe and Pinter (2019, "Attention is not not Explanation") answered that it
# depends on the model and on what one calls an explanation. This notebook measures the question on the shipped
# German→English translator instead of arguing it:
#
# 1. one sentence: every cross-attention head, their average, and the attention **rolled out** through all
#    layers to the source tokens (Abnar & Zuidema, 2020), beside three **attributions** computed with Captum from
#    each output token's log-probability back to the source embeddings: saliency (the gradient's norm),
#    input × gradient, and integrated gradients (Sundararajan et al., 2017);
# 2. a **contrastive** attribution (Yin & Neubig, 2022): why this word and not another;
# 3. over a sample of the test set: how well each attention summary ranks the source tokens as each attribution
#    does (Spearman rank correlation per output token), and how often each picks the word that an IBM Model 1
#    aligner picks, each beside baselines computed here (random scores, a uniform guess, and a position-only
#    diagonal prior);
# 4. whether the heads that agree most with the attribution are the ones the translation needs: they are switched
#    off and the damage is measured on sentences that were not used to rank them.

# %% tags=["parameters"]
SMOKE: bool = False  # a few sentences and fewer integration steps (what CI runs)
SEED: int = 0  # seeds the sample of test sentences and the random baselines
CHECKPOINT: str = ""  # checkpoint file, run folder or shipped model name; empty: the shipped small-de-en
SENTENCE: str = "Ein kleines Mädchen klettert in ein Spielhaus aus Holz."  # the sentence of sections 1 and 2
CONTRAST_TARGET: str = "girl"  # a word of its translation to explain
CONTRAST_FOIL: str = "boy"  # the word it is contrasted with: why the target and not this one?
N_SENTENCES: int = 40  # test_2016_flickr sentences for the agreement study (SMOKE: 20; the time grows with it)
IG_STEPS: int = 32  # integrated-gradients steps over the test sentences (SMOKE: 16); section 1 also uses 4x
N_ALIGN_PAIRS: int = 10000  # training pairs for the IBM Model 1 aligner (SMOKE: 2000)
N_ABLATE: int = 4  # cross-attention heads switched off in each group of section 4

# %%
import json
import time

import numpy as np
import torch
from IPython.display import Markdown, display

import workbench as wb
from workbench.viz import figures
from workbench.inspect.align import ibm1, ibm1_align, word_spans
from workbench.inspect.attribution import (METHODS, attention_summaries, attribute, completeness, head_agreement,
                                   measure_agreement, paired_gap, spearman, summarise_agreement, token_id)
from workbench.translation.batching import make_batch, token_batches
from workbench.translation.data import load_multi30k
from workbench.inspect.flow import decoder_attention_flow
from workbench.inspect.inspection import inspect_translation
from workbench.inspect.intervene import ablate_heads
from workbench.translation.shipped import load_any
from workbench.translation.train import evaluate

# %%
figures.setup_offline_renderer()
wb.set_seed(SEED)
cpu_start = time.process_time()
metrics = {}
n_sentences = 20 if SMOKE else N_SENTENCES
ig_steps = 16 if SMOKE else IG_STEPS
n_align_pairs = 2000 if SMOKE else N_ALIGN_PAIRS
SUMMARIES = ("cross last", "cross mean", "rollout")  # the attention summaries compared with attributions
NAMES = {"saliency": "saliency", "input_x_gradient": "input × gradient", "integrated_gradients": "integrated gradients"}

# %%
# the translator that ships with the workbench (trained by its own recipe; see its card), or yours
model, tok, info = load_any(CHECKPOINT or "small-de-en")
model.eval()
if "card" in info:
    print(f"{info['card']['name']}: test_2016_flickr sacreBLEU {info['card']['bleu']['test_2016_flickr']['beam4']:.1f} (beam 4)")
cfg = model.cfg
print(f"model: {cfg.n_enc_layers}+{cfg.n_dec_layers} layers, {cfg.n_heads} heads, d_model {cfg.d_model}")
# the reference word aligner: IBM Model 1 by EM on training pairs (it never sees the model)
t_prob = ibm1(load_multi30k("train", "de", "en", limit=n_align_pairs), iterations=5)

# %% [markdown]
# ## One sentence: attention beside attribution
# Every head of every decoder layer's cross-attention first: rows are output tokens (each row is the position that
# *produced* that token), columns the source tokens.

# %%
ins = inspect_translation(model, tok, SENTENCE)
print("translation:", ins.translation)
n_layers = len(ins.cache.layers("dec.cross"))
cross = torch.stack([ins.weights("dec.cross", layer) for layer in range(n_layers)])  # (L, H, T, S)
figures.head_grid(cross, ins.out_tokens, ins.src_tokens, layer_labels=[f"cross L{layer}" for layer in range(n_layers)],
                  title="cross-attention: every decoder layer and head").show()

# %% [markdown]
# Four ways to summarise the attention of one output position over the source, each a distribution over the source
# tokens: the **last** decoder layer's cross-attention averaged over its heads; **all** layers and heads averaged;
# the **rollout**, which follows the mixing through the encoder's self-attention, the decoder's self-attention and
# each cross-attention (with the residual connections counted as half of each layer, as Abnar & Zuidema do;
# `workbench.inspect.flow` writes out the recursion); and the **flow**, the same graph read as a network of pipes whose
# bottlenecks limit what reaches the output (a max-flow per pair of tokens, slower, so it is drawn for this sentence
# only).
#
# Beside them the three attributions of the output token's log-probability $\log p(y_t \mid y_{<t}, x)$ to the source
# token embeddings $x$: **saliency** $\lVert \partial \log p / \partial x_j \rVert$, **input × gradient**
# $x_j \cdot \partial \log p / \partial x_j$, and **integrated gradients**, which averages the gradient along the straight
# path from an all-zero embedding to $x$ and multiplies by $x_j$. Every panel is drawn as |value| with each row
# rescaled to sum to 1, so that the signed attributions and the attention distributions share one colour scale.

# %%
summary = attention_summaries(ins.cache)  # name -> (T, S), rows sum to 1
flow = decoder_attention_flow([ins.weights("enc.self", layer) for layer in range(cfg.n_enc_layers)],
                              [ins.weights("dec.self", layer) for layer in range(n_layers)],
                              [ins.weights("dec.cross", layer) for layer in range(n_layers)])  # (T, S) max-flow values
summary["flow"] = flow / flow.sum(-1, keepdim=True)
tgt_in = [tok.bos_id, *ins.out_ids[:-1]]  # the decoder input: bos, then the translation shifted right
attr = {m: attribute(model, ins.src_ids, tgt_in, targets=ins.out_ids, method=m, n_steps=4 * ig_steps) for m in METHODS}
panels = {**{f"attention: {k}": v for k, v in summary.items()}, **{NAMES[m]: a.scores for m, a in attr.items()}}
figures.attention_vs_attribution(panels, ins.out_tokens, ins.src_tokens,
                                 title="where each output token looks (attention) and what it depends on (attribution)").show()

# %% [markdown]
# The same in words: the source token that each view puts first, for every output token.

# %%
keep = [t for t, token in enumerate(ins.out_tokens) if token != "<eos>"]
top_rows = [{"output": ins.out_tokens[t], **{name: ins.src_tokens[int(v[t].abs().argmax())] for name, v in panels.items()}}
            for t in keep]
display(Markdown(figures.markdown_table(top_rows)))
sentence_rho = {(NAMES[m], s): float(np.nanmean(spearman(attr[m].scores.abs()[keep], summary[s][keep]).numpy()))
                for m in METHODS for s in (*SUMMARIES, "flow")}
display(Markdown(figures.markdown_table([{"attribution": m, **{s: sentence_rho[(m, s)] for s in (*SUMMARIES, "flow")}}
                                         for m in NAMES.values()])))

# %% [markdown]
# ### Exercise 13.integrated_gradients · `integrated_gradients`
#
# Integrated gradients attributes $f(x) - f(x')$ to the input features: $a_j = (x_j - x'_j) \int_0^1
# \partial f(x' + \alpha (x - x')) / \partial x_j \, d\alpha$. Computed as a right Riemann sum with $n$ = `n_steps`:
# $a_j \approx (x_j - x'_j) \cdot \frac{1}{n} \sum_{k=1}^{n} \partial f(x' + \tfrac{k}{n}(x - x')) / \partial x_j$.
# Write it for a function `f` that maps a batch of rows to one number per row (take the gradients with
# `torch.autograd.grad`; the lesson's attributions use Captum's, with a finer rule on the same path).
#
# Shapes: `f` (N, D) → (N,), `x`, `baseline` (N, D), `n_steps` an int ≥ 1 → (N, D).

# %% tags=["exercise", "hide-input"]
def integrated_gradients(f, x, baseline, n_steps):
    """Right Riemann sum of integrated gradients from baseline to x. Shapes: (N, D), (N, D) -> (N, D)."""
    # BEGIN SOLUTION NO PROMPT
    total = torch.zeros_like(x)
    for k in range(1, n_steps + 1):
        point = (baseline + k / n_steps * (x - baseline)).detach().requires_grad_(True)  # (N, D) on the path
        with torch.enable_grad():
            (grad,) = torch.autograd.grad(f(point).sum(), point)  # rows are independent: d f_i / d x_i
        total = total + grad
    return (x - baseline) * total / n_steps
    # END SOLUTION
    """ # BEGIN PROMPT
    raise NotImplementedError("write integrated_gradients, then run the check below")
    """  # END PROMPT

# %%
from workbench.lessons import exercises as ex
result = ex.check("13.integrated_gradients", integrated_gradients)
integrated_gradients = result.function  # yours if it passed, else the reference
result

# %% [markdown]
# **Completeness.** Integrated gradients has a property to check: the scores of one output token add up to
# $f(x) - f(\text{baseline})$, the change of its log-probability between the all-zero embeddings and the real ones. The
# integral is computed numerically, and this model's ReLUs make the gradient jump along the path, so the error of a
# quadrature rule falls only about as fast as $1/\text{steps}$, and only once there are enough steps to resolve the
# path's sharpest turns; before that it can stall. Below: the total error over the sentence's tokens,
# $\sum_t |\sum_j a_{tj} - \Delta f_t| / \sum_t |\Delta f_t|$, with a quarter of the section's steps, the section's
# $4\times$, and $16\times$.

# %%
def completeness_error(a):
    """Total relative completeness error of one sentence's integrated gradients (all output tokens)."""
    change = a.value - a.baseline_value
    return float((a.scores.sum(-1) - change).abs().sum() / change.abs().sum())


ig_runs = {steps: attribute(model, ins.src_ids, tgt_in, targets=ins.out_ids, method="integrated_gradients", n_steps=steps)
           for steps in (ig_steps, 16 * ig_steps)}
ig_runs[4 * ig_steps] = attr["integrated_gradients"]
ig_errors = {steps: completeness_error(ig_runs[steps]) for steps in sorted(ig_runs)}
print("completeness error: " + ", ".join(f"{100 * e:.2f} % with {steps} steps" for steps, e in ig_errors.items()))
metrics.update(sentence_translation=ins.translation, ig_steps_coarse=ig_steps,
               ig_completeness_error_coarse=ig_errors[ig_steps], ig_completeness_error_4x=ig_errors[4 * ig_steps],
               ig_completeness_error_16x=ig_errors[16 * ig_steps],
               sentence_spearman={f"{m}/{s}": v for (m, s), v in sentence_rho.items()})

# %% [markdown]
# ## Why this word and not another?
# An attribution of $\log p(\text{girl})$ explains the word against *every* other word of the vocabulary at once. A
# contrastive attribution explains $\log p(\text{target}) - \log p(\text{foil})$ instead: which source tokens make the
# model prefer the target to one named alternative. Positive scores push towards the target, negative ones towards
# the foil.

# %%
target_id, foil_id = token_id(tok, CONTRAST_TARGET), token_id(tok, CONTRAST_FOIL)
hits = [t for t, i in enumerate(ins.out_ids) if i == target_id]
if not hits:
    raise ValueError(f"{CONTRAST_TARGET!r} is not a word of the translation {ins.translation!r}: "
                     f"set CONTRAST_TARGET to one of {ins.translation.split()}")
pos = hits[0]
with torch.no_grad():
    logp = torch.log_softmax(model(torch.tensor([ins.src_ids]), torch.tensor([tgt_in]))[0, pos].double(), -1)  # (V,)
print(f"position {pos}: log p({CONTRAST_TARGET}) = {logp[target_id]:.2f}, log p({CONTRAST_FOIL}) = {logp[foil_id]:.2f}")
contrast = attribute(model, ins.src_ids, tgt_in, targets=ins.out_ids, positions=[pos], foil=foil_id, n_steps=4 * ig_steps)
plain = attr["integrated_gradients"].scores[pos]  # (S,)
labels = [f"{j} {t}" for j, t in enumerate(ins.src_tokens)]
figures.grouped_bar_figure(labels, {f"log p({CONTRAST_TARGET})": plain,
                                    f"log p({CONTRAST_TARGET}) − log p({CONTRAST_FOIL})": contrast.scores[0]},
                           title=f"integrated gradients: {CONTRAST_TARGET!r}, and {CONTRAST_TARGET!r} rather than {CONTRAST_FOIL!r}",
                           ylabel="attribution").show()


# %% [markdown]
# Which source word does the contrast point to, and is it the word IBM Model 1 links to the target?

# %%
# the contrast's strongest source word (scores summed over its subwords) against the word IBM Model 1 links to the target
src_words, out_words = word_spans(ins.src_tokens), word_spans(ins.out_tokens)
word_scores = np.zeros(max(src_words) + 1)
for j, w in enumerate(src_words):
    if w >= 0:
        word_scores[w] += float(contrast.scores[0, j])
strongest = int(word_scores.argmax())
aligned = ibm1_align(t_prob, SENTENCE, ins.translation)[out_words[pos]]
source_words = SENTENCE.split()
print(f"{CONTRAST_TARGET!r} rather than {CONTRAST_FOIL!r}: mostly because of {source_words[strongest]!r} "
      f"(IBM Model 1 links {CONTRAST_TARGET!r} to {source_words[aligned] if aligned is not None else 'nothing'!r}); "
      f"the word that pushes most towards {CONTRAST_FOIL!r}: {source_words[int(word_scores.argmin())]!r}")
metrics.update(contrast_value=float(contrast.value[0]), contrast_logprob_gap=float(logp[target_id] - logp[foil_id]),
               contrast_strongest_word=source_words[strongest],
               contrast_aligner_word=source_words[aligned] if aligned is not None else None,
               contrast_completeness_error=float(contrast.relative_completeness_error()[0]))

# %% [markdown]
# ## Agreement over the test set
# Now the same comparison over a seeded sample of test_2016_flickr sentences, each translated greedily and scored on
# its own translation. Per output token (eos left out), the Spearman rank correlation between |attribution| and each
# attention summary over the source tokens, averaged per sentence; error bars are standard errors over sentences.
# Two baselines say what a number means: **random** scores (a fresh uniform draw per token: correlation about 0),
# and a **diagonal** prior that knows only positions (output position $t$ of $T$ favours source position $j$ of $S$
# the closer $j/(S-1)$ is to $t/(T-1)$): German and English word orders are close, so position alone already predicts
# part of any alignment.

# %%
test = load_multi30k("test_2016_flickr", "de", "en")
sample = [test[i] for i in np.random.default_rng(SEED).permutation(len(test))[:n_sentences]]
rows = measure_agreement(model, tok, [s for s, _ in sample], t_prob, methods=METHODS, n_steps=ig_steps,
                         progress=True, baselines=True, per_head=True, seed=SEED)
agree = summarise_agreement(rows)
columns = (*SUMMARIES, "diagonal", "random")
figures.grouped_bar_figure([NAMES[m] for m in METHODS],
                           {c: [agree[f"spearman/{m}/{c}"]["mean"] for m in METHODS] for c in columns},
                           {c: [agree[f"spearman/{m}/{c}"]["se"] for m in METHODS] for c in columns},
                           title=f"rank agreement with each attribution ({len(rows)} sentences)",
                           ylabel="mean Spearman ρ per output token").show()
gaps = {f"{m}/{c}": paired_gap(rows, f"spearman/{m}/{c}", f"spearman/{m}/random") for m in METHODS for c in (*SUMMARIES, "diagonal")}
display(Markdown(figures.markdown_table([{"attribution / compared with": k, "ρ": agree[f"spearman/{k}"]["mean"],
                                          "above random": g["mean"], "in standard errors": g["z"], "sentences": g["n"]}
                                         for k, g in gaps.items()])))

# %% [markdown]
# The second reading of attention is as a word alignment. For every target word, the source word that each view
# weighs most (subwords pooled to words), against the IBM Model 1 aligner's choice: the share of target words on which
# they agree. A **uniform** guess agrees with probability 1 / (number of source words); a **random** word is one draw of
# that guess.

# %%
align_names = (*SUMMARIES, *METHODS, "diagonal", "random", "uniform")
figures.grouped_bar_figure([NAMES.get(n, n) for n in align_names],
                           {"agreement with IBM Model 1": [agree[f"align/{n}"]["mean"] for n in align_names]},
                           {"agreement with IBM Model 1": [agree[f"align/{n}"]["se"] for n in align_names]},
                           title="most weighed source word = the aligner's word", ylabel="share of target words").show()
align_gaps = {n: paired_gap(rows, f"align/{n}", "align/uniform") for n in (*SUMMARIES, *METHODS, "diagonal")}
rollout_vs_last = paired_gap(rows, "align/cross last", "align/rollout")
display(Markdown(figures.markdown_table([{"view": NAMES.get(n, n), "agreement": agree[f"align/{n}"]["mean"],
                                          "above uniform": g["mean"], "in standard errors": g["z"], "sentences": g["n"]}
                                         for n, g in align_gaps.items()])))
ig_total = completeness(rows)
print(f"integrated gradients with {ig_steps} steps: total completeness error {100 * ig_total['relative_error']:.1f} % "
      f"over every scored token (worst single token {100 * ig_total['worst_token_relative_error']:.0f} %)")
metrics.update(n_sentences=len(rows), ig_steps=ig_steps,
               spearman={k: v["mean"] for k, v in agree.items() if k.startswith("spearman/")},
               spearman_gap_z={k: g["z"] for k, g in gaps.items()},
               alignment={k[len("align/"):]: v["mean"] for k, v in agree.items() if k.startswith("align/")},
               alignment_gap_z={k: g["z"] for k, g in align_gaps.items()},
               alignment_last_minus_rollout=rollout_vs_last["mean"], alignment_last_minus_rollout_z=rollout_vs_last["z"],
               ig_corpus_completeness_error=ig_total["relative_error"])

# %% [markdown]
# **Predict, then run.** Switch off the heads whose attention agrees most with the attributions. Will the reference translation lose *more* or *less* log-probability than when as many random heads are switched off (`"more"` or `"less"`)? Write your prediction in the next cell before you run the cells after it (leave `None` to skip: the lesson runs either way).

# %% tags=["answer"]
PREDICT_AGREEING_HEADS_MATTER: str | None = None  # more or less

# %% [markdown]
# ## Switching off the heads that agree most
# If the heads whose attention agrees with the attribution were the ones doing the translating, switching them off
# should hurt more than switching off the heads that disagree. Agreement is measured per cross-attention head on the
# first half of the sentences (with integrated gradients); the damage, the fall in the mean log-probability of the
# human reference translations, is measured on the other half, so a ranking that only fits its own sentences would
# not pass. Beside the most and least agreeing heads: random sets of as many heads, and a **layer-matched** control,
# the least agreeing heads taken from the same layers as the most agreeing ones.

# %%
half = len(rows) // 2
head_agree = head_agreement(rows[:half], "integrated_gradients")  # (L, H)
figures.head_stat_figure(head_agree, [f"cross L{layer}" for layer in range(n_layers)],
                         "agreement of each cross-attention head with integrated gradients (mean Spearman ρ)").show()
n_heads = head_agree.shape[1]
flat = head_agree.flatten()
ranked = [("dec.cross", i // n_heads, i % n_heads) for i in torch.argsort(flat, descending=True, stable=True).tolist()
          if np.isfinite(float(flat[i]))]
most, least = ranked[:N_ABLATE], ranked[::-1][:N_ABLATE]
matched = []  # per layer of the most agreeing set, as many of that layer's least agreeing heads (not in that set)
for layer in sorted({h[1] for h in most}):
    count = sum(h[1] == layer for h in most)
    matched += [h for h in ranked[::-1] if h[1] == layer and h not in most][:count]

# %% [markdown]
# The heads were ranked on the first half of the sentences; they are switched off on the other half, which the
# ranking never saw:

# %%
held = sample[half:]
src_ids, tgt_ids = tok.encode_src([s for s, _ in held]), tok.encode_tgt([t for _, t in held])
idx = token_batches([len(s) for s in src_ids], [len(t) for t in tgt_ids], 1500, shuffle=False)
batches = [make_batch([src_ids[i] for i in b], [tgt_ids[i] for i in b], tok.pad_id) for b in idx]


def reference_logprob(heads):
    """Mean log-probability of the held-out reference tokens with these heads switched off (zero ablation)."""
    with ablate_heads(model, heads):
        return -evaluate(model, batches, tok.pad_id)["loss"]



# %% [markdown]
# Then the fall in the log-probability of the reference tokens for each set of heads, beside twenty random sets of
# the same size:

# %%
gen = torch.Generator().manual_seed(SEED)
all_heads = [("dec.cross", layer, h) for layer in range(n_layers) for h in range(n_heads)]
random_sets = [[all_heads[i] for i in torch.randperm(len(all_heads), generator=gen)[:N_ABLATE].tolist()] for _ in range(20)]
full = reference_logprob([])
drop = {"most agreeing": full - reference_logprob(most), "least agreeing": full - reference_logprob(least),
        "layer-matched, least agreeing": full - reference_logprob(matched) if len(matched) == len(most) else float("nan")}
drop_random = [full - reference_logprob(r) for r in random_sets]
drop["random (mean of 20)"] = float(np.mean(drop_random))
print(f"mean log p(reference token) on {len(held)} held-out sentences: {full:.3f} with every head")
print("most agreeing:", most, "\nleast agreeing:", least, "\nlayer-matched control:", matched)
figures.bar_figure(list(drop), list(drop.values()), title=f"switching off {N_ABLATE} cross-attention heads",
                   ylabel="fall in mean log p(reference token)").show()
metrics.update(logprob_all_heads=full, logprob_drop_most_agreeing=drop["most agreeing"],
               logprob_drop_least_agreeing=drop["least agreeing"], logprob_drop_random_mean=drop["random (mean of 20)"],
               logprob_drop_layer_matched=drop["layer-matched, least agreeing"],
               most_agreeing_heads=[list(h) for h in most], least_agreeing_heads=[list(h) for h in least])


# %%
from workbench.lessons import exercises as ex
ex.predict("13.agreeing_heads_matter", PREDICT_AGREEING_HEADS_MATTER, "more" if drop["most agreeing"] > drop["random (mean of 20)"] else "less",
           "Agreeing with an attribution is not the same as being needed: the layer-matched control in the table says whether the damage comes from the heads themselves or from the layers they sit in.")

# %% [markdown]
# ## What we found
#
# Read with the numbers printed above (the default run uses 40 test sentences; `bench/attention_vs_attribution.py`
# runs the same measurement on the whole test set).
#
# * **Attention and attribution agree far above chance, but position explains much of it.** Every attention summary
#   ranks the source tokens the way every attribution does much more often than random scores would; yet the diagonal
#   prior, which knows nothing but positions, agrees with saliency and input × gradient about as well as attention
#   does, and only integrated gradients puts attention clearly ahead of it (the whole test set shows the same pattern:
#   `bench/results/attention-vs-attribution-cpu-02f7775.json`, whose integrated-gradients figures are on the book's
#   Benchmarks page). A rank correlation between attention and attribution alone is therefore weak evidence that
#   attention *explains*: much of it is shared word order.
# * **As a word alignment, raw attention beats its rollout.** The last layer's cross-attention (and the average over
#   layers) picks the aligner's word several times as often as a uniform guess, and more often than the diagonal
#   prior. Rolling attention out through all layers, which is meant to account for the mixing of the residual stream,
#   smears it over the sentence (on the sentence above, rollout piles weight on the first source token and the flow
#   is almost flat): it picks the aligner's word barely more often than chance. Integrated gradients, which
#   does not look at attention at all, agrees with the aligner most often.
# * **Agreement tells layers apart, not heads.** The least agreeing heads sit in the first decoder layer, and switching
#   them off costs almost nothing, less than random sets of as many heads. The most agreeing heads sit in the later
#   layers (the default run: two in the last, two in the middle one) and cost more to lose than the least agreeing
#   ones. But inside those layers agreement does not rank the heads:
#   the layer-matched control (the same layer's *least* agreeing heads) hurts about as much as the most agreeing
#   ones, on some samples more, and with two heads per group the most agreeing pair can hurt less than a random
#   pair (see Try it). Agreement picks out which layer the translation leans on, not which head inside it.
# * **Contrast asks a narrower question.** "Why *girl*?" and "why *girl* rather than *boy*?" both point at *Mädchen*
#   on the default sentence, the word the aligner links to *girl*; the contrast also shows which words push towards
#   the foil (negative bars: on the default sentence the article *Ein* pushes most towards *boy*, as printed above).
# * **Integrated gradients converges slowly here.** ReLU networks make the integrand jump, so completeness improves
#   only about in proportion to the number of steps, and only once the steps resolve the path: the convergence check
#   above prints the share of the change left unexplained on the default sentence at each step count, and the
#   agreement study prints it summed over its test sentences at its own step count; single tokens whose
#   log-probability hardly changes can be far worse. Rank correlations need far less accuracy than sums, so the
#   agreement study runs with fewer steps than the completeness check would like: read its integrated-gradients
#   correlations as measured against an approximate attribution.

# %%
metrics.update(ex.summary())  # every exercise's check and prediction, read back by `workbench notebooks grade`

# %%
metrics["cpu_seconds"] = time.process_time() - cpu_start
with open("metrics.json", "w") as f:
    json.dump(metrics, f, indent=1)
# integrated gradients converges: from the section's steps, four times as many cut the sentence's completeness error
# by more than half (a rule whose error falls like 1/steps cuts it to about a quarter; an attribution of the wrong
# function would not fall). Measured from the section's 4x, not from 1x: at the fewest steps the rule has not yet
# resolved the path, so the error can barely move between 1x and 4x before it falls steeply (the section prints the
# error at each step count)
assert metrics["ig_completeness_error_16x"] < 0.5 * metrics["ig_completeness_error_4x"]

# %%
# every attention summary ranks the source tokens like every attribution, far above random scores: the per-sentence
# gap to the random baseline is more than 3 standard errors above zero (one-sided, also with the 20 SMOKE sentences)
assert min(metrics["spearman_gap_z"][f"{m}/{s}"] for m in METHODS for s in SUMMARIES) > 3
# ... and so does the position-only diagonal prior, which is why a rank correlation alone explains little
assert min(metrics["spearman_gap_z"][f"{m}/diagonal"] for m in METHODS) > 3
# last-layer attention and integrated gradients pick the aligner's word more often than a uniform guess (3 s.e.)
assert metrics["alignment_gap_z"]["cross last"] > 3 and metrics["alignment_gap_z"]["integrated_gradients"] > 3
# the rollout points at the aligner's word less often than raw last-layer attention (3 s.e. over sentences)
assert metrics["alignment_last_minus_rollout_z"] > 3

# %%
# heads ranked by agreement on one half, damage on the other: the least agreeing heads cost less to lose than the most
# agreeing ones (it held at every SMOKE seed tried while developing). Below random heads too once the held-out half
# is large enough to judge: with the 10 SMOKE sentences it failed at one seed in six, where the random sets barely hurt
# those sentences, so it is asserted only from 30 held-out sentences (the default).
# Most agreeing > random is not claimed: the layer-matched control shows that agreement ranks layers, not heads.
assert metrics["logprob_drop_least_agreeing"] < metrics["logprob_drop_most_agreeing"]
if len(held) >= 30:
    assert metrics["logprob_drop_least_agreeing"] < metrics["logprob_drop_random_mean"]
# what was attributed is the log-probability gap that a plain forward pass gives (float32 logits: 1e-4)
assert abs(metrics["contrast_value"] - metrics["contrast_logprob_gap"]) < 1e-4
# the contrast is explained by the word the aligner links to the target (a lexical contrast such as girl/boy)
assert metrics["contrast_strongest_word"] == metrics["contrast_aligner_word"]

# %% [markdown]
# ## Try it
#
# * `workbench notebooks run --only 13 -p IG_STEPS=128` — integrated gradients with four times the steps: the
#   completeness errors of sections 1 and 3 should fall roughly fourfold; compare how little the rank correlations
#   and the alignment agreement of integrated gradients move.
# * `workbench notebooks run --only 13 -p CONTRAST_FOIL=child` — "girl rather than child" instead of "rather than boy":
#   compare which words push towards the foil; a foil that the model finds almost as likely gives a small, sharper
#   contrast.
# * `workbench notebooks run --only 13 -p N_ABLATE=2` — two heads per group: on a 10-sentence sample the two most
#   agreeing heads (both in the last layer) hurt *less* than random pairs and even less than the two least agreeing
#   ones, while the same layer's two least agreeing heads hurt several times more. The closing check "least agreeing
#   < most agreeing" then fails (the run is reported as failed, after metrics.json is written): it is a claim about
#   groups of four, where the last layer's joint contribution shows, not about single heads.
