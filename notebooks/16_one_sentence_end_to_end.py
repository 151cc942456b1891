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
# # 16 · One sentence, end to end
#
# Lessons 02 to 07 built the Transformer piece by piece; from 09 on it translated through one call. Here we open that
# call and follow a single German sentence through the shipped translator `small-de-en`: its subword pieces and ids,
# the scaled embeddings plus positions, every encoder layer, the memory the decoder reads, then decoding one token at
# a time — the five most probable next tokens, where the new token looks in the source, the key/value cache growing —
# and finally beam search drawn as a tree, with the length penalty α deciding which finished hypothesis wins.
#
# Every number in the text below is printed by the cells, on the sentence you choose.

# %% tags=["parameters"]
SMOKE: bool = False  # fewer α values checked against beam search (what CI runs)
SEED: int = 0  # seeds every random draw (nothing here is random once the model is loaded)
SENTENCE: str = "Drei Menschen auf zwei Geländemotorrädern und einem Quad fahren durch braunes Gras."  # a Multi30k val caption
BEAM: int = 4  # beam size (the paper's 4)
ALPHA: float = 0.6  # length penalty of the tree figure (the paper's 0.6)
ALPHA_OTHER: float = 1.4  # a second length penalty to compare (the shipped model's, chosen on val)
TOP_K: int = 5  # next-token candidates shown per greedy step

# %%
import json
import math
import numpy as np
import torch
import workbench as wb
from IPython.display import Markdown, display
from workbench.viz import figures
from workbench.viz import decoding_figures as dfig
from workbench.translation.decode import beam_search, greedy_decode
from workbench.translation.decode_trace import trace_beam, rerank, kv_cache_bytes, cache_bytes
from workbench.inspect.greedy_trace import trace_greedy
from workbench.inspect.lens_paths import beam_tree_leads
from workbench.lessons.flops import decode_step_macs
from workbench.lessons.measure import counted_flops
figures.setup_offline_renderer()
wb.set_seed(SEED)
torch.set_grad_enabled(False)  # inference only: no autograd graph behind the tensors we print
metrics = {}

model, tok, card = wb.pretrained("small-de-en")
cfg = model.cfg
print(f"{card['title']}: {cfg.n_enc_layers}+{cfg.n_dec_layers} layers, d_model {cfg.d_model}, {cfg.n_heads} heads, "
      f"{card['vocab_size']} joint subwords; trained on Multi30k image captions only")

# %% [markdown]
# ## The sentence becomes pieces, then ids
#
# The tokenizer normalises the text (Unicode NFKC), marks word starts with `▁`, starts each word from its single
# characters and applies its byte-pair merges in the order they were learned, each merge joining every adjacent pair
# it names (lesson 08 learns such merges by hand). That is not a search for the longest known piece (WordPiece's
# greedy longest match): a word ends in whatever pieces the merge order leaves. Rare words break into several
# pieces; the end-of-sentence token closes the source. Each piece has one id in the joint German-English vocabulary.

# %%
pieces = tok.tokens_src(SENTENCE)
ids = tok.encode_src([SENTENCE])[0]
src = torch.tensor([ids])                                    # (1, S)
S = src.shape[1]
display(Markdown(figures.markdown_table([{"position": i, "piece": p, "id": t} for i, (p, t) in enumerate(zip(pieces, ids))])))
words = len(SENTENCE.split())
print(f"{words} words -> {S} pieces (eos included); src shape {tuple(src.shape)}")
assert ids[-1] == tok.eos_id and len(pieces) == S
metrics.update(n_words=words, n_pieces=S)

# %% [markdown]
# ## Embeddings, scaled, plus positions
#
# Each id picks a row of the embedding matrix (shared by source, target and the output projection here: three-way
# tying). The paper multiplies it by $\sqrt{d_{model}}$ (§3.4) and adds the sinusoidal position vector (§3.5). The
# embedding rows were initialised with standard deviation $d_{model}^{-1/2}$, so they started with norm near 1;
# the scaling brings them to the size of a position vector, whose norm is exactly $\sqrt{d_{model}/2}$, so neither
# drowns the other. The printed norms show where training left them.

# %%
emb = model.src_embed
tokens = emb.tokens(src)                                     # (1, S, D)
scaled = tokens * math.sqrt(cfg.d_model)                     # (1, S, D)
positions = wb.sinusoidal_table(S, cfg.d_model)[None]        # (1, S, D)
x0 = scaled + positions                                      # (1, S, D): the encoder's input
print("token rows", tuple(tokens.shape), "norms:", np.round(tokens[0].norm(dim=-1).numpy(), 2))
print("scaled by √d_model =", round(math.sqrt(cfg.d_model), 2), "norms:", np.round(scaled[0].norm(dim=-1).numpy(), 1))
print("position rows norms:", np.round(positions[0].norm(dim=-1).numpy(), 2), "= √(d_model/2) =", round(math.sqrt(cfg.d_model / 2), 2))
embed_error = float((x0 - emb(src)).abs().max())               # the model's own embedding layer (eval: no dropout)
print(f"by hand vs the model's embedding layer: max difference {embed_error:.2e}")
metrics.update(embed_error=embed_error)

# %% [markdown]
# ## Through the encoder, layer by layer
#
# Each encoder layer keeps the shape (1, S, d_model): self-attention mixes the positions, the feed-forward network
# transforms each one, and after each sub-layer the residual sum is layer-normalised (post-LN, §3.1). The norm of
# each position's vector is printed after every layer. LayerNorm resets every vector to mean 0 and variance 1 (norm
# $\sqrt{d_{model}}$) and then multiplies by its learned gain $\gamma$ and adds its bias $\beta$, so what leaves a
# layer has a size set by that layer's last $\gamma$ and $\beta$, not by what the sub-layers added: the norms are
# alike across positions within a layer, but they change from layer to layer as the learned gains do. The cell
# prints each layer's $\sqrt{\lVert\gamma\rVert^2 + \lVert\beta\rVert^2}$ beside its mean norm (the size a
# normalised vector would get if its coordinates were independent of $\gamma$): the two rank the layers alike.

# %%
mask = model.src_mask(src)                                   # (1, 1, 1, S) True = may attend
x = x0
norms = [x0[0].norm(dim=-1)]
gain_sizes = []                                              # sqrt(|γ|² + |β|²) of each layer's last LayerNorm
for i, layer in enumerate(model.encoder_layers):
    x = layer(x, mask)                                       # (1, S, D)
    norms.append(x[0].norm(dim=-1))
    last_ln = [m for m in layer.modules() if isinstance(m, torch.nn.LayerNorm)][-1]
    gain_sizes.append(float((last_ln.weight.pow(2).sum() + last_ln.bias.pow(2).sum()).sqrt()))
    print(f"after encoder layer {i}: shape {tuple(x.shape)}, position norms {np.round(norms[-1].numpy(), 1)}; "
          f"mean {float(norms[-1].mean()):.1f}, the last LayerNorm's √(|γ|²+|β|²) = {gain_sizes[-1]:.1f}")
layer_means = [float(n.mean()) for n in norms[1:]]
norms_follow_gains = bool(np.array_equal(np.argsort(layer_means), np.argsort(gain_sizes)))
print("the layers' mean norms rank as their LayerNorm gains do:", norms_follow_gains)
metrics.update(layer_mean_norms=layer_means, layer_gain_sizes=gain_sizes, norms_follow_gains=norms_follow_gains)
memory = model.encoder_norm(x)                               # identity for post-LN
encoder_error = float((memory - model.encode(src)).abs().max())
print(f"memory {tuple(memory.shape)}; by hand vs model.encode: max difference {encoder_error:.2e}")
figures.line_figure(list(range(S)), {("input" if l == 0 else f"after layer {l - 1}"): n.numpy() for l, n in enumerate(norms)},
                    xlabel="source position", ylabel="‖x‖", title="residual-stream norm per position").show()
metrics.update(encoder_error=encoder_error)

# %% [markdown]
# ## Greedy decoding, one token at a time
#
# The decoder starts from `<bos>` and at every step turns the prefix so far and the memory into a distribution over
# the next token; greedy decoding takes the most probable one and feeds it back. The table shows, for every step, the
# token fed, the five most probable next tokens with their probabilities, and the source piece the new token's
# cross-attention (last layer, mean over heads) weights most.

# %%
g = trace_greedy(model, src, k=TOP_K, bos_id=tok.bos_id, eos_id=tok.eos_id)
label = lambda i: tok.id_to_token(i, "tgt")  # noqa: E731
fed = [tok.bos_id] + g.tokens[:-1]
rows = []
for t, token in enumerate(g.tokens):
    cross_row = g.cross[t, -1].mean(0)                       # (S,) last layer, heads averaged
    rows.append({"step": t + 1, "fed": label(fed[t]),
                 "top-5 next (p)": ", ".join(f"{label(i)} {p:.2f}" for i, p in zip(g.top_ids[t].tolist(), g.top_probs[t].tolist())),
                 "emitted": label(token), "looks most at": pieces[int(cross_row.argmax())]})
display(Markdown(figures.markdown_table(rows)))
greedy_text = tok.decode_tgt([[i for i in g.tokens if i != tok.eos_id]])[0]
print("greedy:", greedy_text)
dfig.topk_figure([f"{r['step']}: → {r['emitted']}" for r in rows], [[label(i) for i in row] for row in g.top_ids.tolist()],
                 g.top_probs, title=f"top-{TOP_K} next tokens at each greedy step").show()
figures.attention_heatmap(g.cross[:, -1].mean(1), [label(i) for i in g.tokens], pieces,
                          title="cross-attention of each generated token (last layer, mean over heads)").show()
top1_is_emitted = g.top_ids[:, 0].tolist() == g.tokens
same_as_greedy = g.tokens == [i for i in greedy_decode(model, src, bos_id=tok.bos_id, eos_id=tok.eos_id)[0].tolist() if i != model.pad_id]
cross_rows_sum = float((g.cross.sum(-1) - 1).abs().max())
print(f"top-1 is the emitted token at every step: {top1_is_emitted}; same output as greedy_decode: {same_as_greedy}")
metrics.update(greedy=greedy_text, greedy_steps=len(g.tokens), top1_is_emitted=top1_is_emitted,
               greedy_trace_equals_greedy_decode=same_as_greedy, cross_row_sum_error=cross_rows_sum,
               mean_top1_prob=float(g.top_probs[:, 0].mean()))

# %% [markdown]
# ## The key/value cache
#
# Step t needs the keys and values of all t tokens fed so far. Without a cache the decoder recomputes the whole
# prefix at every step; with it, each step runs only the newest token and appends its keys and values (per decoder
# layer: self-attention rows that grow by one per step, and the memory's cross-attention keys and values, computed
# once). We run the steps ourselves, measure the bytes the cache tensors hold, and set them beside the formula
# $L \cdot (t + S) \cdot (h d_k + h d_v) \cdot 4$ bytes (float32); the multiply-adds of a step with and without the
# cache come from :func:`~workbench.lessons.flops.decode_step_macs`, and PyTorch's FLOP counter checks them (it counts
# every matrix product except the fused attention kernel, so the check leaves that part out).

# %%
cache = model.init_cache()
steps, held, formula, macs_cached, macs_full, counted_ok = [], [], [], [], [], True
max_logit_diff = 0.0
for t in range(1, len(g.tokens) + 1):
    prefix = torch.tensor([fed[:t]])                         # (1, t)
    cached_logits = model.decode(prefix[:, -1:], memory, mask, cache)[:, -1]   # feeds one token: (1, V)
    full_logits = model.decode(prefix, memory, mask)[:, -1]                     # recomputes t tokens: (1, V)
    max_logit_diff = max(max_logit_diff, float((cached_logits - full_logits).abs().max()))
    steps.append(t)
    held.append(cache_bytes(cache))
    formula.append(kv_cache_bytes(cfg, t, S))
    parts = {c: decode_step_macs(cfg, t, S, model.tgt_vocab_size, cached=c) for c in (True, False)}
    macs_cached.append(parts[True]["total"])
    macs_full.append(parts[False]["total"])
    if t <= (3 if SMOKE else len(g.tokens)):
        c = counted_flops(lambda: model.decode(prefix, memory, mask))
        counted_ok &= c == 2 * (parts[False]["total"] - parts[False]["attention"])
saved = 1 - sum(macs_cached) / sum(macs_full)
print(f"after {steps[-1]} steps the cache holds {held[-1]:,} bytes (formula: {formula[-1]:,})")
print(f"multiply-adds for the whole sentence: {sum(macs_cached):,} with the cache, {sum(macs_full):,} recomputing "
      f"({saved:.0%} saved); cached and recomputed logits differ by at most {max_logit_diff:.1e}")
dfig.kv_cache_figure(steps, held, macs_cached, macs_full, title="the key/value cache while decoding this sentence").show()
metrics.update(cache_bytes_match=held == formula, cache_bytes_final=held[-1], macs_saved_fraction=saved,
               macs_counted_match=bool(counted_ok), cache_logit_diff=max_logit_diff)

# %% [markdown]
# ## Beam search as a tree
#
# Beam search keeps the `BEAM` best partial translations (by summed log-probability) instead of one. At every step each
# one proposes its best extensions; the best `BEAM` of all proposals survive (blue), the others are pruned (grey,
# dotted), and a hypothesis that emits `<eos>` is finished (green) and waits, its score frozen. A finished
# hypothesis keeps its slot in the beam: with two of the `BEAM` slots finished, only the other two are extended at
# the next step, until a better-scoring extension pushes a finished one out (the same rule as `beam_search`; the
# other common variant, `keep_finished=True`, keeps finished hypotheses aside instead). The search stops when
# no unfinished hypothesis can still beat the best finished one, and returns the finished hypothesis with the best
# length-normalised score $\log P(Y) / lp(Y)$, $lp(Y) = ((5 + |Y|)/6)^\alpha$ (the paper's §6.1, from GNMT). Hover a
# node for its whole hypothesis and scores; the red path is the winner, the dashed line where the search stops.
# The hover also names the decoder layer from which the node's word leads: read through the model's own output
# projection (the *logit lens* of lesson 18), from that layer on the word is the top choice. A word the beam kept
# although it was not the model's top choice never leads.
# No hypothesis may run past the paper's output budget, the input length + 50 tokens (§6.1): at that step only
# `<eos>` is allowed.

# %%
trace = trace_beam(model, src, beam=BEAM, bos_id=tok.bos_id, eos_id=tok.eos_id)
text = lambda ids: tok.decode_tgt([[i for i in ids if i != tok.eos_id]])[0]  # noqa: E731


def describe(alpha):
    r = rerank(trace, alpha)
    in_beam = [i for i in r.beam if i >= 0 and trace.nodes[i].status == "finished"]
    return r, (f"α = {alpha:g}: {len(trace.nodes) - 1} hypotheses considered over {trace.steps} steps, "
               f"{sum(n.status == 'pruned' for n in trace.nodes)} pruned, {len(trace.finished())} finished in all; the search stops after "
               f"step {r.stop_step} with {len(in_beam)} finished in the beam and returns “{text(trace.hypothesis(r.winner))}” "
               f"({len(trace.hypothesis(r.winner))} tokens, log P = {trace.nodes[r.winner].logp:.2f}, "
               f"log P / lp = {r.normalised.get(r.winner, float('nan')):.3f})")


ranking, line = describe(ALPHA)
print(line)

# %% [markdown]
# The whole tree (hover a node for its words, its score and the decoder layer from which its word first leads):

# %%
leads = beam_tree_leads(model, src[0], trace)  # node id -> the layer its word leads from (-1: never)
dfig.beam_tree_figure(trace, label, ranking, title=f"beam {BEAM} on this sentence, α = {ALPHA:g}", leads=leads).show()
want = beam_search(model, src, beam=BEAM, alpha=ALPHA, bos_id=tok.bos_id, eos_id=tok.eos_id)[0]
traced_equals_beam_search = trace.hypothesis(ranking.winner) == [i for i in want.tolist() if i != model.pad_id]
print("the traced winner is beam_search's output:", traced_equals_beam_search)
print(f"output budget: {trace.limit} tokens = {S} source pieces + 50; the longest hypothesis considered has "
      f"{max(n.step for n in trace.nodes)} tokens")

# %%
metrics.update(budget_is_input_plus_50=trace.limit == min(S + 50, cfg.max_len - 1))
metrics.update(lens_leads_every_node=set(leads) == {n.id for n in trace.nodes[1:]}
               and all(-1 <= v < cfg.n_dec_layers for v in leads.values()),
               lens_never_leading_nodes=sum(v == -1 for v in leads.values()))
metrics.update(traced_equals_beam_search=traced_equals_beam_search, beam_nodes=len(trace.nodes) - 1,
               beam_pruned=sum(n.status == "pruned" for n in trace.nodes), beam_finished=len(trace.finished()),
               winner_alpha=text(trace.hypothesis(ranking.winner)))

# %% [markdown]
# ### Exercise 16.rerank_finished · `rerank_finished`
#
# Before the search's own ranking below, write it: given the summed log-probabilities `logp` of $N$ finished
# hypotheses and their lengths $|Y|$ (generated tokens, `<eos>` included, the start token not), return every
# normalised score $\log P(Y) / lp(Y)$ with $lp(Y) = ((5 + |Y|)/6)^\alpha$, and the index of the best one (a
# Python `int`; on a tie, the first of the tied hypotheses, as `torch.argmax` and the search choose).
#
# Shapes: `logp` (N,) float, `lengths` (N,) long, `alpha` a float → ((N,) float, an int). The check also takes
# gradients through the scores: write them in torch operations, without `torch.no_grad()`.

# %% tags=["exercise", "hide-input"]
def rerank_finished(logp, lengths, alpha):
    """GNMT-normalised scores of finished hypotheses and the index of the best. Shapes: (N,), (N,) -> (N,), int."""
    # BEGIN SOLUTION NO PROMPT
    normalised = logp / ((5 + lengths) / 6) ** alpha  # (N,)
    return normalised, int(normalised.argmax())
    # END SOLUTION
    """ # BEGIN PROMPT
    raise NotImplementedError("write rerank_finished, then run the check below")
    """  # END PROMPT

# %%
from workbench.lessons import exercises as ex
result = ex.check("16.rerank_finished", rerank_finished)
rerank_finished = result.function  # yours if it passed, else the package's
result

# %%
finished = trace.finished()  # node ids of every hypothesis that emitted <eos>, in or out of the final beam
finished_logp = torch.tensor([trace.nodes[i].logp for i in finished], dtype=torch.float64)
finished_len = torch.tensor([trace.nodes[i].step for i in finished])
for a in (0.0, ALPHA, ALPHA_OTHER):
    scores, best = rerank_finished(finished_logp, finished_len, a)
    print(f"α = {a:g}: the best of the {len(finished)} finished hypotheses is “{text(trace.hypothesis(finished[best]))}” "
          f"({int(finished_len[best])} tokens, log P / lp = {float(scores[best]):.3f})")

# %% [markdown]
# **Predict, then run.** Which length penalty will return the longer translation of this sentence: `ALPHA` or `ALPHA_OTHER` (answer with its value, e.g. `"1.4"`, or `"same"`)? Write your prediction in the next cell before you run the cells after it (leave `None` to skip: the lesson runs either way).

# %% tags=["answer"]
PREDICT_LONGER_ALPHA: str | None = None  # the value of ALPHA or of ALPHA_OTHER, or same

# %% [markdown]
# ## The length penalty picks the winner
#
# Every extra token adds a negative log-probability, so without a penalty (α = 0) short hypotheses win. Dividing by
# $lp(Y)$, which grows with the length, forgives longer ones more as α grows. The finished hypotheses do not change
# with α (the search's choices compare plain summed log-probabilities); only where it stops and which one it returns
# do. Below: the two α values side by side, every finished hypothesis's normalised score as α runs from 0 to 3 (the
# black dots mark the one returned), and a slider that re-ranks them live.
#
# Compare the two winners word by word (the cell prints the words one has and the other lacks). A short winner at
# a small α often *drops* part of the source, sometimes a whole phrase: each extra word costs
# log-probability, and a weak length penalty does not pay that back. This under-translation is what a larger α, or
# GNMT's coverage penalty (which the paper does not use), counters; BLEU's brevity penalty punishes it only weakly.

# %%
ranking_other, line_other = describe(ALPHA_OTHER)
print(line)
print(line_other)
alphas = np.round(np.arange(0.0, 3.01, 0.1), 2)
rankings = [rerank(trace, float(a)) for a in alphas]
names = {i: f"{k + 1}. {text(trace.hypothesis(i))}" for k, i in enumerate(trace.finished())}
curves = {names[i]: [r.normalised[i] for r in rankings] for i in trace.finished()}
returned = [names.get(r.winner, "") for r in rankings]
dfig.alpha_figure(alphas, curves, returned, title="each finished hypothesis against α").show()
checked = (0.0, ALPHA, ALPHA_OTHER) if SMOKE else (0.0, 0.3, ALPHA, 1.0, ALPHA_OTHER, 2.0, 3.0)
agree = [trace.hypothesis(rerank(trace, a).winner) ==
         [i for i in beam_search(model, src, beam=BEAM, alpha=a, bos_id=tok.bos_id, eos_id=tok.eos_id)[0].tolist() if i != model.pad_id]
         for a in checked]
print(f"re-ranking agrees with a fresh beam_search at α in {checked}: {agree}")
changes = ranking.winner != ranking_other.winner
print(f"α = {ALPHA:g} and α = {ALPHA_OTHER:g} return {'different' if changes else 'the same'} translations")
w_a, w_b = text(trace.hypothesis(ranking.winner)).split(), text(trace.hypothesis(ranking_other.winner)).split()
print(f"words of the α = {ALPHA_OTHER:g} winner missing from the α = {ALPHA:g} winner: {[w for w in w_b if w not in w_a]}; "
      f"the other way: {[w for w in w_a if w not in w_b]}")
metrics.update(rerank_agrees_at=dict(zip([str(a) for a in checked], agree)), winner_changes=changes,
               winner_alpha_other=text(trace.hypothesis(ranking_other.winner)),
               n_distinct_winners=len({r.winner for r in rankings}))


# %%
from workbench.lessons import exercises as ex
ex.predict("16.longer_alpha", PREDICT_LONGER_ALPHA, ("same" if len(trace.hypothesis(ranking.winner)) == len(trace.hypothesis(ranking_other.winner)) else f"{ALPHA:g}" if len(trace.hypothesis(ranking.winner)) > len(trace.hypothesis(ranking_other.winner)) else f"{ALPHA_OTHER:g}"),
           "A larger α divides by a larger lp(Y), which grows with the length, so longer finished hypotheses are forgiven more of their (negative) log-probability: the larger α returns the longer translation, or the same.")

# %%
from workbench.viz.decoding_widgets import LengthPenaltyExplorer
LengthPenaltyExplorer(trace, lambda ids: tok.decode_tgt([ids])[0], alpha=ALPHA)

# %% [markdown]
# ## In your browser
#
# The book's page *Translate in your browser* runs this model in the reader's browser (ONNX Runtime Web, with the
# encoder and the cached decoder step of `workbench export small-de-en DIR --to onnx`): greedy or beam 4 with the α
# slider, the pieces of both sides, and each output word's cross-attention. In the served book
# (`workbench book serve --dir book`) it appears below; in Jupyter the frame stays empty.

# %%
from IPython.display import IFrame
IFrame("_static/translate/embed.html", width="100%", height=1000)

# %% [markdown]
# ## The inspector, while decoding
#
# The attention inspector of lesson 10 shows the same things for any sentence you type: open its "while decoding"
# panel for each generated token's cross-attention as greedy decoding computed it, and, with beam 4, the search's tree.
# Its note says what `small-de-en` knows: it learned from image captions only, so try a sentence from elsewhere and
# watch the translation fall apart. To open it here, run
# `AttentionInspector(model, tok, sentence=SENTENCE, beam=4, card=card)` after
# `from workbench.viz.widgets import AttentionInspector`.
#
# Compare the two winners word by word (the cell prints the words one has and the other lacks). A short winner at
# a small α often *drops* part of the source, sometimes a whole phrase: each extra word costs
# log-probability, and a weak length penalty does not pay that back. This under-translation is what a larger α, or
# GNMT's coverage penalty (which the paper does not use), counters; BLEU's brevity penalty punishes it only weakly.

# %%
metrics.update(ex.summary())  # every exercise's check and prediction, read back by `workbench notebooks grade`

# %%
with open("metrics.json", "w") as f:
    json.dump(metrics, f, indent=1, ensure_ascii=False)
# the hand-built embedding and encoder are the model's (float32 rounding only)
assert metrics["embed_error"] < 1e-5 and metrics["encoder_error"] < 1e-4
# each layer's output size follows its LayerNorm's learned gain and bias, not one size for all layers
assert metrics["norms_follow_gains"]
# greedy's trace is greedy decoding: the same tokens, each the top-1 of its step; every cross row is a distribution
assert metrics["greedy_trace_equals_greedy_decode"] and metrics["top1_is_emitted"] and metrics["cross_row_sum_error"] < 1e-5
# the cache holds what the formula says, changes nothing, and saves work; the FLOP counter agrees with the formula
assert metrics["cache_bytes_match"] and metrics["cache_logit_diff"] < 1e-4 and metrics["macs_counted_match"]
assert metrics["macs_saved_fraction"] > 0
# the tree's winner is beam_search's at every α checked
assert metrics["traced_equals_beam_search"] and all(metrics["rerank_agrees_at"].values())
# the paper's output budget: input length + 50 (capped by the positional table)
assert metrics["budget_is_input_plus_50"]
# the lens names a layer (or "never") for every node, and some words the beam considered never lead: beam search
# extends hypotheses with words that are not the model's top choice
assert metrics["lens_leads_every_node"] and metrics["lens_never_leading_nodes"] > 0

# %% [markdown]
# ## Try it
#
# * `workbench notebooks run --only 16 -p SENTENCE="Ein halbnackter Mann schläft draußen auf seinem Stuhl."` —
#   another caption: which greedy steps are unsure (a low top-1 probability), and does α change its beam winner?
# * `workbench notebooks run --only 16 -p BEAM=8` — a wider beam: how many more hypotheses are pruned, and does the
#   winner at α = 0.6 change?
# * `workbench notebooks run --only 16 -p SENTENCE="Die Frau sagt , dass sie müde ist ."` — a sentence unlike the image
#   captions the model learned from: watch the top-5 probabilities fall and the cross-attention rows blur.
