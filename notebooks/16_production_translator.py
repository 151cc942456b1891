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
# # 16 · A production translator under the same lens
#
# The translators people use every day are close cousins of the paper's model. The opus-mt family (Marian models in
# Hugging Face transformers, more than a thousand language pairs) is a post-LN encoder-decoder with sinusoidal
# positions and tied embeddings, like ours, with four named differences: a swish feed-forward activation, a bias
# on the output projection, a sinusoidal table with every sine first and every cosine second (the paper interleaves
# them), and a pad token that also starts the decoder. In symbols, its feed-forward network is
# $\mathrm{FFN}(x) = \mathrm{swish}(x W_1 + b_1) W_2 + b_2$ with $\mathrm{swish}(z) = z\,\sigma(z)$ where the paper
# has $\max(0, z)$, and its position $pos$ fills dimension $i < d_{model}/2$ with $\sin(pos / 10000^{2i/d_{model}})$
# and dimension $i + d_{model}/2$ with the matching cosine. `wb.pretrained("Helsinki-NLP/opus-mt-de-en")` converts such
# a model into the workbench's own Transformer, so every inspector of the earlier lessons opens it.
#
# We first check that the converted model computes what transformers computes, then set it beside `small-de-en`:
# how peaked their heads are, how often their cross-attention agrees with the IBM-1 word aligner, and one
# sentence's cross-attention side by side. Without the model in the local Hugging Face cache (and no network), the
# notebook says how to get it and runs on a small random Marian model built here, so every cell still runs.

# %% tags=["parameters"]
SMOKE: bool = False  # fewer sentences (what CI runs)
SEED: int = 0  # seeds every random draw (the stand-in random Marian model)
HF_MODEL: str = "Helsinki-NLP/opus-mt-de-en"  # a Marian model of the Hugging Face Hub, German to English
N_SENTENCES: int = 100  # validation sentences for head statistics and alignment agreement (SMOKE: 12)
SENTENCE: str = "Ein kleines Mädchen klettert in ein Spielhaus aus Holz ."  # the sentence drawn side by side

# %%
import json
import numpy as np
import torch
import transformers
import workbench as wb
from workbench.errors import BridgeError
from workbench.bridges.huggingface import from_huggingface, to_huggingface_tokenizer
from workbench.translation.data import load_multi30k
from workbench.inspect.heads import head_entropy
from workbench.inspect.inspection import inspect_translation
from workbench.inspect.align import ibm1, ibm1_align, word_spans, word_attention, alignment_agreement
from workbench.viz import figures
figures.setup_offline_renderer()
wb.set_seed(SEED)
metrics = {}
n_sentences = 12 if SMOKE else N_SENTENCES

# %% [markdown]
# ## The two translators
#
# `small-de-en` ships with the workbench. The production model comes from the local Hugging Face cache (or the Hub
# when online). We keep transformers' own model too, to compare the conversion with it.

# %%
small, small_tok, card = wb.pretrained("small-de-en")
try:
    prod, prod_tok, prod_info = wb.pretrained(HF_MODEL)
    hf_model = transformers.MarianMTModel.from_pretrained(prod_info["folder"]).eval()
    hf_tok = prod_tok.hf
    real = True
except BridgeError as err:
    print(f"{err} -- running on a small random Marian model instead")
    # the stand-in: a random MarianMTModel (opus-mt's layout, 2+2 layers) over small-de-en's vocabulary
    hf_tok = to_huggingface_tokenizer(small_tok, small.cfg.max_len)
    config = transformers.MarianConfig(
        vocab_size=small.tgt_vocab_size, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=128,
        activation_function="swish", scale_embedding=True, pad_token_id=small_tok.pad_id, eos_token_id=small_tok.eos_id,
        decoder_start_token_id=small_tok.bos_id, forced_eos_token_id=small_tok.eos_id, init_std=0.1)
    hf_model = transformers.MarianMTModel(config).eval()
    prod, prod_tok = from_huggingface(hf_model, hf_tok)
    real = False
name = HF_MODEL if real else "a random Marian model"
for label, m in (("small-de-en", small), (name, prod)):
    c = m.cfg
    print(f"{label}: {c.n_enc_layers}+{c.n_dec_layers} layers, {c.n_heads} heads, d_model {c.d_model}, "
          f"activation {c.activation}, positions {c.sinusoidal_layout}, output bias {c.output_bias}, "
          f"{wb.count_parameters(m) / 1e6:.1f} M parameters")
metrics["real_production_model"] = real

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
# ## How peaked are their heads?
#
# The mean entropy of each head's attention rows (in nats; low means the head looks at few tokens), over validation
# sentences, for the three kinds of attention. Each model is given the sentences through its own tokenizer and
# translates them itself.

# %%
val = load_multi30k("val", "de", "en")[:n_sentences]
stats = {}
inspections = {}
for label, m, t in (("small-de-en", small, small_tok), (name, prod, prod_tok)):
    inspections[label] = [inspect_translation(m, t, s) for s, _ in val]
    for kind in ("enc_self", "dec_self", "cross"):
        per_layer = []
        for l in range(m.cfg.n_enc_layers if kind == "enc_self" else m.cfg.n_dec_layers):
            ent = torch.stack([head_entropy(ins.cache[kind, l]) for ins in inspections[label]]).mean(0)   # (H,)
            per_layer.append(ent)
        stats[label, kind] = torch.stack(per_layer)                                                  # (L, H)
        figures.head_stat_figure(stats[label, kind], [f"L{l}" for l in range(len(per_layer))],
                                 title=f"{label}: {kind} entropy per head (nats)").show()
    print(f"{label}: mean entropy enc_self {float(stats[label, 'enc_self'].mean()):.2f}, dec_self "
          f"{float(stats[label, 'dec_self'].mean()):.2f}, cross {float(stats[label, 'cross'].mean()):.2f}")
metrics["mean_cross_entropy"] = {label: float(stats[label, "cross"].mean()) for label in ("small-de-en", name)}

# %% [markdown]
# ## Does cross-attention point at the aligned word?
#
# As in lesson 09: IBM Model 1 trained on Multi30k training pairs gives each English word of a translation its most
# likely German word; for every decoder layer and head we pool cross-attention from subword pieces to words and ask
# how often the most-attended source word is the aligner's. Both tokenizers mark the start of a word with `▁`, so the
# same pooling serves both.

# %%
train_pairs = load_multi30k("train", "de", "en", limit=2000 if SMOKE else 10000)
t_prob = ibm1(train_pairs, iterations=5)
best_agreement = {}
for label, m in (("small-de-en", small), (name, prod)):
    agree = {}
    for (src_text, _), ins in zip(val, inspections[label]):
        ref = ibm1_align(t_prob, src_text, ins.translation)
        qw, kw = word_spans(ins.out_tokens), word_spans(ins.src_tokens)
        if max(qw) < 0 or max(kw) < 0:
            continue
        for l in range(m.cfg.n_dec_layers):
            for h in range(m.cfg.n_heads):
                pred = word_attention(ins.weights("cross", l)[h], qw, kw).argmax(-1).tolist()
                agree.setdefault((l, h), []).append(alignment_agreement(pred, ref[: len(pred)]))
    agreement = {k: float(np.nanmean(v)) for k, v in agree.items()}
    best = max(agreement, key=agreement.get)
    best_agreement[label] = agreement[best]
    print(f"{label}: best cross head L{best[0]} H{best[1]} agrees with IBM-1 on {agreement[best]:.2f} of the words")
chance = 1 / float(np.mean([len(s.split()) for s, _ in val]))
print(f"a uniform guess over the source words: {chance:.2f}")
metrics.update(best_alignment_agreement=best_agreement, chance_alignment=chance)

# %% [markdown]
# ## One sentence, side by side
#
# The last decoder layer's cross-attention, averaged over heads, for the sentence of the parameters: rows are the
# output pieces each model wrote, columns its own source pieces.

# %%
for label, m, t in (("small-de-en", small, small_tok), (name, prod, prod_tok)):
    ins = inspect_translation(m, t, SENTENCE)
    w = ins.weights("cross", m.cfg.n_dec_layers - 1).mean(0)                                          # (Tq, Tk)
    print(f"{label}: {ins.translation}")
    figures.attention_heatmap(w, ins.out_tokens, ins.src_tokens, title=f"{label}: last-layer cross-attention").show()

# %%
with open("metrics.json", "w") as f:
    json.dump(metrics, f, indent=1)
# the converted model computes transformers' function: logits within float32 rounding, the same greedy output
assert metrics["conversion_max_logit_error"] < 1e-4
assert metrics["greedy_identical"]
# the trained small-de-en's cross-attention finds the aligner's word far more often than chance
assert metrics["best_alignment_agreement"]["small-de-en"] > 2 * metrics["chance_alignment"]
if real:  # a trained production model too
    assert metrics["best_alignment_agreement"][HF_MODEL] > 2 * metrics["chance_alignment"]

# %% [markdown]
# ## Try it
#
# * `workbench notebooks run --only 16 -p HF_MODEL=Helsinki-NLP/opus-mt-de-en` on a machine where
#   `hf download Helsinki-NLP/opus-mt-de-en` has run: the real production model beside ours.
# * `workbench notebooks run --only 16 -p SENTENCE="Zwei Hunde spielen im Schnee ."`: do the two models' last
#   cross-attention layers follow the same source words?
# * `workbench export --to huggingface small-de-en small-hf`: the way back, `small-de-en` as a Marian model that
#   transformers' `generate` and CTranslate2 run.
