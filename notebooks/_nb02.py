NAME = "02_scaled_dot_product_attention"
CELLS = [
("md", r"""
# 02 · Scaled dot-product attention

Self-attention builds queries, keys and values from the same token vectors with three learned matrices:
$Q = XW^Q$, $K = XW^K$, $V = XW^V$. Every query is compared with every key, the scores are scaled by
$1/\sqrt{d_k}$, turned into weights by a softmax over the keys, and the output mixes the values:

$$\mathrm{Attention}(Q,K,V) = \mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}\right)V$$

We compute it step by step, check it against PyTorch's fused kernel, and measure *why* the scaling is there.
"""),
("params", """
SMOKE: bool = False  # fewer samples and sizes (what CI runs)
SEED: int = 0  # seeds every random draw
N_TOKENS: int = 4  # tokens in the worked example
D_MODEL: int = 8  # embedding width of the worked example
D_K: int = 4  # query/key/value width of the worked example
SAMPLES: int = 20000  # random query/key pairs per d_k for the variance measurement
"""),
("code", "COMMON"),
("code", """
samples = 2000 if SMOKE else SAMPLES
dks = [4, 16, 64, 256] if SMOKE else [4, 8, 16, 32, 64, 128, 256, 512]
"""),
("md", "## Q, K and V from the same tokens"),
("code", """
X = torch.randn(N_TOKENS, D_MODEL)              # token embeddings (+ positions)
W_q, W_k, W_v = (torch.randn(D_MODEL, D_K) / math.sqrt(D_MODEL) for _ in range(3))
Q, K, V = X @ W_q, X @ W_k, X @ W_v             # (T, d_k) each
scores = Q @ K.T                                # (T, T): query i against key j
scaled = scores / math.sqrt(D_K)
weights = torch.softmax(scaled, dim=-1)         # each row sums to 1
out = weights @ V                               # (T, d_k)
print("scores:\\n", scores.numpy().round(3)); print("weights:\\n", weights.numpy().round(3))
figures.attention_heatmap(weights, [f"x{i}" for i in range(N_TOKENS)], [f"x{i}" for i in range(N_TOKENS)],
                          title="softmax(QKᵀ/√d_k)").show()
fused = torch.nn.functional.scaled_dot_product_attention(Q[None], K[None], V[None])[0]
ours_fused, _ = wb.scaled_dot_product_attention(Q[None, None], K[None, None], V[None, None])
ours_explicit, w2 = wb.scaled_dot_product_attention(Q[None, None], K[None, None], V[None, None], need_weights=True)
err = max(float((out - fused).abs().max()), float((out - ours_fused[0, 0]).abs().max()), float((out - ours_explicit[0, 0]).abs().max()))
print("max difference between the hand computation and the kernels:", err)
metrics["max_path_difference"] = err
"""),
("md", r"""
## Why divide by $\sqrt{d_k}$
If the components of $q$ and $k$ are independent with mean 0 and variance 1, then $q\cdot k$ is a sum of $d_k$ such
products and has variance $d_k$. Large scores push the softmax into saturation: almost all weight on one key, and
gradients that vanish. Measured:
"""),
("code", """
var, var_scaled, max_w, max_w_scaled, grad, grad_scaled = [], [], [], [], [], []
for dk in dks:
    q, k = torch.randn(samples, dk), torch.randn(samples, dk)
    dots = (q * k).sum(-1)
    var.append(float(dots.var())); var_scaled.append(float((dots / math.sqrt(dk)).var()))
    # softmax over 16 keys: saturation and gradient size, with and without scaling
    qs, ks = torch.randn(256, 1, dk), torch.randn(256, 16, dk)
    for scale, mx, gr in ((1.0, max_w, grad), (1 / math.sqrt(dk), max_w_scaled, grad_scaled)):
        s = ((qs * ks).sum(-1) * scale).requires_grad_(True)
        p = torch.softmax(s, -1)
        mx.append(float(p.max(-1).values.mean()))
        (p * torch.randn_like(p)).sum().backward()
        gr.append(float(s.grad.norm(dim=-1).mean()))
slope, _ = wb.complexity.fit_loglog_slope(dks, var)
figures.loglog_figure(dks, {"Var(q·k)": var, "Var(q·k/√d_k)": var_scaled}, fits={"Var(q·k)": wb.complexity.fit_loglog_slope(dks, var)},
                      xlabel="d_k", ylabel="variance", title="variance of the dot product").show()
figures.line_figure(dks, {"max weight, unscaled": max_w, "max weight, scaled": max_w_scaled,
                          "grad norm, unscaled": grad, "grad norm, scaled": grad_scaled}, xlabel="d_k",
                    title="softmax saturation and gradient size").show()
print("fitted slope of Var(q.k) against d_k:", round(slope, 3))
metrics.update(variance_slope=slope, max_weight_unscaled_largest_dk=max_w[-1], max_weight_scaled_largest_dk=max_w_scaled[-1],
               grad_unscaled_largest_dk=grad[-1], grad_scaled_largest_dk=grad_scaled[-1], scaled_variance_mean=float(np.mean(var_scaled)))
"""),
("md", "## Additive versus dot-product attention\nBahdanau's additive score $v^\\top\\tanh(W_1 q + W_2 k)$ needs a hidden layer for every (query, key) pair; the dot product is one matrix multiplication. Same asymptotic cost, very different constants:"),
("code", """
def additive(q, k, W1, W2, v):
    return torch.tanh((q @ W1)[:, :, None, :] + (k @ W2)[:, None, :, :]) @ v   # (B, Tq, Tk)

T, d = (32, 64) if SMOKE else (128, 256)
q, k = torch.randn(8, T, d), torch.randn(8, T, d)
W1, W2, v = torch.randn(d, d), torch.randn(d, d), torch.randn(d)
def timeit(fn, reps=5):
    fn(); t = []
    for _ in range(reps):
        t0 = time.perf_counter(); fn(); t.append(time.perf_counter() - t0)
    return float(np.median(t))
t_add = timeit(lambda: additive(q, k, W1, W2, v))
t_dot = timeit(lambda: q @ k.transpose(1, 2) / math.sqrt(d))
flops_add = 8 * T * T * d * 2 + 2 * 8 * T * d * d * 2
flops_dot = 8 * T * T * d * 2
print(f"additive {t_add*1e3:.2f} ms, dot-product {t_dot*1e3:.2f} ms; FLOPs {flops_add:.3g} vs {flops_dot:.3g}")
metrics.update(additive_ms=t_add * 1e3, dot_ms=t_dot * 1e3)
"""),
("code", """
with open("metrics.json", "w") as f:
    json.dump(metrics, f, indent=1)
assert metrics["max_path_difference"] < 1e-5                      # hand computation == fused == explicit
assert 0.85 < metrics["variance_slope"] < 1.15                     # Var(q.k) grows linearly with d_k
assert 0.8 < metrics["scaled_variance_mean"] < 1.2                 # scaling brings it back to ~1
assert metrics["max_weight_unscaled_largest_dk"] > metrics["max_weight_scaled_largest_dk"]   # saturation
assert metrics["grad_unscaled_largest_dk"] < metrics["grad_scaled_largest_dk"]              # vanishing gradient
assert metrics["dot_ms"] < metrics["additive_ms"]
"""),
]
