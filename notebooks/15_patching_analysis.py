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
# # 15 · What carries the pronoun: patching over many pairs
#
# Lesson 14 patched one minimal pair and drew its maps. One pair is an anecdote: a cell can light up because of that
# sentence's words, and with hundreds of cells some light up by chance. This lesson turns the method into a claim
# that could fail: **many pairs** from held-out sentences, averaged by the role each position plays; **intervals**
# over pairs; two **controls** at every site (a random unedited position, and the same positions patched from an
# unrelated sentence); a correction for the **number of cells tested**; and a minimum effect. What survives is
# stated as what patching shows, sufficiency: patching there restores the answer beyond what the controls restore.
#
# The metric and the score are lesson 14's: the logit difference $\text{logit}(his) - \text{logit}(her)$ at the
# pronoun, normalised to 0 for the corrupted (feminine) run and 1 for the clean (masculine) one, patching clean →
# corrupted (denoising). The same question is asked of grammatical number: in *Ein Hund rennt* / *Zwei Hunde rennen*
# the English verb must follow (*is* / *are*); singular/plural pairs get the same treatment, with their own averages
# and controls.

# %% tags=["parameters"]
SMOKE: bool = False  # a handful of pairs (what CI runs)
SEED: int = 0  # seeds the control positions, the unrelated sentences and the bootstrap
CHECKPOINT: str = ""  # checkpoint file, run folder or shipped model name; empty: the shipped small-de-en
N_PAIRS: int = 100  # at least this many minimal pairs (SMOKE: 6); val and test first, then the train split
N_NUMBER_PAIRS: int = 40  # of which singular/plural pairs, at most (SMOKE: 2); every gender pair of val and test is kept
TRAIN_SENTENCES: int = 4000  # train sentences scanned for more gender pairs when val and test give fewer than N_PAIRS
N_PATH_PAIRS: int = 6  # pairs for path patching, the slowest sweep (SMOKE: 2)
N_BOOTSTRAP: int = 2000  # bootstrap resamples for the 95 % intervals
MIN_EFFECT: float = 0.1  # a finding must also restore at least this share of the logit difference on average

# %%
import json
import time

import numpy as np
import torch
from IPython.display import Markdown, display
import workbench as wb
from workbench.lessons import pronoun_study as ps
from workbench.lessons.pronoun_pairs import build_pronoun_pairs
from workbench.translation.data import load_multi30k
from workbench.translation.shipped import load_any
from workbench.viz import figures
from workbench.viz.patching_figures import interval_figure, path_patching_figure, patching_heatmap

figures.setup_offline_renderer()
wb.set_seed(SEED)
rng = np.random.default_rng(SEED)
wall_start = time.perf_counter()
metrics: dict = {"smoke": SMOKE}
n_pairs = 6 if SMOKE else N_PAIRS
n_path_pairs = 2 if SMOKE else N_PATH_PAIRS

# %%
model, tok, info = load_any(CHECKPOINT or "small-de-en")
model.eval()
cfg = model.cfg
print(f"model: {cfg.n_enc_layers}+{cfg.n_dec_layers} layers, {cfg.n_heads} heads, d_model {cfg.d_model}")

# %% [markdown]
# ## 1 · The pairs
# Three kinds (`workbench.lessons.pronoun_pairs`): **possessive** and **subject** pairs as in lesson 14, and
# **number** pairs, which make a sentence-initial singular subject plural with its verb (*Ein kleiner Hund rennt* /
# *Zwei kleine Hunde rennen*); their translations may differ in *A*/*Two*, *dog*/*dogs* ..., and the contrast is the
# first word that marks number (*is*/*are*, *was*/*were*, *his*/*their* ...). The clean side is the singular one.
# Pairs come from the validation and test sentences first (never seen in training); the train split is scanned only
# when they give too few.

# %%
heldout = [("val", s) for s, _ in load_multi30k("val")] + [("test", s) for s, _ in load_multi30k("test_2016_flickr")]
t0 = time.perf_counter()
# quotas per kind: candidates are checked in rounds, in sentence order, until each kind has its share
quota = {"possessive": 2, "subject": 2, "number": 2} if SMOKE else {"number": N_NUMBER_PAIRS}
pairs = build_pronoun_pairs(model, tok, heldout, limit_per_kind=quota, round_size=128 if SMOKE else 512)
n_heldout_pairs = len(pairs)
if len(pairs) < n_pairs and TRAIN_SENTENCES > 0 and not SMOKE:
    train = [("train", s) for s, _ in load_multi30k("train", limit=TRAIN_SENTENCES)]
    pairs += build_pronoun_pairs(model, tok, train, kinds=("possessive", "subject"), limit=n_pairs - len(pairs))
metrics["pairs_seconds"] = time.perf_counter() - t0
print(f"{len(pairs)} pairs in {time.perf_counter() - t0:.0f} s: {n_heldout_pairs} from val and test, "
      f"{len(pairs) - n_heldout_pairs} from the train split")
kinds = {k: sum(p.kind == k for p in pairs) for k in ("possessive", "subject", "number")}
print("by kind:", kinds)
shown_pairs = [p for p in pairs if p.kind != "number"][:4] + [p for p in pairs if p.kind == "number"][:3]
display(Markdown(figures.markdown_table([
    {"kind": p.kind, "clean (masculine / singular)": p.clean_text, "corrupted (feminine / plural)": p.corrupt_text,
     "answers": f"{tok.id_to_token(p.good).lstrip('▁')} / {tok.id_to_token(p.bad).lstrip('▁')}",
     "translation (clean)": p.translation} for p in shown_pairs])))
metrics.update(n_pairs=len(pairs), n_heldout_pairs=n_heldout_pairs, pairs_by_kind=kinds)

# %% [markdown]
# Each pair also gets an **unrelated** sentence for the controls: a validation or test sentence with the same number
# of source tokens and no gendered word. Patching it in asks how much *any* activation at that site moves the answer.

# %%
pool = ps.neutral_pool(tok, (s for _, s in heldout))  # source length -> unrelated sentences (no gendered word)
print(f"unrelated sentences for {sum(len(p.clean_src) in pool for p in pairs)} of {len(pairs)} pairs' lengths")

# %% [markdown]
# **Predict, then run.** Over all pairs, at which layer of the encoder (`"embed"`, `"enc 0"`, `"enc 1"`, `"enc 2"`) will patching the edited words (the possessive or the subject) restore the most of the logit difference? Write your prediction in the next cell before you run the cells after it (leave `None` to skip: the lesson runs either way).

# %% tags=["answer"]
PREDICT_BEST_LAYER: str | None = None  # embed, enc 0, enc 1 or enc 2

# %% [markdown]
# ## 2 · Over all pairs, with controls
# Lengths differ from pair to pair, so positions are grouped by role before averaging: the **possessive** (and
# *er*) positions, the **subject** positions (article, adjective ending, noun; subject pairs only), every edited
# position together (**edit**), the final **eos** position, and, as the first control, one **random** unedited
# position. Each group is patched at once, per layer. The second control patches the same groups from the
# **unrelated** sentence instead of the clean one. Intervals are 95 % percentile bootstraps over pairs.
#
# Singular/plural pairs are averaged apart, with groups of their own (named `number·...`): the **subject** words
# (article, adjective endings, noun), the **verb** endings, every edited position, eos, and their own random
# position; on the decoder side the contrast row and the swapped words (*A*/*Two*, *dog*/*dogs*).
# Each pair's groups (and its random position) are drawn once and used for every family and both donors.

# %%
sweeps = ps.sweep_pairs(model, tok, pairs, pool, rng)  # every group, per layer, from both donors; cross heads too
collected, heads = sweeps.collected, sweeps.heads  # (family, donor, group) -> per pair (L,); heads: per pair (L, H)
metrics.update(sweep_seconds=sweeps.seconds, n_pairs_swept=sweeps.used)
print(f"{sweeps.used} pairs swept in {sweeps.seconds:.0f} s ({len(pairs) - sweeps.used} without an unrelated sentence "
      "of their length)")

# %%
LAYERS = ps.layer_names(cfg)  # family -> its rows: embed, enc 0, ... (or dec 0, ...)
summary = ps.summarise(collected, LAYERS, n_resamples=N_BOOTSTRAP, seed=SEED)  # 95 % intervals, for the figures
for groups, what in ((ps.GENDER_GROUPS, "gender"), (ps.NUMBER_GROUPS, "singular/plural")):
    for family, names in groups.items():
        names = names if what == "gender" else tuple("number·" + g for g in names)
        interval_figure(*ps.interval_rows(summary, family, LAYERS[family], names),
                        title=f"{family}, {what} pairs: mean score over pairs, 95 % intervals").show()

# %% [markdown]
# ## 3 · What the intervals support
# A finding is stated only where its whole interval lies above both controls' intervals at the same site (the
# random position of the same layer, and the same positions patched from the unrelated sentence), and its mean
# restores at least `MIN_EFFECT` of the logit difference (a real but negligible effect is not a finding). Many cells
# are tested at once, so with plain 95 % intervals some would clear by chance: the intervals here are corrected
# for the number of cells tested (Bonferroni, level $1 - 0.05/m$), which the cell prints. The decoder's state at
# the pronoun row is left out: at the last layer it *is* the answer (the logits are read from it), so it restores
# everything by construction; it is a check of the machinery (the closing checks), not a finding. A cleared cell
# says that patching there suffices to restore the answer, beyond what the controls restore, not that the model
# routes the gender through it. The sentences below are written by the run from its own numbers.

# %% [markdown]
# ### Exercise 15.corrected_interval · `corrected_interval`
#
# Write the interval every cell below is judged by. `scores` holds one score per pair (a row) and per layer (a
# column); `resamples` holds R bootstrap resamples, each a row of N pair indices drawn with replacement. The bootstrap
# mean of resample r is the mean over pairs of the rows `scores[resamples[r]]`. With `m` cells tested at once and a
# family-wise error `alpha`, Bonferroni tests each cell at level $1 - \alpha/m$: the interval runs from the
# $\alpha/(2m)$ quantile to the $1 - \alpha/(2m)$ quantile of the R bootstrap means (linear interpolation, the
# default of `torch.quantile`). Return the mean over pairs and the two ends, in the dtype of `scores`, and leave the
# inputs as they are.
#
# Shapes: `scores` (N, L), `resamples` (R, N) long, `m` an int → three tensors (L,).

# %% tags=["exercise", "hide-input"]
def corrected_interval(scores, resamples, m, alpha=0.05):
    """The mean over pairs and its Bonferroni-corrected percentile bootstrap interval: (mean, low, high)."""
    # BEGIN SOLUTION NO PROMPT
    means = scores[resamples].mean(dim=1)  # (R, L): one bootstrap mean per resample and layer
    tail = alpha / (2 * m)  # alpha / m left outside the interval, half in each tail
    low, high = torch.quantile(means, torch.tensor([tail, 1 - tail], dtype=means.dtype), dim=0)
    return scores.mean(dim=0), low, high
    # END SOLUTION
    """ # BEGIN PROMPT
    raise NotImplementedError("write corrected_interval, then run the check below")
    """  # END PROMPT

# %%
from workbench.lessons import exercises as ex
result = ex.check("15.corrected_interval", corrected_interval)
corrected_interval = result.function  # yours if it passed, else the reference
result

# %%
found = ps.findings(collected, LAYERS, MIN_EFFECT, n_resamples=N_BOOTSTRAP, seed=SEED)  # Bonferroni over the cells
findings = found["cells"]
cleared = [f for f in findings if f["clears"]]
caveat = (f"*SMOKE run: {len(pairs)} pairs. These lines show the method at work; with so few pairs they are not "
          "evidence.*\n\n" if SMOKE else "")
for what, number in (("Gender pairs (his/her)", False), ("Singular/plural pairs (is/are ...)", True)):
    lines = ps.finding_lines(findings, number=number)
    display(Markdown(caveat + f"**{what}**\n\n" + ("\n".join(lines) if lines else "No site clears its controls.")))
print(f"{len(cleared)} of {found['tested']} (site, group) cells clear their controls at the corrected level "
      f"{found['level']:.4f} (each interval at 1 - 0.05 / {found['tested']})")
metrics["findings"] = [{k: f[k] for k in ("family", "layer", "group", "mean", "low", "high", "n", "control_high")}
                       for f in cleared]
metrics.update(n_cells_tested=found["tested"], corrected_level=found["level"], smoke_findings=SMOKE)
metrics["summary"] = [{"family": k[0], "layer": k[1], "donor": k[2], "group": k[3], **v} for k, v in summary.items()]

# %% [markdown]
# Your interval, on the strongest encoder cell of the table: its scores over pairs, the same resamples the package
# drew (from `SEED`), and the number of cells tested. It must give the package's interval to the last digit.

# %%
top = max((f for f in findings if f["family"] == "enc.resid"), key=lambda f: f["mean"])
rows = np.stack(collected[(top["family"], "clean", top["group"])]).astype(np.float64)  # (N, layers): a row per pair
idx = np.random.default_rng(SEED).integers(0, len(rows), size=(found["n_resamples"], len(rows)))  # (R, N)
mine = corrected_interval(torch.from_numpy(rows), torch.from_numpy(idx), found["tested"], 0.05)
at = LAYERS[top["family"]].index(top["layer"])
own_low, own_high = float(mine[1][at]), float(mine[2][at])
print(f"encoder {top['layer']}, {top['group']} positions, over {len(rows)} pairs: yours [{own_low:.4f}, {own_high:.4f}], "
      f"the package's [{top['low']:.4f}, {top['high']:.4f}] (level {found['level']:.4f}, {found['n_resamples']} resamples)")
metrics["own_interval_error"] = max(abs(own_low - top["low"]), abs(own_high - top["high"]))

# %% [markdown]
# Read the unrelated-sentence control closely. Putting a genderless word's state where *ihrem* was does not add
# anything masculine, yet it can move the answer a long way towards *his*: it removes the feminine cue, and what
# the model writes without a cue is its default. The distance between the clean patch and that control is what the
# masculine word adds beyond removing the feminine one.

# %%
(family, layer, _, group), clean_s = ps.best_cell(summary, "enc.resid", ("possessive", "subject"))
ctrl_s = summary[(family, layer, "unrelated", group)]
rand_s = summary[(family, layer, "clean", "random")]
for name, s_ in (("clean sentence", clean_s), ("unrelated sentence", ctrl_s), ("clean, random position", rand_s)):
    print(f"encoder {layer}, {group} positions, patched from the {name}: "
          f"{s_['mean']:.2f} [{s_['low']:.2f}, {s_['high']:.2f}]")
metrics["best_encoder_vs_controls"] = {"layer": layer, "group": group, "clean": clean_s, "unrelated": ctrl_s,
                                       "random": rand_s}

# %%
ex.predict("15.best_layer", PREDICT_BEST_LAYER, layer,
           "The gender is in the source words themselves: patched at the embeddings they can already restore much of it; deeper layers add what attention has gathered from the rest of the sentence, and the unrelated-sentence control shows how much of any of it is just removing the feminine cue.")

# %% [markdown]
# Now set the two kinds side by side. For a singular/plural pair the decoder has already written *A dog* or *Two
# dogs* when it reaches the verb: the number is in the English prefix as well as in the German source. Which of the
# two does the answer rely on? Compare the best source-side group (the encoder state at the edited words) with the
# swapped English words patched at the decoder's input, for each kind.

# %%
side_by_side = ps.source_against_prefix(summary)
for what, s in side_by_side.items():
    enc, dec = s["encoder"], s["decoder_input"]
    print(f"{what} pairs: encoder {enc['layer']} at {enc['group'].removeprefix('number·')}: "
          f"{enc['mean']:.2f} [{enc['low']:.2f}, {enc['high']:.2f}]; "
          + (f"the swapped English words at the decoder's input: {dec['mean']:.2f} "
             f"[{dec['low']:.2f}, {dec['high']:.2f}]" if dec else "no swapped English words before the answer"))
metrics["source_vs_prefix"] = side_by_side

# %% [markdown]
# The cross-attention heads, averaged over pairs: a head is named only where its interval, corrected for the number
# of heads tested, clears the same head patched from the unrelated sentence (and its mean reaches `MIN_EFFECT`).

# %%
head_means, head_findings = ps.head_findings(heads, MIN_EFFECT, n_resamples=N_BOOTSTRAP, seed=SEED)
for (kind, family), mean in head_means.items():
    patching_heatmap(ps.mean_head_result(mean, family), title=f"{family} heads, {kind} pairs: mean score over pairs").show()
display(Markdown("\n".join(
    f"- {f['kind']} pairs, {f['family']} head {f['layer']}.{f['head']}: {f['mean']:.2f} [{f['low']:.2f}, {f['high']:.2f}] "
    f"(unrelated sentence: at most {f['control_high']:.2f})" for f in head_findings[:8]) or "No head clears its control."))
metrics["head_findings"] = head_findings

# %% [markdown]
# ## 4 · Path patching: from encoder heads to cross-attention heads
# Which encoder heads write the gender into the memory that a given cross-attention head reads? For a sender head in
# the encoder and a receiver head in the last decoder layer's cross-attention: run the feminine sentence with the sender's
# output taken from the masculine run and every other encoder head frozen, record the keys and values the receiver
# reads, then run the feminine sentence again with only the receiver's keys and values replaced by those
# (`wb.path_patching`). The slowest sweep: a few pairs only, each against the unrelated sentence.
#
# The direction matters. This is *denoising* path patching: the clean (masculine) sender's output goes into the
# corrupted (feminine) run, and we ask whether that path suffices to bring *his* back. Wang et al. (2022), who
# introduced path patching for the indirect-object circuit, ran it the other way (*noising*: a corrupted sender into
# the clean run, asking whether the path is necessary). The two answer different questions and need not agree.
# The strongest of all sender-receiver paths is picked after looking at every one, so its interval is optimistic:
# it is named only if it clears the unrelated-sentence control.

# %%
t0 = time.perf_counter()
last_layer = [cfg.n_dec_layers - 1]
path_pairs = [p for p in pairs if p.kind != "number" and ps.unrelated_for(p, pool, rng) is not None][:n_path_pairs]
paths, path_ctrl = ps.path_patching_over_pairs(model, path_pairs, pool, rng, receiver_layers=last_layer)
metrics["path_seconds"] = time.perf_counter() - t0
path_map, path = ps.strongest_path(paths, path_ctrl, last_layer, MIN_EFFECT, n_resamples=N_BOOTSTRAP, seed=SEED)
path_patching_figure(path_map, title=f"path patching, mean over {len(paths)} pairs").show()
print(f"strongest path: encoder head {path['sender'][0]}.{path['sender'][1]} -> cross head {path['receiver'][0]}."
      f"{path['receiver'][1]}: {path['mean']:.3f} [{path['low']:.3f}, {path['high']:.3f}], unrelated sentence at "
      f"most {path['control_high']:.3f}: " + ("clears it" if path["clears"] else "does not clear it; no claim"))
metrics["path"] = path

# %% [markdown]
# ## Checks
# The machinery first: a site that holds the whole answer restores it whole on every pair (the last decoder layer
# at the answer row), and an unedited token's embedding restores nothing. Then what the lesson showed.

# %%
metrics.update(ex.summary())  # every exercise's check and prediction, read back by `workbench notebooks grade`
last = summary[("dec.resid", f"dec {cfg.n_dec_layers - 1}", "clean", "pronoun row")]
last_number = summary[("dec.resid", f"dec {cfg.n_dec_layers - 1}", "clean", "number·answer row")]
metrics["last_decoder_layer_pronoun_row"] = last
metrics["number"] = {"pairs": kinds["number"], "last_decoder_layer_answer_row": last_number,
                     "findings": [f for f in metrics["findings"] if f["group"].startswith("number·")]}
(_, best_layer, _, best_group), best_s = ps.best_cell(summary, "enc.resid", ("possessive", "subject", "eos"))
metrics["best_encoder_site"] = {"layer": best_layer, "group": best_group, **best_s}
metrics["seconds"] = time.perf_counter() - wall_start
json.dump(metrics, open("metrics.json", "w"), indent=1)
print(json.dumps({k: metrics[k] for k in ("n_pairs", "n_heldout_pairs", "last_decoder_layer_pronoun_row",
                                          "best_encoder_site")}, indent=1))

# %%
assert metrics["own_interval_error"] < 1e-9, "your corrected interval must be the package's on the lesson's cell"
assert abs(last["mean"] - 1.0) < 1e-3 and last["low"] > 0.99, "the last decoder layer at the pronoun row is the answer"
assert abs(last_number["mean"] - 1.0) < 1e-3 and last_number["low"] > 0.99, "the same for the number pairs' answer row"
assert kinds["number"] >= (2 if SMOKE else 20) and kinds["possessive"] and kinds["subject"], kinds
assert len(pairs) >= (4 if SMOKE else 100), f"only {len(pairs)} minimal pairs"
# the random position of the embedding layer does nothing at all: an unedited token is the same in both runs
emb_random = summary[("enc.resid", "embed", "clean", "random")]
assert abs(emb_random["mean"]) < 1e-4 and abs(emb_random["high"]) < 1e-4
# the lesson's claim: at the edited words, the encoder's state brings "his" back, far beyond a random position
best_site = metrics["best_encoder_site"]
random_same_layer = summary[("enc.resid", best_site["layer"], "clean", "random")]
assert best_site["group"] in ("possessive", "subject") and best_site["low"] > random_same_layer["high"], \
    (best_site, random_same_layer)
if not SMOKE:  # number pairs: the English prefix carries the number more than any source-side group does
    sbs = metrics["source_vs_prefix"]["number"]
    assert sbs["decoder_input"]["low"] > sbs["encoder"]["high"], sbs
if not SMOKE:  # with a hundred pairs, against both controls too
    assert any(f["family"] == "enc.resid" and f["group"] in ("possessive", "subject", "edit") for f in cleared), \
        "no encoder site cleared its controls"
