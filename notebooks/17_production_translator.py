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
# # 17 · A production translator under the same lens
#
# Openly released translators are close cousins of the paper's model. The opus-mt family (models trained with the
# Marian toolkit on the OPUS corpora and published for Hugging Face transformers, more than a thousand language
# pairs) is a post-LN encoder-decoder with sinusoidal positions and tied embeddings, like ours, with four named
# differences: a swish feed-forward activation, a bias
# on the output projection, a sinusoidal table with every sine first and every cosine second (the paper interleaves
# them), and a pad token that also starts the decoder. In symbols, its feed-forward network is
# $\mathrm{FFN}(x) = \mathrm{swish}(x W_1 + b_1) W_2 + b_2$ with $\mathrm{swish}(z) = z\,\sigma(z)$ where the paper
# has $\max(0, z)$, and its position $pos$ fills dimension $i < d_{model}/2$ with $\sin(pos / 10000^{2i/d_{model}})$
# and dimension $i + d_{model}/2$ with the matching cosine. `wb.pretrained("Helsinki-NLP/opus-mt-de-en")` converts such
# a model into the workbench's own Transformer, so every inspector of the earlier lessons opens it.
#
# We first check that the converted model computes what transformers computes, then set it beside `small-de-en`:
# how peaked their heads are, how often their cross-attention agrees with the IBM-1 word aligner, and one
# sentence's cross-attention side by side.
#
# Without opus-mt in the local Hugging Face cache (and no network), the lesson still compares trained models: it
# exports `small-de-en` to Marian's layout (`workbench export --to huggingface` does the same), loads that folder with
# transformers' `MarianMTModel` and converts it back. The second translator is then `small-de-en` itself, written in
# Marian's conventions (sines-then-cosines positions, an output bias, the weights renamed and split), so every
# comparison must come out equal: a check that the conversion preserves not only the logits but every head. With
# opus-mt cached, the same cells compare two different trained translators.

# %% tags=["parameters"]
SMOKE: bool = False  # fewer sentences (what CI runs)
SEED: int = 0  # seeds every random draw
HF_MODEL: str = "Helsinki-NLP/opus-mt-de-en"  # a Marian model of the Hugging Face Hub, German to English
N_SENTENCES: int = 100  # validation sentences for head statistics and alignment agreement (SMOKE: 16)
SENTENCE: str = "Ein kleines Mädchen klettert in ein Spielhaus aus Holz."  # the sentence drawn side by side

# %%
import json
import tempfile
import numpy as np
import torch
import transformers
import workbench as wb
from workbench.errors import BridgeError
from workbench.bridges.huggingface import from_huggingface, to_huggingface
from workbench.translation.data import load_multi30k
from workbench.inspect.heads import head_entropy
from workbench.inspect.inspection import inspect_translation
from workbench.inspect.align import ibm1, ibm1_align, word_spans, word_attention, alignment_agreement
from workbench.viz import figures
figures.setup_offline_renderer()
wb.set_seed(SEED)
metrics = {}
n_sentences = 16 if SMOKE else N_SENTENCES

# %% [markdown]
# ## The two translators
#
# `small-de-en` ships with the workbench. The production model comes from the local Hugging Face cache (or the Hub
# when online); without it, `small-de-en` exported to Marian's layout stands in (see above). We keep transformers' own
# model too, to compare the conversion with it.

# %%
small, small_tok, card = wb.pretrained("small-de-en")
try:
    prod, prod_tok, prod_info = wb.pretrained(HF_MODEL)
    hf_model = transformers.MarianMTModel.from_pretrained(prod_info["folder"]).eval()
    hf_tok = prod_tok.hf
    real = True
except BridgeError as err:
    print(f"{err}\n-> offline: small-de-en exported to Marian's layout, loaded by transformers, converted back")
    with tempfile.TemporaryDirectory() as folder:
        to_huggingface(small, small_tok, folder)                    # config.json, model.safetensors, tokenizer
        hf_model = transformers.MarianMTModel.from_pretrained(folder).eval()
        hf_tok = transformers.AutoTokenizer.from_pretrained(folder)
    prod, prod_tok = from_huggingface(hf_model, hf_tok)
    real = False
name = HF_MODEL if real else "small-de-en as Marian"
for label, m in (("small-de-en", small), (name, prod)):
    c = m.cfg
    print(f"{label}: {c.n_enc_layers}+{c.n_dec_layers} layers, {c.n_heads} heads, d_model {c.d_model}, "
          f"activation {c.activation}, positions {c.sinusoidal_layout}, output bias {c.output_bias}, "
          f"{wb.count_parameters(m) / 1e6:.1f} M parameters")
metrics["real_production_model"] = real
metrics["both_trained"] = True  # opus-mt, or small-de-en through Marian's layout: never a random model

# %% [markdown]
# ## Is the conversion exact?
#
# The same sentence through transformers' model and through the converted one: the largest difference between their
# next-token logits, and greedy decoding by transformers' `generate` against the workbench's own `greedy_decode`.

# %%
from workbench.translation.decode import greedy_decode
enc = hf_tok([SENTENCE], return_tensors="pt")
src = enc["input_ids"]
with torch.no_grad():
    theirs = hf_model.generate(**enc, num_beams=1, do_sample=False, max_length=src.shape[1] + 51)[0, 1:].tolist()
    ours = greedy_decode(prod, src, bos_id=prod_tok.bos_id, eos_id=prod_tok.eos_id, max_len=src.shape[1] + 50)[0].tolist()
    tgt = torch.tensor([[prod_tok.bos_id, *theirs[:-1]]])
    gap = float((hf_model(**enc, decoder_input_ids=tgt).logits - prod(src, tgt)).abs().max())
def cut(ids):
    """The ids up to the first eos, included."""
    return ids[: ids.index(prod_tok.eos_id) + 1] if prod_tok.eos_id in ids else ids
print(f"largest logit difference: {gap:.2e}; greedy outputs identical: {cut(theirs) == cut(ours)}")
print("translation:", prod_tok.decode_tgt([ours])[0])
metrics.update(conversion_max_logit_error=gap, greedy_identical=cut(theirs) == cut(ours))

# %% [markdown]
# ### Exercise 17.marian_positions · `marian_positions`
#
# Write Marian's position table: the paper's angles $pos / 10000^{2i/d_{model}}$ for $i = 0, 1, \dots,
# \lceil d_{model}/2 \rceil - 1$, with every sine in the first $\lceil d_{model}/2 \rceil$ columns and the matching
# cosines (of the first $\lfloor d_{model}/2 \rfloor$ angles) in the rest. Lesson 04's table holds the same numbers,
# interleaved.
#
# Shapes: `max_len`, `d_model` ints → (max_len, d_model) float32.

# %% tags=["exercise", "hide-input"]
def marian_positions(max_len, d_model):
    """Marian's sinusoidal table: sines first, then cosines. Shapes: -> (max_len, d_model) float32."""
    # BEGIN SOLUTION NO PROMPT
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]  # (T, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (ceil(D/2),)
    angle = pos / 10000 ** (two_i / d_model)  # (T, ceil(D/2))
    return torch.cat([torch.sin(angle), torch.cos(angle[:, : d_model // 2])], dim=1).float()  # (T, D)
    # END SOLUTION
    """ # BEGIN PROMPT
    raise NotImplementedError("write marian_positions, then run the check below")
    """  # END PROMPT

# %%
from workbench.lessons import exercises as ex
result = ex.check("17.marian_positions", marian_positions)
marian_positions = result.function  # yours if it passed, else the package's
result

# %%
converted = prod.src_embed.positional.table  # the converted model's table, (max_len, d_model)
print(f"your table equals the converted model's ({tuple(converted.shape)}):",
      torch.allclose(marian_positions(*converted.shape), converted, atol=1e-5))

# %% [markdown]
# ## How peaked are their heads?
#
# The mean entropy of each head's attention rows over validation sentences, for the three kinds of attention; low
# means the head looks at few tokens. Each model is given the sentences through its own tokenizer and translates them
# itself, and the two tokenizers cut the same sentence into different numbers of pieces. Entropy in nats grows with
# the number of keys a row can attend to (uniform attention over $n$ keys has entropy $\log n$), so a model whose
# tokenizer makes more pieces would look less peaked for that reason alone. We therefore divide each row's entropy by
# $\log n$, with $n$ the keys that row may attend to: 0 is one key, 1 is uniform, whatever the tokenizer. The raw
# figures in nats are printed beside it, with the mean number of source pieces per sentence of each tokenizer.

# %%
val = load_multi30k("val", "de", "en")[:n_sentences]
stats = {}
inspections = {}
def entropy_table(m, inspections, kind, normalise):
    """(L, H) mean entropy of each head over the inspected sentences."""
    n_layers = m.cfg.n_enc_layers if kind == "enc.self" else m.cfg.n_dec_layers
    return torch.stack([torch.stack([head_entropy(ins.cache[kind, l], normalise=normalise) for ins in inspections])
                        .mean(0) for l in range(n_layers)])                                            # (L, H)


# %% [markdown]
# Each model reads the validation sentences through its own tokenizer and translates them itself:

# %%
pieces = {}
for label, m, t in (("small-de-en", small, small_tok), (name, prod, prod_tok)):
    inspections[label] = [inspect_translation(m, t, s) for s, _ in val]
    pieces[label] = float(np.mean([len(ins.src_tokens) for ins in inspections[label]]))
    for kind in ("enc.self", "dec.self", "dec.cross"):
        stats[label, kind] = entropy_table(m, inspections[label], kind, normalise=True)
        stats[label, kind, "nats"] = entropy_table(m, inspections[label], kind, normalise=False)
    figures.head_stat_figure(stats[label, "dec.cross"], [f"L{l}" for l in range(len(stats[label, "dec.cross"]))],
                             title=f"{label}: cross-attention entropy per head (0 = one key, 1 = uniform)").show()
    print(f"{label}: {pieces[label]:.1f} source pieces per sentence; normalised entropy " + ", ".join(
        f"{kind} {float(stats[label, kind].mean()):.3f} ({float(stats[label, kind, 'nats'].mean()):.2f} nats)"
        for kind in ("enc.self", "dec.self", "dec.cross")))
metrics["mean_cross_entropy_normalised"] = {label: float(stats[label, "dec.cross"].mean()) for label in ("small-de-en", name)}
metrics["mean_cross_entropy_nats"] = {label: float(stats[label, "dec.cross", "nats"].mean()) for label in ("small-de-en", name)}
metrics["source_pieces_per_sentence"] = pieces
metrics["entropy_gap_same_model"] = max(float((stats["small-de-en", k] - stats[name, k]).abs().max())
                                        for k in ("enc.self", "dec.self", "dec.cross"))

# %% [markdown]
# **Predict, then run.** The head that agrees best with the aligner on the first half of the sentences is then scored on the second half. Will it score `"higher"`, `"equal"` or `"lower"` than the best head's score measured on all sentences at once? Write your prediction in the next cell before you run the cells after it (leave `None` to skip: the lesson runs either way).

# %% tags=["answer"]
PREDICT_HELD_OUT: str | None = None  # higher, equal or lower

# %% [markdown]
# ## Does cross-attention point at the aligned word?
#
# As in lesson 10: IBM Model 1 trained on Multi30k training pairs gives each English word of a translation its most
# likely German word; for every decoder layer and head we pool cross-attention from subword pieces to words and ask
# how often the most-attended source word is the aligner's. Both tokenizers mark the start of a word with `▁`, so the
# same pooling serves both. IBM Model 1 is a reference, not the true alignment: it is a simple statistical model,
# wrong on many words, so an agreement of 1 is not the goal and a head can be right where the aligner is wrong.
#
# Picking the best of all heads and reporting its agreement on the same sentences overstates it: with many heads,
# one scores high partly by luck (the winner's curse). So the head is chosen on the first half of the sentences and
# its agreement reported on the second half, beside the in-sample maximum. The chance line is a uniform guess over
# each sentence's source words.

# %%
train_pairs = load_multi30k("train", "de", "en", limit=2000 if SMOKE else 10000)
t_prob = ibm1(train_pairs, iterations=5)

# %% [markdown]
# For each model: the head that agrees best with the aligner is chosen on the first half of the sentences and scored
# on the second half, so the reported figure is not inflated by the choice.

# %%
half = len(val) // 2                                               # choose on val[:half], report on val[half:]
best_agreement, held_out_agreement = {}, {}
for label, m in (("small-de-en", small), (name, prod)):
    agree = {}                                                     # (layer, head) -> [(sentence index, agreement)]
    for k, ((src_text, _), ins) in enumerate(zip(val, inspections[label])):
        ref = ibm1_align(t_prob, src_text, ins.translation)
        qw, kw = word_spans(ins.out_tokens), word_spans(ins.src_tokens)
        if max(qw) < 0 or max(kw) < 0:
            continue
        for l in range(m.cfg.n_dec_layers):
            for h in range(m.cfg.n_heads):
                pred = word_attention(ins.weights("dec.cross", l)[h], qw, kw).argmax(-1).tolist()
                agree.setdefault((l, h), []).append((k, alignment_agreement(pred, ref[: len(pred)])))
    mean_on = lambda pairs, part: float(np.nanmean([a for k, a in pairs if (k < half) == (part == "choose")]))  # noqa: E731
    best = max(agree, key=lambda key: mean_on(agree[key], "choose"))
    best_agreement[label] = max(float(np.nanmean([a for _, a in v])) for v in agree.values())  # in-sample maximum
    held_out_agreement[label] = mean_on(agree[best], "report")
    print(f"{label}: head L{best[0]} H{best[1]}, chosen on {half} sentences, agrees with IBM-1 on "
          f"{held_out_agreement[label]:.2f} of the words of the other {len(val) - half}; the in-sample best of all "
          f"{len(agree)} heads: {best_agreement[label]:.2f}")
chance = float(np.mean([1 / len(s.split()) for s, _ in val[half:]]))
print(f"a uniform guess over each sentence's source words: {chance:.2f}")
metrics.update(best_alignment_agreement=best_agreement, held_out_alignment_agreement=held_out_agreement,
               chance_alignment=chance)


# %%
from workbench.lessons import exercises as ex
ex.predict("17.held_out", PREDICT_HELD_OUT, (lambda a, b: "equal" if abs(a - b) < 1e-9 else "lower" if a < b else "higher")(held_out_agreement["small-de-en"], best_agreement["small-de-en"]),
           "The best of many heads on the same sentences is partly luck (the winner's curse); scored on sentences it was not chosen on, a head usually does a little worse, which is the honest figure.")

# %% [markdown]
# ## One sentence, side by side
#
# The last decoder layer's cross-attention, averaged over heads, for the sentence of the parameters: rows are the
# output pieces each model wrote, columns its own source pieces.

# %%
for label, m, t in (("small-de-en", small, small_tok), (name, prod, prod_tok)):
    ins = inspect_translation(m, t, SENTENCE)
    w = ins.weights("dec.cross", m.cfg.n_dec_layers - 1).mean(0)                                          # (Tq, Tk)
    print(f"{label}: {ins.translation}")
    figures.attention_heatmap(w, ins.out_tokens, ins.src_tokens, title=f"{label}: last-layer cross-attention").show()

# %% [markdown]
# ## What we found
#
# The cell below states the lesson's conclusion from this run's numbers and checks it. Three things hold whichever
# second translator ran: the conversion is exact (the same logits within float32 rounding, the same greedy
# translation); entropy compared across tokenizers is compared per possible key, not in nats; and a head chosen on
# some sentences still finds the aligner's word far more often than chance on others, so the agreement is not an
# artefact of picking the luckiest head. With `small-de-en` through Marian's layout, every head statistic must
# equal `small-de-en`'s; with opus-mt, the differences are the two models' own.

# %%
for label in ("small-de-en", name):
    print(f"{label}: cross-attention normalised entropy {metrics['mean_cross_entropy_normalised'][label]:.3f}; "
          f"held-out alignment agreement {metrics['held_out_alignment_agreement'][label]:.2f} "
          f"(chance {metrics['chance_alignment']:.2f})")
if real:
    print(f"conclusion: {name} converts exactly; against small-de-en its cross-attention is "
          f"{'more' if metrics['mean_cross_entropy_normalised'][name] < metrics['mean_cross_entropy_normalised']['small-de-en'] else 'less'}"
          " peaked per possible key, and both have heads that follow word alignment on unseen sentences")
else:
    print(f"conclusion: small-de-en survives the trip through Marian's layout with every head unchanged (largest "
          f"entropy difference {metrics['entropy_gap_same_model']:.1e}); a second, differently trained translator "
          "needs opus-mt in the Hugging Face cache")

# %%
metrics.update(ex.summary())  # every exercise's check and prediction, read back by `workbench notebooks grade`

# %%
with open("metrics.json", "w") as f:
    json.dump(metrics, f, indent=1)
# the converted model computes transformers' function: logits within float32 rounding, the same greedy output
assert metrics["conversion_max_logit_error"] < 1e-4
assert metrics["greedy_identical"]
# both translators are trained models: opus-mt, or small-de-en through Marian's layout
assert metrics["both_trained"]
# normalised entropy lies between one key (0) and uniform (1) for every kind of attention
assert all(0 < v < 1 for v in metrics["mean_cross_entropy_normalised"].values())
# a head chosen on half the sentences finds the aligner's word far more often than chance on the other half,
# for both translators
for label in ("small-de-en", name):
    assert metrics["held_out_alignment_agreement"][label] > 2 * metrics["chance_alignment"]
if not real:  # small-de-en through Marian's layout: the same heads, to float32 rounding
    assert metrics["entropy_gap_same_model"] < 1e-4

# %% [markdown]
# ## Try it
#
# * `workbench notebooks run --only 17 -p HF_MODEL=Helsinki-NLP/opus-mt-de-en` on a machine where
#   `hf download Helsinki-NLP/opus-mt-de-en` has run: the real production model beside ours.
# * `workbench notebooks run --only 17 -p SENTENCE="Zwei Hunde spielen im Schnee."`: do the two models' last
#   cross-attention layers follow the same source words?
# * `workbench export --to huggingface small-de-en small-hf`: the way back, `small-de-en` as a Marian model that
#   transformers' `generate` and CTranslate2 run.
