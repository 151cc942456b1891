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
# # 08 · Subwords and batches
#
# The paper's models read byte-pair-encoded text (§5.1: a shared source-target vocabulary of about 37000 tokens
# for English-German) and are trained on batches "by approximate sequence length" of about 25000 source and 25000
# target tokens. Both choices sit before the model and decide how much work it does. Here we learn BPE merges by
# hand and check them against the `tokenizers` library, see what the vocabulary size does to sequence length (and so
# to attention's cost), why tying the source and target embeddings needs one joint vocabulary, and measure what
# sorting by length and token budgets do to padding and speed on Multi30k.

# %% tags=["parameters"]
SMOKE: bool = False  # fewer sentences and vocabulary sizes (what CI runs)
SEED: int = 0  # seeds the shuffles and the model's initialisation
N_TRAIN: int = 10000  # training pairs the tokenizers learn from (SMOKE: 2000)
N_CHECK: int = 300  # pairs the by-hand BPE learns from to be checked against the library (SMOKE: 100)
N_BATCH: int = 1024  # training pairs batched and timed (SMOKE: 256)
BATCH_SENTENCES: int = 64  # sentences per batch for the fixed-size batchings
REPEATS: int = 3  # timed passes over the batches per batching (the median is reported; SMOKE: 1)

# %%
import json
import statistics
import time
import numpy as np
import torch
import workbench as wb
from IPython.display import Markdown, display
from workbench.viz import figures
from workbench.lessons.bpe import learn_merges, apply_merges, library_merges, pre_tokenize
from workbench.translation.tokenizer import SubwordTokenizer
from workbench.translation.data import load_multi30k
from workbench.translation.batching import make_batch, token_batches
from workbench.translation.train import step_loss
figures.setup_offline_renderer()
wb.set_seed(SEED)
metrics = {}
n_train = 2000 if SMOKE else N_TRAIN
n_check = 100 if SMOKE else N_CHECK
n_batch = 256 if SMOKE else N_BATCH
repeats = 1 if SMOKE else REPEATS
train = load_multi30k("train", "de", "en")[:n_train]
val = load_multi30k("val", "de", "en")
print(f"{len(train)} training pairs, {len(val)} validation pairs")

# %% [markdown]
# ## Merges by hand
#
# BPE (Sennrich et al., 2016) starts from single characters. It counts every pair of adjacent symbols in the corpus
# (each word weighted by how often it occurs), merges the most frequent pair into one new symbol everywhere, and
# repeats until the vocabulary has the size asked for. Frequent words end up as one symbol, rare words as several
# pieces, and no word is ever out of vocabulary as long as its characters are known. To split a new word, the
# merges are applied in the order they were learned (not by looking for the longest known piece, which is
# WordPiece's rule).
#
# Two details differ from Sennrich et al. They ran BPE on *tokenized* text, punctuation already split from the words,
# and marked the *end* of each word (`</w>`). The workbench, like SentencePiece and the `tokenizers` library's
# Metaspace, splits on spaces only and marks the *start* of each word with `▁`, so a piece that begins a word differs
# from the same letters inside one, and punctuation stays glued to its word: in Multi30k's captions "Gras." is one
# word, and its period ends up inside a piece. Feed the tokenizer text written the way its training text was: a
# sentence typed with a detached " ." is rare in these captions (the cell below counts it), so its pieces are not
# the ones the model saw in training.
#
# A toy corpus: five words in different numbers. Watch the first merges build the frequent endings.

# %%
detached = sum(s.rstrip().endswith(" .") for s, _ in load_multi30k("train", "de", "en"))
print(f"German training captions that end in a detached ' .': {detached} of 29000")
metrics.update(detached_period_sentences=detached)
toy = ["low " * 5 + "lower " * 2 + "newest " * 6 + "widest " * 3 + "lowest"]
learned = learn_merges(toy, vocab_size=30, min_frequency=2)
words = sorted(set(pre_tokenize(toy[0])))
rows = []
for k, (pair, count) in enumerate(zip(learned.merges, learned.counts)):
    rows.append({"merge": k + 1, "pair": " + ".join(pair), "count": count,
                 **{w: " ".join(apply_merges(w, learned.merges[: k + 1])) for w in words}})
display(Markdown(figures.markdown_table(rows)))
print(f"{len(learned.merges)} merges, vocabulary of {len(learned.vocab)} symbols (4 specials, "
      f"{len(learned.vocab) - 4 - len(learned.merges)} characters, {len(learned.merges)} merged symbols)")

# %% [markdown]
# ### Exercise 08.apply_merges · `apply_merges`
#
# Split one word (its `▁` included) with learned merges: start from its characters and, round after round, find the
# adjacent pairs that a merge names and merge the pair whose merge was learned *earliest* (the leftmost such pair if it
# occurs twice); stop when no adjacent pair is a merge. That is how the table above was filled, one more merge per row.
#
# Shapes: `word` a string, `merges` a list of (left, right) string pairs in learned order → a list of strings.

# %% tags=["exercise", "hide-input"]
def apply_merges(word, merges):
    """Pieces of `word` after applying `merges` in learned order."""
    # BEGIN SOLUTION NO PROMPT
    rank = {pair: r for r, pair in enumerate(merges)}
    pieces = list(word)
    while True:
        pairs = [(rank[p], i) for i, p in enumerate(zip(pieces, pieces[1:])) if p in rank]
        if not pairs:
            return pieces
        _, i = min(pairs)  # the earliest merge; the leftmost occurrence first
        pieces[i: i + 2] = [pieces[i] + pieces[i + 1]]
    # END SOLUTION
    """ # BEGIN PROMPT
    raise NotImplementedError("write apply_merges, then run the check below")
    """  # END PROMPT

# %%
from workbench.lessons import exercises as ex
result = ex.check("08.apply_merges", apply_merges)
apply_merges = result.function  # yours if it passed, else the package's: the cells below work either way
result

# %% [markdown]
# ## The same merges as the `tokenizers` library
#
# The workbench's tokenizer is the `tokenizers` library's BPE trainer. Our dozen lines learn the same merges in the
# same order, on the toy corpus and on a sample of Multi30k (ties between equally frequent pairs go to the pair whose
# symbols came first, as the library breaks them). The library is much faster: it updates the pair counts after each
# merge instead of recounting the corpus.

# %%
def same_as_library(texts, vocab_size):
    ours = learn_merges(texts, vocab_size)
    lib = SubwordTokenizer.train([(t, "") for t in texts], vocab_size=vocab_size)
    theirs = library_merges(lib.src_tok)
    return list(ours.merges) == theirs, len(ours.merges), ours, lib


toy_same, _, _, _ = same_as_library(toy, 30)
sample = [s for pair in train[:n_check] for s in pair]
t0 = time.perf_counter()
m30k_same, m30k_merges, ours, lib = same_as_library(sample, 400)
print(f"toy corpus: identical merges {toy_same}; {n_check} Multi30k pairs: {m30k_merges} merges, identical {m30k_same} "
      f"({time.perf_counter() - t0:.1f} s)")
word = "Geländemotorrädern"
print(f"'{word}' by our merges: {apply_merges(pre_tokenize(word)[0], ours.merges)}; by the library: "
      f"{lib.src_tok.encode(word, add_special_tokens=False).tokens}")
metrics.update(toy_merges_match=toy_same, multi30k_merges_match=m30k_same, multi30k_merges=m30k_merges)

# %% [markdown]
# **Predict, then run.** Validation captions have about a dozen German words. With a joint vocabulary of 8,000 pieces, how many pieces will a validation sentence take on average (end-of-sentence token included)? Write your prediction in the next cell before you run the cells after it (leave `None` to skip: the lesson runs either way).

# %% tags=["answer"]
PREDICT_PIECES_8000: float | None = None  # mean pieces per sentence at V = 8000

# %% [markdown]
# ## Vocabulary size against sequence length
#
# More merges mean longer pieces, so fewer of them per sentence. That changes the cost of every layer: self-attention
# over n positions costs about $n^2 d$ multiply-adds, its projections and the feed-forward network about $n d^2$
# (lesson 11: attention is the cheaper part while $n < d$). The vocabulary itself costs $V d$ parameters in the
# embedding and $d V$ multiply-adds per target token in the output projection. We train a joint tokenizer at each size
# on the same training pairs and count the pieces of every validation sentence.

# %%
sizes = (500, 2000, 8000) if SMOKE else (250, 500, 1000, 2000, 4000, 8000, 16000)
d_model = 256  # the shipped small-de-en's width
rows, mean_src, mean_tgt = [], [], []
for V in sizes:
    tok = SubwordTokenizer.train(train, vocab_size=V)
    src = [len(x) for x in tok.encode_src([s for s, _ in val])]          # pieces + eos
    tgt = [len(y) - 1 for y in tok.encode_tgt([t for _, t in val])]      # pieces + eos (bos not counted)
    n = float(np.mean(src))
    mean_src.append(n)
    mean_tgt.append(float(np.mean(tgt)))
    rows.append({"V asked": V, "V learned": tok.src_vocab_size, "mean source pieces": round(n, 2),
                 "mean target pieces": round(mean_tgt[-1], 2), "n / d": round(n / d_model, 3),
                 "attention / projections (n²d / 4nd²)": round(n / (4 * d_model), 4),
                 "embedding parameters V·d": tok.src_vocab_size * d_model})
display(Markdown(figures.markdown_table(rows)))
figures.line_figure(list(sizes), {"source (German)": mean_src, "target (English)": mean_tgt}, xlabel="vocabulary size V",
                    ylabel="mean pieces per sentence", title="larger vocabularies, shorter sequences", log_x=True).show()
words_per_sentence = float(np.mean([len(s.split()) for s, _ in val]))
print(f"validation German sentences have {words_per_sentence:.1f} words on average: at V = {sizes[-1]} they take "
      f"{mean_src[-1]:.1f} pieces (eos included), at V = {sizes[0]} {mean_src[0]:.1f}")
metrics.update(vocab_sizes=list(sizes), mean_src_pieces=mean_src, mean_tgt_pieces=mean_tgt,
               words_per_sentence=words_per_sentence, max_n_over_d=max(mean_src) / d_model)


# %%
from workbench.lessons import exercises as ex
ex.predict("08.pieces_8000", PREDICT_PIECES_8000, mean_src[list(sizes).index(8000)],
           "Frequent words are one piece, rare and compound words several, and every sentence ends in eos: a little more than one piece per word at 8,000 pieces.")

# %% [markdown]
# With Multi30k's short captions, n stays far below $d_{model}$ at every size: attention is a small share of each
# layer's work here, and a larger vocabulary buys shorter sequences at the price of a larger embedding and output
# projection. On long documents (n in the thousands) the same choice would weigh on attention's $n^2$ instead.

# %% [markdown]
# ## One joint vocabulary for three-way tying
#
# The shipped model shares one matrix three ways (§3.4): the source embedding, the target embedding and the output
# projection. That only makes sense if id *i* means the same piece on both sides, so the tokenizer must learn one
# vocabulary from German and English together. German and English share many pieces: names, numbers, punctuation,
# loan words. With two separate vocabularies id *i* is usually a different string on each side. Two separate
# vocabularies can still have the same *size* (2,000 pieces each, below): a check of the sizes alone would tie them
# silently, so `build_model` takes the tokenizer and checks that every id names the same piece on both sides.

# %%
V = 8000
joint = SubwordTokenizer.train(train, vocab_size=V, joint=True)
separate = SubwordTokenizer.train(train, vocab_size=V, joint=False)
used_de = {i for ids in joint.encode_src([s for s, _ in train]) for i in ids}
used_en = {i for ids in joint.encode_src([t for _, t in train]) for i in ids}
shared = used_de & used_en
same_id_same_piece = sum(separate.id_to_token(i, "src") == separate.id_to_token(i, "tgt")
                         for i in range(4, min(separate.src_vocab_size, separate.tgt_vocab_size)))
print(f"joint vocabulary of {joint.src_vocab_size}: {len(used_de)} pieces used by German, {len(used_en)} by English, "
      f"{len(shared)} by both, e.g. {sorted(p for p in (joint.id_to_token(i, 'src') for i in shared) if p.startswith('▁') and p[1:].isalpha() and len(p) > 4)[:12]}")
print(f"separate vocabularies ({separate.src_vocab_size} German, {separate.tgt_vocab_size} English): the same id is the "
      f"same piece on both sides for {same_id_same_piece} of {min(separate.src_vocab_size, separate.tgt_vocab_size) - 4} ids")

# %% [markdown]
# Tying the source and target embeddings needs one vocabulary on both sides. Two separate vocabularies of equal size
# are not one vocabulary: the model checks the pieces, not only the sizes.

# %%
equal = SubwordTokenizer.train(train, vocab_size=2000, joint=False)  # two separate vocabularies, both full
sizes_equal = equal.src_vocab_size == equal.tgt_vocab_size
print(f"separate vocabularies of {equal.src_vocab_size} and {equal.tgt_vocab_size} pieces: equal sizes {sizes_equal}")
wb.build_model(wb.preset("small", tie_src_tgt=True), equal.src_vocab_size, equal.tgt_vocab_size)  # sizes only: ties
try:
    wb.build_model(wb.preset("small", tie_src_tgt=True), equal.src_vocab_size, equal.tgt_vocab_size, tokenizer=equal)
    refused = False
except wb.ConfigError as exc:
    refused = True
    print("the model refuses:", exc)

# %% [markdown]
# What tying saves, with the joint vocabulary:

# %%
tied = wb.build_model(wb.preset("small", tie_src_tgt=True, tie_output=True), joint.src_vocab_size, joint.tgt_vocab_size)
untied = wb.build_model(wb.preset("small", tie_src_tgt=False, tie_output=False), joint.src_vocab_size, joint.tgt_vocab_size)
saved = wb.count_parameters(untied) - wb.count_parameters(tied)
print(f"tying three ways saves {saved:,} parameters = 2·V·d = {2 * joint.src_vocab_size * 256:,} "
      f"({saved / wb.count_parameters(untied):.0%} of the untied model)")
metrics.update(shared_pieces=len(shared), separate_same_id_same_piece=same_id_same_piece,
               separate_sizes_equal=sizes_equal, mismatched_tying_refused=refused, tying_saves=saved, tying_saves_formula=2 * joint.src_vocab_size * 256)

# %% [markdown]
# ## Padding, length bucketing and token budgets
#
# A batch is a rectangle: every sentence is padded to the longest one in its batch, on the source and on the target
# side. Padding positions are masked out of attention and of the loss, but the matrix products still compute them.
# Three ways to cut the same training sentences into batches, with the shipped tokenizer:
#
# * **shuffled**: `BATCH_SENTENCES` sentences per batch in random order (lengths mixed);
# * **bucketed**: the same batch size, sentences sorted by length first (then the batch order shuffled);
# * **token budget**: sorted by length and packed until the padded batch reaches a budget of tokens
#   (`token_batches`, the workbench's training batcher; the paper's ~25000 tokens, at our scale the same number of
#   padded slots as an average shuffled batch).
#
# For each we count the padding over every training pair; then, on the first `N_BATCH` pairs, we time forward and
# backward passes of a narrow model (1+1 layers, d_model 128, so the timing fits in the lesson) over all the batches:
# same sentences, same model; the batchings alternate and the median of `REPEATS` passes counts.

# %% [markdown]
# ### Exercise 08.padding_stats · `padding_stats`
#
# Count what a batching costs. `batches` lists the example indices of each batch; each further argument gives one
# side's per-example lengths (source, target, ...). On every side, a batch is padded to its own longest member:
# it takes `len(batch) * max length in the batch` slots. Return a dict with `"real"` (real tokens, all sides),
# `"slots"` (padded slots, all sides), `"padding_fraction"` (the share of slots that are padding, 0 when there are
# no slots) and `"batches"` (their number), each a float.
#
# Shapes: `batches` a list of index lists, `*lengths` lists of ints → a dict of four floats.

# %% tags=["exercise", "hide-input"]
def padding_stats(batches, *lengths):
    """Real tokens, padded slots, padding fraction and number of batches of a batching."""
    # BEGIN SOLUTION NO PROMPT
    real = slots = 0
    for side in lengths:
        for batch in batches:
            if batch:
                real += sum(side[i] for i in batch)
                slots += len(batch) * max(side[i] for i in batch)
    return {"real": float(real), "slots": float(slots), "padding_fraction": 1 - real / slots if slots else 0.0,
            "batches": float(len(batches))}
    # END SOLUTION
    """ # BEGIN PROMPT
    raise NotImplementedError("write padding_stats, then run the check below")
    """  # END PROMPT

# %%
result = ex.check("08.padding_stats", padding_stats)
padding_stats = result.function
result

# %%
_, shipped_tok, _ = wb.pretrained("small-de-en")


def batchings_of(src_len, tgt_len, seed):
    """The three batchings of the same sentences (index lists), and the token budget used."""
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(src_len), generator=g).tolist()
    shuffled = [order[k: k + BATCH_SENTENCES] for k in range(0, len(order), BATCH_SENTENCES)]
    rank = {i: k for k, i in enumerate(order)}                         # ties in length keep the random order
    by_length = sorted(range(len(src_len)), key=lambda i: (src_len[i] + tgt_len[i], rank[i]))
    bucketed = [by_length[k: k + BATCH_SENTENCES] for k in range(0, len(by_length), BATCH_SENTENCES)]
    bucketed = [bucketed[j] for j in torch.randperm(len(bucketed), generator=g).tolist()]
    budget = int(padding_stats(shuffled, src_len, tgt_len)["slots"] / len(shuffled))
    out = {"shuffled": shuffled, "bucketed": bucketed, "token budget": token_batches(src_len, tgt_len, max_tokens=budget, seed=seed)}
    assert all(sorted(i for b in bs for i in b) == list(range(len(src_len))) for bs in out.values())  # same sentences
    return out, budget


# %% [markdown]
# Padding, counted over every training pair under the three batchings:

# %%
all_pairs = load_multi30k("train", "de", "en")
all_src = [len(x) for x in shipped_tok.encode_src([s for s, _ in all_pairs])]
all_tgt = [len(y) - 1 for y in shipped_tok.encode_tgt([t for _, t in all_pairs])]   # decoder positions: bos .. last piece
everything, budget_all = batchings_of(all_src, all_tgt, SEED)
stats = {name: padding_stats(b, all_src, all_tgt) for name, b in everything.items()}
display(Markdown(figures.markdown_table([{"batching": k, "batches": int(v["batches"]), "padding fraction": round(v["padding_fraction"], 3),
                                          "padded slots": int(v["slots"]), "real tokens": int(v["real"])} for k, v in stats.items()])))
print(f"all {len(all_pairs)} training pairs: padding {stats['shuffled']['padding_fraction']:.0%} shuffled, "
      f"{stats['bucketed']['padding_fraction']:.0%} bucketed, {stats['token budget']['padding_fraction']:.0%} with a token "
      f"budget of {budget_all} padded slots per batch")

# %% [markdown]
# Speed: one pass of forward and backward over the first pairs, batched the three ways, on a small model.

# %%
pairs = all_pairs[:n_batch]
src_ids = shipped_tok.encode_src([s for s, _ in pairs])
tgt_ids = shipped_tok.encode_tgt([t for _, t in pairs])
src_len = [len(x) for x in src_ids]
tgt_len = [len(y) - 1 for y in tgt_ids]
batchings, budget = batchings_of(src_len, tgt_len, SEED)
timed_stats = {name: padding_stats(b, src_len, tgt_len) for name, b in batchings.items()}

torch.manual_seed(SEED)
model = wb.build_model(wb.preset("small", d_model=128, n_heads=4, d_ff=512, n_enc_layers=1, n_dec_layers=1, dropout=0.0),
                       shipped_tok.src_vocab_size, shipped_tok.tgt_vocab_size)
tensors = {name: [make_batch([src_ids[i] for i in b], [tgt_ids[i] for i in b], model.pad_id) for b in bs]
           for name, bs in batchings.items()}


def one_pass(batches):
    t0 = time.perf_counter()
    for batch in batches:
        loss, n = step_loss(model, model, batch, model.pad_id)
        loss.backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


# %%
one_pass(tensors["shuffled"][:2])  # warm-up
seconds = {name: [] for name in batchings}
for r in range(repeats):
    for name in (list(batchings) if r % 2 == 0 else list(batchings)[::-1]):
        seconds[name].append(one_pass(tensors[name]))
rows = []
for name, s in timed_stats.items():
    t = statistics.median(seconds[name])
    rows.append({"batching": name, "batches": int(s["batches"]), "padding fraction": round(s["padding_fraction"], 3),
                 "padded slots": int(s["slots"]), "seconds": round(t, 2), "real tokens / s": int(s["real"] / t)})
display(Markdown(figures.markdown_table(rows)))
figures.bar_figure(list(timed_stats), [r["real tokens / s"] for r in rows], title="training throughput (forward + backward)",
                   ylabel="real tokens per second").show()
speedup = rows[1]["real tokens / s"] / rows[0]["real tokens / s"]
print(f"{len(pairs)} pairs timed: bucketing runs {speedup:.2f}x and the token budget "
      f"{rows[2]['real tokens / s'] / rows[0]['real tokens / s']:.2f}x as many real tokens per second as shuffling "
      f"({torch.get_num_threads()} thread(s))")
metrics.update(padding_fraction={k: v["padding_fraction"] for k, v in stats.items()},
               timed_padding_fraction={k: v["padding_fraction"] for k, v in timed_stats.items()},
               tokens_per_second={r["batching"]: r["real tokens / s"] for r in rows}, token_budget=budget_all,
               bucketed_speedup=speedup)

# %% [markdown]
# Sorting by length removes most of the padding; the token budget then also evens out the work per batch (short
# sentences travel in large batches, long ones in small), which is what lets the paper fix the batch size in tokens
# rather than sentences. Bucketing has a price the numbers do not show: each batch holds sentences of one length, so
# its gradient is less representative of the data than a random batch's. Shuffling the *order* of the batches every
# epoch does not undo that: it changes which batch comes when, not what is inside a batch. `token_batches` also
# breaks ties in length at random each epoch, so sentences of the same length change batches from one epoch to the
# next, but every batch still holds sentences of about one length. Sorting within a random window (shuffle, cut into
# large chunks, sort each chunk, then batch) or adding noise to the lengths before sorting mixes lengths more, at a
# cost in padding.

# %%
metrics.update(ex.summary())  # every exercise's check and prediction, read back by `workbench notebooks grade`

# %%
with open("metrics.json", "w") as f:
    json.dump(metrics, f, indent=1, ensure_ascii=False)
# our BPE is the library's, merge for merge
assert metrics["toy_merges_match"] and metrics["multi30k_merges_match"] and metrics["multi30k_merges"] > 100
# more merges, shorter sequences: the mean length falls at every step up in vocabulary size
assert all(a > b for a, b in zip(metrics["mean_src_pieces"], metrics["mean_src_pieces"][1:]))
# and captions stay far shorter than the model is wide (attention the small part of a layer, lesson 11)
assert metrics["max_n_over_d"] < 0.5
# tying needs the joint vocabulary: the two sides share pieces; separate vocabularies are refused, by their pieces
# and not only by their sizes (the refused pair has two vocabularies of equal size); 2·V·d saved
assert metrics["shared_pieces"] > 100 and metrics["mismatched_tying_refused"] and metrics["separate_sizes_equal"]
assert metrics["tying_saves"] == metrics["tying_saves_formula"]
# sorting by length cuts padding, and a token budget keeps it as low
pf = metrics["padding_fraction"]
assert pf["bucketed"] < pf["shuffled"] / 2 and pf["token budget"] < pf["shuffled"] / 2

# %% [markdown]
# ## Try it
#
# * `workbench notebooks run --only 08 -p N_TRAIN=29000` — every training pair for the tokenizers: do the
#   sequence lengths at each vocabulary size change much with three times the text?
# * `workbench notebooks run --only 08 -p BATCH_SENTENCES=16` — smaller batches: how much padding does shuffling
#   leave now, and does bucketing still pay in tokens per second?
