NAME = "04_masked_attention"
CELLS = [
("md", r"""
# 04 · Masks: padding, causality, and what the decoder may see

Two different things are hidden from attention. **Padding**: sentences in a batch have different lengths, so the
shorter ones are filled with a pad token that must never be attended to. **The future**: during training the decoder
sees the whole target sentence at once (teacher forcing), so position $t$ must be kept from looking at positions
after $t$. Both are boolean masks (here: `True` = may attend), applied by setting the blocked scores to $-\infty$
before the softmax, which makes their weights exactly zero.
"""),
("params", """
SMOKE: bool = False  # smaller model (what CI runs)
SEED: int = 0  # seeds every random draw
SENTENCE_SRC: str = "Zwei Hunde spielen im Schnee ."  # source sentence of the examples
SENTENCE_TGT: str = "Two dogs play in the snow ."  # its target
PAD_TO: int = 9  # padded length of the source batch
"""),
("code", "COMMON"),
("code", """
from workbench.masks import padding_mask, causal_mask, attention_mask
from workbench.tokenizer import WordTokenizer
tok = WordTokenizer.train([(SENTENCE_SRC, SENTENCE_TGT), ("Ein Hund", "A dog")])
src_ids = tok.encode_src([SENTENCE_SRC, "Ein Hund"])
src = torch.zeros(2, PAD_TO, dtype=torch.long)
for i, ids in enumerate(src_ids):
    src[i, :len(ids)] = torch.tensor(ids)
pad = padding_mask(src, tok.pad_id)                      # (B, S)
T = len(tok.encode_tgt([SENTENCE_TGT])[0]) - 1
masks = {
    "padding (sentence 2)": attention_mask(pad)[1, 0].expand(PAD_TO, PAD_TO),
    "causal": causal_mask(T),
    "padding + causal": attention_mask(pad, causal=True, Tq=PAD_TO)[1, 0],
    "cross (target → source 2)": attention_mask(pad)[1, 0].expand(T, PAD_TO),
}
figures.masks_side_by_side(masks).show()
print(src)
"""),
("md", "## $-\\infty$ before the softmax gives exact zeros after"),
("code", """
scores = torch.randn(T, T)
blocked = scores.masked_fill(~causal_mask(T), float("-inf"))
w = torch.softmax(blocked, -1)
print(w.numpy().round(3))
metrics["future_weight_exactly_zero"] = bool((w.triu(1) == 0).all())
metrics["rows_sum_to_one"] = float((w.sum(-1) - 1).abs().max())
"""),
("md", "## Teacher forcing and the one-position shift\nThe decoder input is the target shifted right by one (it starts with `<bos>`); the label at each position is the next token:"),
("code", """
from workbench.batching import make_batch
b = make_batch(tok.encode_src([SENTENCE_SRC]), tok.encode_tgt([SENTENCE_TGT]), tok.pad_id)
inp = [tok.id_to_token(i) for i in b.tgt_in[0].tolist()]
out = [tok.id_to_token(i) for i in b.tgt_out[0].tolist()]
for t, (i, o) in enumerate(zip(inp, out)):
    print(f"position {t}: sees {inp[:t+1]!s:60} -> predicts {o}")
metrics["shift_ok"] = inp[1:] == out[:-1]
"""),
("md", "## No leak from the future\nChange every target token after position 3 and compare the decoder's outputs at positions 0..3: they must be bit-for-bit identical."),
("code", """
model = wb.build_model(wb.preset("tiny" if SMOKE else "small", dropout=0.0), tok.src_vocab_size, tok.tgt_vocab_size).eval()
tgt = b.tgt_in.clone()
logits = model(b.src, tgt)
changed = tgt.clone(); changed[:, 4:] = torch.randint(4, tok.tgt_vocab_size, changed[:, 4:].shape)
logits2 = model(b.src, changed)
same_past = bool(torch.equal(logits[:, :4], logits2[:, :4]))
future_moved = not torch.allclose(logits[:, 4:], logits2[:, 4:])
print("earlier positions unchanged:", same_past, "| later positions changed:", future_moved)
metrics.update(no_leak=same_past, future_changes=future_moved)
"""),
("md", "## Incremental decoding with a key/value cache\nAt inference time the decoder runs one token at a time. The keys and values of earlier positions do not change, so they are cached; the cross-attention keys and values of the source are computed once. Same numbers, far less work:"),
("code", """
memory = model.encode(b.src)
full = model.decode(tgt, memory, model.src_mask(b.src))
cache = model.init_cache()
steps = torch.cat([model.decode(tgt[:, t:t + 1], memory, model.src_mask(b.src), cache) for t in range(tgt.shape[1])], 1)
diff = float((steps - full).abs().max())
g1 = wb.decode.greedy_decode(model, b.src, use_cache=True, max_extra=20)
g2 = wb.decode.greedy_decode(model, b.src, use_cache=False, max_extra=20)
t0 = time.perf_counter(); wb.decode.greedy_decode(model, b.src, use_cache=True, max_extra=40); t_cache = time.perf_counter() - t0
t0 = time.perf_counter(); wb.decode.greedy_decode(model, b.src, use_cache=False, max_extra=40); t_nocache = time.perf_counter() - t0
print(f"max |cached - full| = {diff:.2e}; same greedy output: {torch.equal(g1, g2)}; {t_nocache/t_cache:.1f}x faster with the cache")
metrics.update(cache_max_diff=diff, cache_same_output=bool(torch.equal(g1, g2)))
"""),
("code", """
with open("metrics.json", "w") as f:
    json.dump(metrics, f, indent=1)
assert metrics["future_weight_exactly_zero"] and metrics["rows_sum_to_one"] < 1e-6
assert metrics["shift_ok"]
assert metrics["no_leak"] and metrics["future_changes"]
assert metrics["cache_max_diff"] < 1e-4 and metrics["cache_same_output"]
"""),
]
