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
# # 11 · The paper's Table 3, at notebook scale
#
# Table 3 of the paper varies one thing at a time around the base model and reports development-set perplexity and
# BLEU: (A) the number of heads at constant compute, (B) the key size, (C) depth and width, (D) dropout and label
# smoothing, (E) learned instead of sinusoidal positions. We repeat the experiment on Multi30k with a small base model
# and, as the paper does (100K steps for every row), the same number of training steps on the same batches for every
# variant (not the same seconds: a slower variant is not penalised, and every machine gets the same table). Then we
# compare each trend's sign with the paper's, against how much the base model itself moves when only its initial
# weights change. At this scale and budget the differences are small and noisy: read the table as a demonstration of
# the method, not as a replication.

# %% tags=["parameters"]
SMOKE: bool = False  # tiny base model, a few steps per variant (what CI runs)
SEED: int = 0  # seeds every random draw
STEPS_PER_VARIANT: int = 150  # optimizer steps for every row, the paper's protocol (about 20 s a row on 2 CPU cores)
TRAIN_PAIRS: int = 29000  # Multi30k training pairs used
N_VAL: int = 200  # validation sentences for perplexity, entropy and BLEU

# %%
import json
import numpy as np
import workbench as wb
from IPython.display import Markdown, display
from workbench.viz.figures import markdown_table
from workbench.viz import figures
figures.setup_offline_renderer()
wb.set_seed(SEED)
metrics = {}

# %%
from workbench.translation.data import load_multi30k
from workbench.translation.tokenizer import SubwordTokenizer
from workbench.translation.train import fit
from workbench.translation.decode import translate
from workbench.translation.metrics import corpus_bleu
train = load_multi30k("train", "de", "en", limit=3000 if SMOKE else TRAIN_PAIRS)
val = load_multi30k("val", "de", "en")[: (40 if SMOKE else N_VAL)]
tok = SubwordTokenizer.train(train, vocab_size=1500 if SMOKE else 6000)
base = wb.preset("tiny", d_model=64, n_heads=4, d_ff=128, dropout=0.1, max_len=128) if SMOKE else        wb.preset("small", d_model=128, n_heads=4, d_ff=512, n_enc_layers=2, n_dec_layers=2, max_len=128)
steps = 60 if SMOKE else STEPS_PER_VARIANT
D = base.d_model
variants = {
    "base": ({}, {}),
    "(A) h=1, d_k=D": ({"n_heads": 1}, {}),
    "(A) h=8, d_k=D/8": ({"n_heads": 8}, {}),
    "(B) d_k=D/8 (smaller keys)": ({"d_head": D // 8, "d_v": base.head_dim}, {}),  # keys shrink, values keep d_v
    "(C) 1 layer": ({"n_enc_layers": 1, "n_dec_layers": 1}, {}),
    "(D) no dropout": ({"dropout": 0.0}, {}),
    "(D) no label smoothing": ({}, {"label_smoothing": 0.0}),
    "(E) learned positions": ({"positional": "learned"}, {}),
    "base, other initial weights": ({}, {}),  # the noise yardstick: base again, initialised from SEED + 1
}

# %%
from workbench.translation.batching import make_batch
from workbench.translation.train import evaluate
val_src, val_tgt = tok.encode_src([s for s, _ in val]), tok.encode_tgt([t for _, t in val])
val_batches = [make_batch(val_src[i:i + 50], val_tgt[i:i + 50], tok.pad_id) for i in range(0, len(val), 50)]
rows = {}
for name, (model_kw, train_kw) in variants.items():
    wb.set_seed(SEED + 1 if name == "base, other initial weights" else SEED)  # fit() reseeds: same batches, same dropout
    cfg = wb.ModelConfig(**{**base.to_dict(), **model_kw})
    model = wb.build_model(cfg, tok.src_vocab_size, tok.tgt_vocab_size)
    init = float(sum(p.detach().double().abs().sum() for p in model.parameters()))  # which initial weights
    tcfg = wb.TrainConfig(**{"epochs": 1000, "max_steps": steps, "warmup_steps": 300, "max_tokens": 2000,
                             "eval_bleu": False, "seed": SEED, "device": "cpu", "precision": "fp32", **train_kw})
    hist = fit(model, tok, train, val, tcfg)
    bleu = corpus_bleu(translate(model, tok, [s for s, _ in val], beam=1), [t for _, t in val]).score
    rows[name] = {"params": wb.count_parameters(model), "val_ppl": hist.val_ppl[-1], "val_bleu": bleu,
                  "val_entropy": evaluate(model, val_batches, tok.pad_id)["entropy"],  # nats per predicted token
                  "epochs": len(hist.train_loss), "stopped": hist.stopped_reason, "seconds": hist.elapsed_s[-1],
                  "init_abs_sum": init}
import pandas as pd
table = pd.DataFrame(rows).T
table

# %% [markdown]
# ## Against the paper's signs
#
# What the paper's Table 3 found, in development-set perplexity: a single head is worse than the base (A); smaller
# keys are worse (B); fewer layers are worse (C); without dropout it is worse (D); without label smoothing the
# perplexity is *lower* (smoothing makes the model less sure, which costs perplexity but helps BLEU) (D); learned
# positions give the same perplexity as sinusoids (E).
#
# Each trend is measured as the difference of validation log-perplexity (the validation loss, in nats per token)
# between the variant and the base. The yardstick is the base trained again from other initial weights (same batches,
# same dropout draws): the size of that difference, $m$, is how far two runs of the same model land apart. A trend
# **agrees** with the paper when it goes the paper's way by more than $m$, is **opposite** when it goes the other way
# by more than $m$, and is **within noise** otherwise; for (E), whose claim is "no difference", agreeing means within
# $m$. One yardstick run is a rough measure of noise, so read "agrees" as "consistent", not as significant.

# %%
from workbench.lessons.verdicts import judge_claims
b = rows["base"]
log_ppl = {name: float(np.log(r["val_ppl"])) for name, r in rows.items()}
paper = {  # variant, the paper's direction for its log-perplexity against the base (+1 higher, -1 lower, 0 the same)
    "(A) one head is worse": ("(A) h=1, d_k=D", +1),
    "(B) smaller keys are worse": ("(B) d_k=D/8 (smaller keys)", +1),
    "(C) fewer layers are worse": ("(C) 1 layer", +1),
    "(D) no dropout is worse": ("(D) no dropout", +1),
    "(D) label smoothing raises perplexity": ("(D) no label smoothing", -1),
    "(E) learned positions are the same": ("(E) learned positions", 0),
}
signs, margin = judge_claims(log_ppl, paper, "base", "base, other initial weights")
display(Markdown(markdown_table([{"paper's claim": c, "Δ log ppl (variant − base)": round(v["delta"], 4),
                                  "yardstick m": round(margin, 4), "verdict": v["verdict"]} for c, v in signs.items()])))
# the (D) rows by BLEU as well: the paper's Table 3 has both regularisers *raising* BLEU (no dropout 24.6, no label
# smoothing 25.3, base 25.8), although label smoothing costs perplexity; the yardstick is the two base runs' BLEU gap
paper_bleu = {"(D) no dropout lowers BLEU": ("(D) no dropout", -1),
              "(D) no label smoothing lowers BLEU": ("(D) no label smoothing", -1)}
bleu_signs, bleu_margin = judge_claims({name: r["val_bleu"] for name, r in rows.items()}, paper_bleu, "base",
                                       "base, other initial weights")
display(Markdown(markdown_table([{"paper's claim": c, "Δ BLEU (variant − base)": round(v["delta"], 2),
                                  "yardstick": round(bleu_margin, 2), "verdict": v["verdict"]}
                                 for c, v in bleu_signs.items()])))
# the paper's reason for (D): label smoothing "hurts perplexity, as the model learns to be more unsure". How unsure a
# model is, right or wrong: the mean entropy of its next-token distributions on val (nats), against the same yardstick
entropy_margin = abs(rows["base, other initial weights"]["val_entropy"] - b["val_entropy"])
ls_unsure = b["val_entropy"] - rows["(D) no label smoothing"]["val_entropy"]
print(f"entropy with label smoothing {b['val_entropy']:.3f} nats, without {rows['(D) no label smoothing']['val_entropy']:.3f}: "
      f"{ls_unsure:+.3f} (yardstick {entropy_margin:.3f})")
figures.bar_figure(list(rows), [r["val_ppl"] for r in rows.values()], title="validation perplexity per variant", ylabel="ppl").show()
metrics.update(rows=rows, claims=paper, signs=signs, noise_margin_log_ppl=margin, claims_bleu=paper_bleu,
               bleu_signs=bleu_signs, noise_margin_bleu=bleu_margin,
               ls_entropy_gain=ls_unsure, noise_margin_entropy=entropy_margin,
               agreeing=sum(v["verdict"] == "agrees" for v in signs.values()),
               opposite=sum(v["verdict"] in ("opposite", "differs") for v in signs.values()))

# %% [markdown]
# Which verdicts come out depends on the budget. With `STEPS_PER_VARIANT` steps, all inside the warm-up, every model
# is still far from converged, while the paper's rows were trained for 100K steps. In the SMOKE run (60 steps of a
# tiny model) the two base runs land further apart in perplexity than any variant moves, so every directional trend
# is "within noise" there: SMOKE checks the machinery, not the paper. At the default budget, read the verdict table
# above: each row's change in log-perplexity (and in BLEU for the two regularisers) against the yardstick, the
# distance between the base and the base retrained from other initial weights. This far from convergence few of the
# paper's signs hold, and the ones that do change from run to run (another seed, another thread count), so no
# perplexity sign is asserted. Two of the paper's trends have a reason to come out differently in any short run:
# dropout slows early fitting and only pays off against over-fitting later, and a deeper model can trail a shallower
# one before it has had the steps to use its depth.
#
# What does hold in every run is the paper's *reason* for the label-smoothing row: the smoothed model is less sure of
# its next token. Its mean predictive entropy on val and the unsmoothed model's are printed above, with the yardstick.
# That is asserted below, with what the notebook can guarantee: every variant trained and is the model it claims to be.
#
# The variants are checked against their definitions, parameter by parameter: the (A) rows keep the base's parameter
# count exactly (the paper varies heads "keeping the amount of computation constant"); (B) shrinks the keys only, as the
# paper's row does (its $d_v$ column stays 64: 58M and 60M parameters against the base's 65M are what smaller $W^Q$ and
# $W^K$ alone remove), so it removes $2(d_{model}+1)\cdot h\cdot(d_k - d_{model}/8)$ parameters from each of the
# $N_{enc} + 2N_{dec}$ attention modules ($W^Q$ and $W^K$ with their biases; $W^V$ and $W^O$ keep their size);
# (E) adds one $d_{model}$-wide table of `max_len` rows to each of the two embeddings.

# %%
with open("metrics.json", "w") as f:
    json.dump(metrics, f, indent=1)
assert all(np.isfinite(r["val_ppl"]) for r in rows.values())                          # every variant trained
assert all(r["stopped"] == "max steps" for r in rows.values())                          # for exactly `steps` steps
assert len({round(r["val_ppl"], 6) for r in rows.values()}) == len(rows)                # and they differ
# the variants are what they claim, counted from their definitions
n_attn = base.n_enc_layers + 2 * base.n_dec_layers                                     # attention modules in the model
assert rows["(A) h=1, d_k=D"]["params"] == rows["(A) h=8, d_k=D/8"]["params"] == b["params"]
# (B) now shrinks W^Q and W^K only (d_v kept, as the paper's row): 2 (D + 1) h (d_k - D/8) per module; the earlier
# (4D + 3) form counted W^V and W^O shrinking too, which the paper's 58M / 60M rule out (tests/test_model.py)
assert b["params"] - rows["(B) d_k=D/8 (smaller keys)"]["params"] == n_attn * 2 * (D + 1) * base.n_heads * (base.head_dim - D // 8)
assert rows["(E) learned positions"]["params"] - b["params"] == 2 * base.max_len * D
assert rows["(C) 1 layer"]["params"] < b["params"]
# one thing changed at a time: the rows that change only dropout or the loss start from the base's very weights, and
# the yardstick is the same model from other initial weights
assert rows["(D) no label smoothing"]["init_abs_sum"] == rows["(D) no dropout"]["init_abs_sum"] == b["init_abs_sum"]
assert rows["base, other initial weights"]["params"] == b["params"]
assert rows["base, other initial weights"]["init_abs_sum"] != b["init_abs_sum"]
# which trends keep the paper's sign is reported above (metrics["signs"], metrics["bleu_signs"]), not asserted: the
# label-smoothing perplexity sign, asserted at default size before, held beyond the noise in two 200-step runs made
# before the dropout kernel changed its random draws and within the noise in the two after it (+0.026 against 0.029,
# -0.051 against 0.056), and in the 150-step default (-0.017 against 0.066), so no perplexity sign is robust at this
# budget. The paper's reason for that row is: the label-smoothed base is less sure of its next token than the
# unsmoothed model, by more than two runs of the same model differ (measured: +0.56 nats against 0.013 at the
# default, +0.59 against 0.08 at 200 steps a row, +0.18 against 0.07 at SMOKE size)
assert ls_unsure > entropy_margin

# %% [markdown]
# ## Try it
#
# * `workbench notebooks run --only 11 -p STEPS_PER_VARIANT=1000` — about seven times the steps for every row (about two
#   minutes a row on 2 CPU cores): which verdicts change, and does "no dropout is worse" start to agree with the paper?
# * `workbench notebooks run --only 11 -p SEED=1` — the whole table from other seeds: which verdicts survive a change
#   of seed? Only those are worth reading at this budget.
# * `workbench notebooks run --only 11 -p TRAIN_PAIRS=5000` — a sixth of the data on the same steps: the models now
#   repeat sentences; does removing dropout or label smoothing start to cost more?
