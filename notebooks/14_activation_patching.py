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
# # 14 · Activation patching: one pair, every site
#
# Switching heads off (lesson 10) tells what breaks; it does not tell where the information a translation needs
# travels. **Activation patching** asks a narrower question than it seems to: run the model on one input, and at
# one place inside it (a *site*) put back the activation it had on another input. If the answer comes back, that
# site's activation *suffices* to bring it back. That is not the same as showing the model *routes* the answer
# through that site when nothing is patched; lesson 15 adds the controls that tell the two apart.
#
# The question here: when the shipped German→English translator writes *his* or *her*, where is the gender it
# uses? German marks it in several places: the possessive itself (*sein*em / *ihr*em), the person (*ein Mann* /
# *eine Frau*, with the article's and adjective's endings), and, once the decoder has written *man* or *woman*,
# the English prefix too. A **minimal pair** is a masculine source (the *clean* run, answer *his*) and the same
# sentence with the gendered words swapped (the *corrupted* run, answer *her*). The metric is the logit difference
# $\mathrm{LD} = \text{logit}(his) - \text{logit}(her)$ at the pronoun, normalised so that
#
# $$\text{score} = \frac{\mathrm{LD}_{\text{patched}} - \mathrm{LD}_{\text{corrupted}}}{\mathrm{LD}_{\text{clean}} - \mathrm{LD}_{\text{corrupted}}}$$
#
# is 0 for the corrupted run and 1 for the clean one. Patching runs two ways. **Denoising** (*clean → corrupted*):
# run the feminine sentence and put one clean activation in; a score near 1 says the site *suffices* to bring *his*
# back. **Noising** (*corrupted → clean*): run the masculine sentence and put one feminine activation in; a score
# near 0 says the site is *necessary* (without its masculine state, *his* is lost).
#
# Sites (`wb.site_names(model)`): the source embeddings and the encoder's residual stream after each layer, per
# source position; the keys and values each decoder layer's cross-attention reads (the *memory*), per source
# position; every head's output; the target embeddings and the decoder's residual stream, per target position.

# %% tags=["parameters"]
SMOKE: bool = False  # smaller rounds when searching for the pairs (what CI runs)
SEED: int = 0  # seeds the Gaussian noise of causal tracing
CHECKPOINT: str = ""  # checkpoint file, run folder or shipped model name; empty: the shipped small-de-en
EXAMPLE: int = 0  # which subject pair of the validation and test sentences to look at closely

# %%
import json
import time

import torch
from IPython.display import Markdown, display
import workbench as wb
from workbench.inspect.patching import Site, cache_activations, patch, patched_greedy, site_names
from workbench.inspect.patching_sweeps import GaussianNoise, prepare_pair, sweep_heads, sweep_positions
from workbench.lessons import pronoun_study as ps
from workbench.lessons.pronoun_pairs import build_pronoun_pairs
from workbench.translation.data import load_multi30k
from workbench.translation.shipped import load_any
from workbench.viz import figures
from workbench.viz.patching_figures import patching_heatmap
from workbench.viz.patching_widgets import PatchingInspector

figures.setup_offline_renderer()
wb.set_seed(SEED)
wall_start = time.perf_counter()
metrics: dict = {"smoke": SMOKE}

# %%
model, tok, info = load_any(CHECKPOINT or "small-de-en")
model.eval()
cfg = model.cfg
print(f"model: {cfg.n_enc_layers}+{cfg.n_dec_layers} layers, {cfg.n_heads} heads, d_model {cfg.d_model}")
print(len(site_names(model)), "sites:", ", ".join(site_names(model)[:6]), "...")

# %% [markdown]
# ## 1 · A minimal pair
# `build_pronoun_pairs` (`workbench.lessons.pronoun_pairs`) makes the pairs from real validation and test sentences.
# A **possessive** pair swaps one possessive and nothing else (*Ein Mann hält seinen Hund* / *Ein Mann hält ihren
# Hund*); a **subject** pair swaps the person with its article and adjective endings and every possessive (*Ein
# junger Mann hält seinen Hund* / *Eine junge Frau hält ihren Hund*). Both sides must have the same number of
# subword tokens, so that positions line up, and the two greedy translations must agree up to the pronoun (except
# for swapped words such as *man*/*woman*) and write *his* on one side and *her* on the other. Only that prefix is
# checked: a word after the pronoun may still be mistranslated.

# %%
heldout = [s for s, _ in load_multi30k("val")] + [s for s, _ in load_multi30k("test_2016_flickr")]
pairs = build_pronoun_pairs(model, tok, [("heldout", s) for s in heldout], kinds=("possessive", "subject"),
                            limit_per_kind={"possessive": 1, "subject": EXAMPLE + 1}, round_size=128 if SMOKE else 512)
example = [p for p in pairs if p.kind == "subject"][EXAMPLE]
poss = next(p for p in pairs if p.kind == "possessive")
display(Markdown(figures.markdown_table([
    {"kind": p.kind, "clean (masculine)": p.clean_text, "corrupted (feminine)": p.corrupt_text,
     "translation (clean)": p.translation} for p in (example, poss)])))

# %% [markdown]
# ### Exercise 14.patch_hook · `patch_hook`
#
# Every patch below is a forward hook: it runs after a module and returns what the rest of the model sees instead of
# the module's output. Write the hook factory for one site: `patch_hook(cached, position)` returns a function
# `hook(module, inputs, output)` that gives back `output` with position `position` (along dimension 1) replaced by
# `cached[:, position]`, the same site's activation from the other run, and every other position unchanged. Leave the
# caller's `cached` as it is, return a new tensor rather than writing into `output` (the module's backward pass may
# need its output as it was, and another hook may hold it), and keep the result in the autograd graph (gradients flow
# to the module and to `cached`).
#
# Shapes: `cached` (B, T, D), `position` an int; the hook: `output` (B, T, D) → (B, T, D).

# %% tags=["exercise", "hide-input"]
def patch_hook(cached, position):
    """A forward hook that patches one position of a module's (B, T, D) output with the cached activation."""
    # BEGIN SOLUTION NO PROMPT
    def hook(module, inputs, output):
        patched = output.clone()  # (B, T, D): never write into the module's own output
        patched[:, position] = cached[:, position].to(output.dtype)
        return patched

    return hook
    # END SOLUTION
    """ # BEGIN PROMPT
    raise NotImplementedError("write patch_hook, then run the check below")
    """  # END PROMPT

# %%
from workbench.lessons import exercises as ex
result = ex.check("14.patch_hook", patch_hook)
patch_hook = result.function  # yours if it passed, else the reference
result

# %% [markdown]
# ## 2 · One pair, every site
# The subject pair: its two translations, then every (layer, position) of the three position families patched clean →
# corrupted (denoising), one at a time (each cell is one row of a batched run).

# %%
clean, corrupt, tgt, metric = ps.pair_tensors(example)  # sources, both decoder inputs, logit(his) - logit(her)
print("clean:    ", example.clean_text, "->", tok.decode_tgt([[*example.tgt[1:], example.good]])[0], "...")
print("corrupted:", example.corrupt_text, "->", tok.decode_tgt([[*example.corrupt_tgt[1:], example.bad]])[0], "...")
pair = prepare_pair(model, clean, corrupt, tgt, metric)
print(f"logit difference his - her: clean {pair.clean_metric:.2f}, corrupted {pair.corrupted_metric:.2f}")
src_labels = [tok.id_to_token(i, side="src") for i in example.clean_src]
tgt_labels = [tok.id_to_token(i) for i in example.tgt]
maps = {family: sweep_positions(model, clean, corrupt, tgt, metric, family=family, prepared=pair,
                                src_tokens=src_labels, tgt_tokens=tgt_labels)
        for family in ("enc.resid", "dec.memory", "dec.resid")}
for family, res in maps.items():
    patching_heatmap(res, title=f"{family}: clean → corrupted (denoising)").show()

# %% [markdown]
# The bottom row of the encoder map is the memory the decoder reads. The patched *translation* shows the same thing
# in words: decode the feminine sentence greedily (key/value cache on) with the clean encoder state patched in at
# the one source position that scores highest in the last encoder layer.

# %%
best = int(maps["enc.resid"].values[-1].argmax())
print(f"best source position in the last encoder layer: {best} ({src_labels[best]}), "
      f"score {float(maps['enc.resid'].values[-1, best]):.2f}")
clean_cache = cache_activations(model, clean, tgt[0])
plain = patched_greedy(model, corrupt, max_extra=10)
patched_out = patched_greedy(model, corrupt, clean_cache, [Site(f"enc.{cfg.n_enc_layers - 1}.resid", pos=best)],
                             max_extra=10)
print("corrupted source:                ", tok.decode_tgt(plain.tolist())[0])
print("with that one clean state patched:", tok.decode_tgt(patched_out.tolist())[0])

# %% [markdown]
# ## 3 · Denoising against noising
# The same encoder sweep the other way: run the *masculine* sentence and write one *feminine* state in at a time
# (`direction="corrupted->clean"`). Now 1 means the patch changed nothing and 0 means it took *his* away entirely.
# Where the gender is written in several words at once (article, adjective, noun and possessive), one clean word can
# be enough to bring *his* back while no single feminine word is enough to take it away: sufficiency and necessity
# are different questions, and redundancy separates them.
#
# **Predict, then run.** At the site the denoising sweep found best (the last encoder layer at `best`), will the
# noising patch take away more than half of *his* (a score below 0.5)? Write `"yes"` or `"no"` in the next cell
# before you run the cell after it (leave `None` to skip: the lesson runs either way).

# %% tags=["answer"]
PREDICT_NOISING_BREAKS: str | None = None  # yes or no

# %%
noised = sweep_positions(model, clean, corrupt, tgt, metric, family="enc.resid", direction="corrupted->clean",
                         prepared=pair, src_tokens=src_labels)
patching_heatmap(noised, title="enc.resid: corrupted → clean (noising)").show()
denoise_score, noise_score = float(maps["enc.resid"].values[-1, best]), float(noised.values[-1, best])
print(f"last encoder layer at {src_labels[best]}: denoising restores {denoise_score:.2f}, "
      f"noising leaves {noise_score:.2f} of the clean logit difference")
ex.predict("14.noising_breaks", PREDICT_NOISING_BREAKS, "yes" if noise_score < 0.5 else "no",
           "Denoising asks whether one site suffices, noising whether it is needed. A site can be both (the answer "
           "passes through it) or only sufficient: when other edited words still carry the gender, one feminine "
           "state cannot take it away.")
metrics["denoise_vs_noise"] = {"position": src_labels[best], "denoising": denoise_score, "noising": noise_score}

# %% [markdown]
# **Causal tracing** (Meng et al., 2022) needs no second sentence: the corrupted run is the masculine sentence itself
# with Gaussian noise added to the source embeddings of chosen words (three times the spread of the embeddings),
# here the words the pair edits. Restoring one clean state at a time (denoising) shows where the clean computation
# still holds the answer once its input words are blurred.

# %%
noise = GaussianNoise(positions=tuple(example.edit), scale=3.0, seed=SEED)
traced = sweep_positions(model, clean, noise, tgt[0], metric, family="enc.resid", src_tokens=src_labels)
print(f"logit difference his - her: clean {traced.clean_metric:.2f}, noised {traced.corrupted_metric:.2f}")
patching_heatmap(traced, title="causal tracing: one clean encoder state restored in the noised sentence").show()
metrics["causal_tracing"] = {"clean": traced.clean_metric, "noised": traced.corrupted_metric,
                             "best": float(traced.values.max())}

# %% [markdown]
# To explore a pair yourself: the inspector draws one family's map for the possessive pair; click a cell to see the
# feminine sentence's translation with that one cell patched from the masculine run.

# %%
inspector = PatchingInspector(model, tok, poss.clean_text, poss.corrupt_text, family="enc.resid")
edit_pos = poss.edit[0]
print(f"answer: {inspector.good} vs {inspector.bad}; the last encoder layer at {inspector.src_tokens[edit_pos]} "
      f"patched gives: {inspector.select(cfg.n_enc_layers, edit_pos)}")
inspector

# %% [markdown]
# Heads: each head's output (all positions) patched on its own, denoising. A head whose output carries the gender to
# the pronoun scores high on this pair; whether that holds beyond one pair is lesson 15's question.

# %%
for family in ("enc.self", "dec.self", "dec.cross"):
    heads = sweep_heads(model, clean, corrupt, tgt, metric, family=family, prepared=pair)
    patching_heatmap(heads, title=f"{family} heads: clean → corrupted").show()

# %% [markdown]
# ## Checks
# The machinery, on this pair: patching a run with its own cache changes nothing, bit for bit; a site that holds the
# whole answer restores it whole in one direction and removes it whole in the other (the last decoder layer at the
# pronoun row: the logits are read from it); and at the embeddings an unedited word, the same token in both runs,
# changes nothing either way.

# %%
metrics.update(ex.summary())  # every exercise's check and prediction, read back by `workbench notebooks grade`
own = cache_activations(model, corrupt, tgt[1])
with torch.no_grad(), patch(model, own, site_names(model)):
    same = model(corrupt, tgt[1])
dec_noised = sweep_positions(model, clean, corrupt, tgt, metric, family="dec.resid", direction="corrupted->clean",
                             prepared=pair)
unedited = [i for i in range(len(example.clean_src)) if i not in example.edit]
metrics.update(own_cache_max_difference=float((same - own.logits).abs().max()),
               answer_row_denoised=float(maps["dec.resid"].values[-1, example.pos]),
               answer_row_noised=float(dec_noised.values[-1, example.pos]),
               embed_unedited_max=float(torch.cat([maps["enc.resid"].values[0, unedited],
                                                   noised.values[0, unedited] - 1]).abs().max()),
               seconds=time.perf_counter() - wall_start)
json.dump(metrics, open("metrics.json", "w"), indent=1)
print(json.dumps({k: v for k, v in metrics.items() if not isinstance(v, dict)}, indent=1))

# %%
assert metrics["own_cache_max_difference"] == 0.0, "patching with the run's own cache must change nothing"
assert abs(metrics["answer_row_denoised"] - 1.0) < 1e-3, "the last decoder layer at the pronoun row is the answer"
assert abs(metrics["answer_row_noised"]) < 1e-3, "and the feminine state there takes the answer away whole"
assert metrics["embed_unedited_max"] < 1e-4, "an unedited token's embedding is the same in both runs"
assert metrics["causal_tracing"]["noised"] < metrics["causal_tracing"]["clean"], "the noise must blur the answer"
