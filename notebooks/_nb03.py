NAME = "03_positional_encoding"
CELLS = [
("md", r"""
# 03 · Positional encoding

Attention by itself ignores order: permuting the tokens permutes the outputs the same way. The paper adds a fixed
vector to each token embedding that depends only on its position:

$$PE_{(p, 2i)} = \sin\!\big(p / 10000^{2i/d_{model}}\big), \qquad PE_{(p, 2i+1)} = \cos\!\big(p / 10000^{2i/d_{model}}\big)$$

Each pair of dimensions is a sine/cosine at its own frequency, from one cycle per $2\pi$ tokens down to one cycle per
$10000 \cdot 2\pi$ tokens. Below: the table, the distance between positions, and the properties that follow.
"""),
("params", """
SMOKE: bool = False  # smaller sizes and a few seconds of training (what CI runs)
SEED: int = 0  # seeds every random draw
D_MODEL: int = 512  # width of the encoding (the paper's base model: 512)
LENGTH: int = 10  # positions in the distance table
MAX_LEN: int = 100  # positions in the heatmap
TRAIN_SECONDS: float = 40.0  # training budget of the learned-position model
"""),
("code", "COMMON"),
("code", """
from workbench.positional import sinusoidal_table, distance_matrix, rotation_matrix, expected_norm
table = sinusoidal_table(MAX_LEN, D_MODEL)
figures.positional_heatmap(table[:, :128], title=f"PE for {MAX_LEN} positions (first 128 of {D_MODEL} dimensions)").show()
"""),
("md", "## Distance between positions\nThe L2 distance $\\lVert PE(p) - PE(q)\\rVert$ for the first positions, the table the study notes show:"),
("code", """
dist = distance_matrix(sinusoidal_table(LENGTH, D_MODEL))
figures.distance_matrix_figure(dist, title=f"L2 distance between positions (d_model={D_MODEL})").show()
norms = table.norm(dim=-1)
offsets = range(1, min(LENGTH, 10))
spread = max(float(dist.diagonal(k).max() - dist.diagonal(k).min()) for k in offsets)
mean_by_offset = [float(distance_matrix(table).diagonal(k).mean()) for k in range(1, 30)]
print("row norms: min %.4f max %.4f, sqrt(d_model/2) = %.4f" % (norms.min(), norms.max(), expected_norm(D_MODEL)))
print("largest spread of distances at a fixed offset:", spread)
metrics.update(norm_error=float((norms - expected_norm(D_MODEL)).abs().max()), offset_spread=spread,
               distance_offset1=mean_by_offset[0], distance_offset10=mean_by_offset[9])
"""),
("md", r"""
Three properties are visible: every vector has the same length $\sqrt{d_{model}/2}$ (each sin/cos pair has norm 1);
the distance between two positions depends only on how far apart they are; and it grows with the offset (for
small offsets). The reason is that shifting by $k$ positions rotates every sin/cos pair by a fixed angle:
$PE(p+k) = M_k\,PE(p)$ for one matrix $M_k$ that does not depend on $p$.
"""),
("code", """
errs = []
for k in (1, 5, 17):
    M = rotation_matrix(k, D_MODEL)
    errs.append(float((table[:-k] @ M.T - table[k:]).abs().max()))
print("max |PE(p)M_k^T - PE(p+k)| for k=1,5,17:", errs)
metrics["rotation_error"] = max(errs)
"""),
("md", "## Learned positions\nTable 3 (row E) of the paper swaps the sinusoids for learned position embeddings with nearly the same BLEU. We train a small model with learned positions on a copy task and compare its position vectors with the sinusoids."),
("code", """
from workbench.data import synthetic_pairs
from workbench.tokenizer import WordTokenizer
from workbench.train import fit
train = synthetic_pairs("copy", 2000 if SMOKE else 6000, 3, 16, 20, seed=SEED)
val = synthetic_pairs("copy", 100, 3, 16, 20, seed=SEED + 1)
tok = WordTokenizer.train(train)
learned_max_len = 24
model = wb.build_model(wb.preset("tiny", d_model=64, d_ff=128, positional="learned", max_len=learned_max_len),
                       tok.src_vocab_size, tok.tgt_vocab_size)
cfg = wb.TrainConfig(epochs=1000, max_minutes=(8 if SMOKE else TRAIN_SECONDS) / 60, warmup_steps=100, lr_factor=0.5,
                     max_tokens=1000, eval_bleu=False, label_smoothing=0.0, seed=SEED, device="cpu")
hist = fit(model, tok, train, val, cfg)
learned = model.src_embed.positional.table.detach()[:18]
sin = sinusoidal_table(18, 64)
cos = lambda t: torch.nn.functional.normalize(t, dim=-1) @ torch.nn.functional.normalize(t, dim=-1).T
fig = figures.head_grid(torch.stack([cos(sin), cos(learned)])[:, None], [str(i) for i in range(18)], [str(i) for i in range(18)],
                        layer_labels=["sinusoidal", "learned"], title="cosine similarity between position vectors")
fig.show()
near = float(cos(learned).diagonal(1).mean())
far = float(cos(learned).diagonal(8).mean())
print("learned: mean cosine of neighbours %.3f, 8 apart %.3f" % (near, far))
metrics.update(learned_neighbour_cos=near, learned_far_cos=far, learned_val_loss=hist.val_loss[-1])
"""),
("md", "## Past the training length\nSinusoids exist for any position, so the table simply extends; a learned table has no row for a position it never saw, and the model says so:"),
("code", """
print("sinusoidal PE at position 5000 has norm", float(sinusoidal_table(5001, 64)[5000].norm()))
try:
    model.encode(torch.randint(4, tok.src_vocab_size, (1, learned_max_len + 1)))
    refused = False
except ValueError as exc:
    print("learned positions:", exc); refused = True
metrics["learned_refuses_long_input"] = refused
"""),
("code", """
with open("metrics.json", "w") as f:
    json.dump(metrics, f, indent=1)
assert metrics["norm_error"] < 1e-4                 # every row has norm sqrt(d_model/2)
assert metrics["offset_spread"] < 1e-3              # distance depends only on the offset
assert metrics["distance_offset10"] > metrics["distance_offset1"]   # and grows with it
assert metrics["rotation_error"] < 1e-3             # PE(p+k) is a fixed linear map of PE(p)
assert metrics["learned_refuses_long_input"]
"""),
]
