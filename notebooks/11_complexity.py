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
# # 11 · Why self-attention: Table 1, computed and measured
#
# Section 4 of the paper compares a self-attention layer with the layers it replaces on three counts, for a
# sequence of $n$ vectors of width $d$:
#
# * **work per layer**: the number of operations;
# * **sequential operations**: how many steps must wait for the previous one (what limits parallel hardware);
# * **maximum path length**: how many layers a signal has to pass through to get from one position to another
#   (shorter paths make long-range dependencies easier to learn). For the recurrent layer the unit is the same once
#   the layer is unrolled in time: it is $n$ applications of one cell, each reading its position's input and the
#   previous cell's state, so a signal from the first position crosses $n$ such layers to reach the last one. That
#   is why its path length, $O(n)$, equals its number of sequential operations.
#
# This notebook prints the table, then measures every entry on this machine: FLOPs counted by PyTorch while the
# layers run, wall-clock time, memory, sequential steps, and path lengths found by asking autograd when the last
# output first depends on the first input.

# %% tags=["parameters"]
SMOKE: bool = False  # tiny sizes (what CI runs)
SEED: int = 0  # seeds every random draw
N: int = 512  # sequence length of the analytic table
D: int = 512  # width of the analytic table
KERNEL: int = 3  # convolution kernel width k
R: int = 16  # neighbourhood size r of restricted self-attention (r / 2 keys on each side)
N_MIN_LOG2: int = 5  # smallest n of the n sweep is 2**N_MIN_LOG2
N_MAX_LOG2: int = 11  # largest n of the n sweep
D_FIXED: int = 64  # width during the n sweep
D_MIN_LOG2: int = 5  # smallest d of the d sweep
D_MAX_LOG2: int = 10  # largest d of the d sweep
N_FIXED: int = 128  # length during the d sweep
REPEATS: int = 3  # timed repetitions per point (the median is kept)
PATH_N_MAX_LOG2: int = 6  # path lengths are measured for n from 4 up to 2**PATH_N_MAX_LOG2

# %%
n_values = [2 ** i for i in range(4, 8)] if SMOKE else [2 ** i for i in range(N_MIN_LOG2, N_MAX_LOG2 + 1)]
d_values = [2 ** i for i in range(4, 8)] if SMOKE else [2 ** i for i in range(D_MIN_LOG2, D_MAX_LOG2 + 1)]
d_fixed = 32 if SMOKE else D_FIXED
n_fixed = 32 if SMOKE else N_FIXED
repeats = 1 if SMOKE else REPEATS
path_ns = [2 ** i for i in range(2, (4 if SMOKE else PATH_N_MAX_LOG2) + 1)]

# %%
import json
import workbench as wb
from workbench.viz import figures
figures.setup_offline_renderer()
wb.set_seed(SEED)
metrics = {}

# %%
from IPython.display import Markdown, display
from workbench.viz.figures import markdown_table
from workbench.lessons.complexity import KINDS, table1, analytic_path_length, measured_path_length, measure_layer, fit_loglog_slope
NAMES = {"self_attention": "self-attention", "recurrent": "recurrent", "convolutional": "convolutional",
         "restricted": "self-attention (restricted)"}

# %% [markdown]
# ## Table 1 of the paper, with numbers
#
# The first three columns are the paper's; the others put in $n$ = `N`, $d$ = `D`, $k$ = `KERNEL`, $r$ = `R`:
# multiply-adds of the layer's matrix products, steps that must run one after another, and layers a signal crosses
# between the two ends of the sequence (for the recurrent row, cells of the unrolled layer; for the convolution, a
# stack with dilations $1, k, k^2, \dots$, the paper's $O(\log_k n)$).
#
# Every row counts its work the same way: all the matrix products of the layer, one multiply-add each (2 FLOPs,
# what the counter below reports). That is two products for self-attention ($QK^\top$ and the weights times $V$:
# $2n^2d$; its $Q, K, V$ projections are left out, as in the paper) and two for the recurrent cell ($W_x x_t$ and
# $W_h h_{t-1}$ at every step: $2nd^2$). The constant factors do not change the $O(\cdot)$ of the paper's columns, but
# they decide where two rows cross, so they must be counted alike.
#
# **A misprint to watch for.** Some summaries, including the study notes this workbench follows, give the
# convolutional layer as $O(k \cdot n \cdot d)$. The paper has $O(k \cdot n \cdot d^2)$, and the square is real: a
# kernel of width $k$ that maps $d$ input channels to $d$ output channels has $k \cdot d \cdot d$ weights, each used
# once per position. The measurements below confirm it: convolution cost grows with $d^2$, like the recurrent layer,
# and is $k$ times one $d \times d$ product per position, where the recurrent cell has two.

# %% [markdown]
# ### Exercise 11.layer_macs · `layer_macs`
#
# Write the multiply-adds column: for a layer `kind` in `KINDS` over $n$ positions of width $d$, count every matrix
# product alike (one multiply-add per product term): self-attention $2n^2d$ ($QK^\top$ and the weights times $V$,
# projections left out), recurrent $2nd^2$ ($W_x x_t$ and $W_h h_{t-1}$ at each of the $n$ steps), convolutional
# $knd^2$ (a width-$k$ kernel mapping $d$ channels to $d$), restricted self-attention $2rnd$ (the two products over
# $r$ keys per query).
#
# Shapes: `kind` a string, `n`, `d`, `k`, `r` ints → an int.

# %% tags=["exercise", "hide-input"]
def layer_macs(kind, n, d, k=3, r=8):
    """Multiply-adds of one layer's matrix products over n positions of width d."""
    # BEGIN SOLUTION NO PROMPT
    counts = {"self_attention": 2 * n * n * d, "recurrent": 2 * n * d * d, "convolutional": k * n * d * d,
              "restricted": 2 * r * n * d}
    return counts[kind]
    # END SOLUTION
    """ # BEGIN PROMPT
    raise NotImplementedError("write layer_macs, then run the check below")
    """  # END PROMPT

# %%
from workbench.lessons import exercises as ex
result = ex.check("11.layer_macs", layer_macs)
layer_macs = result.function  # yours if it passed, else the package's: the cells below work either way
result

# %%
rows = table1(N, D, KERNEL, R)
display(Markdown(markdown_table(
    [{"layer": NAMES[r["layer"]], "complexity per layer": r["complexity"], "sequential operations": r["sequential"],
      "maximum path length": r["max_path"], f"multiply-adds (n={N}, d={D})": f"{r['macs']:,}",
      "sequential steps": r["sequential_ops"], "path (layers)": r["path_layers"]} for r in rows])))
macs = {r["layer"]: r["macs"] for r in rows}
print(f"convolution / recurrence = {macs['convolutional'] / macs['recurrent']:.1f} = k/2: the d² is in both rows "
      f"(k products of d×d per position against the cell's two)")
metrics.update(table_conv_over_recurrent=macs["convolutional"] / macs["recurrent"])

# %% [markdown]
# The explorer draws the same multiply-adds for any $n$, $d$, $k$ and $r$ (log scale): move $n$ past $d$ and the
# self-attention bar overtakes the recurrent one exactly at $n = d$; move $d$ and the recurrent and convolutional bars
# grow with its square while the attention bars grow with $d$.

# %%
from workbench.viz.lesson_widgets import complexity_explorer
complexity_explorer(n=N, d=D)

# %% [markdown]
# ## Measured work: FLOPs counted while the layers run
#
# Four layers, each applied to a `(1, n, d)` input: one head of **self-attention** written with matrix products
# (no projections: the $n^2 d$ core of the table), an Elman **recurrent** layer written as an explicit loop over
# positions, a **convolution** of width $k$, and **restricted** self-attention computed on windows of $r+1$
# neighbours. `torch.utils.flop_counter.FlopCounterMode` counts the FLOPs of the matrix products and convolutions
# they execute. On log-log axes a power law $n^a$ is a straight line of slope $a$: the fitted slopes are the
# exponents of Table 1. The counts are also compared with the table's multiply-adds: each is exactly twice the
# table's figure, except restricted attention's, whose window holds the query's own position besides its $r$
# neighbours ($r+1$ keys, a factor $(r+1)/r$).

# %%
sweep_n = {kind: [measure_layer(kind, n, d_fixed, KERNEL, R, repeats=repeats) for n in n_values] for kind in KINDS}
sweep_d = {kind: [measure_layer(kind, n_fixed, d, KERNEL, R, repeats=repeats) for d in d_values] for kind in KINDS}
def series(sweep, key):
    return {NAMES[k]: [m[key] for m in v] for k, v in sweep.items()}
def slopes(xs, ys_by_name, tail=None):
    tail = tail or len(xs)
    return {name: fit_loglog_slope(xs[-tail:], ys[-tail:]) for name, ys in ys_by_name.items()}
flops_n, flops_d = series(sweep_n, "flops"), series(sweep_d, "flops")
fit_fn, fit_fd = slopes(n_values, flops_n), slopes(d_values, flops_d)
figures.loglog_figure(n_values, flops_n, fits=fit_fn, xlabel="n (sequence length)", ylabel="FLOPs",
                      title=f"counted FLOPs against n (d = {d_fixed})").show()
figures.loglog_figure(d_values, flops_d, fits=fit_fd, xlabel="d (width)", ylabel="FLOPs",
                      title=f"counted FLOPs against d (n = {n_fixed})").show()

# %% [markdown]
# The fitted slopes against Table 1's exponents:

# %%
expected_n = {"self-attention": 2, "recurrent": 1, "convolutional": 1, "self-attention (restricted)": 1}
expected_d = {"self-attention": 1, "recurrent": 2, "convolutional": 2, "self-attention (restricted)": 1}
display(Markdown(markdown_table([{"layer": name, "slope in n": round(fit_fn[name][0], 3), "Table 1 (n)": expected_n[name],
                                  "slope in d": round(fit_fd[name][0], 3), "Table 1 (d)": expected_d[name]} for name in expected_n])))
conv_per_knd2 = [m["flops"] / (KERNEL * n_fixed * d * d) for m, d in zip(sweep_d["convolutional"], d_values)]
print("convolution FLOPs / (k·n·d²) across d:", [round(c, 3) for c in conv_per_knd2],
      "(constant, 2 FLOPs per multiply-add: the cost has d², not d)")
metrics.update({f"flops_slope_n_{k}": fit_fn[NAMES[k]][0] for k in KINDS})
metrics.update({f"flops_slope_d_{k}": fit_fd[NAMES[k]][0] for k in KINDS})
metrics["conv_flops_per_knd2_spread"] = max(conv_per_knd2) - min(conv_per_knd2)

# %%
counted_over_table = {kind: [m["flops"] / (2 * layer_macs(kind, n, d_fixed, KERNEL, R)) for m, n in zip(sweep_n[kind], n_values)]
                      + [m["flops"] / (2 * layer_macs(kind, n_fixed, d, KERNEL, R)) for m, d in zip(sweep_d[kind], d_values)]
                      for kind in KINDS}
print("counted FLOPs / (2 × table multiply-adds):", {NAMES[k]: sorted({round(x, 4) for x in v}) for k, v in counted_over_table.items()},
      f"((r+1)/r = {(R + 1) / R:.4f})")
metrics["counted_over_table"] = {k: [min(v), max(v)] for k, v in counted_over_table.items()}

# %% [markdown]
# ## Measured time and memory on this machine
#
# The same sweeps, timed (median of `REPEATS` runs) and with the peak memory of the tensors each layer creates
# (measured by intercepting every operation, since PyTorch keeps no allocator statistics on the CPU). Small sizes
# are dominated by fixed overheads, so the slopes are fitted on the larger half of each sweep. Timings depend on the
# machine and on whatever else it is doing; the FLOP counts above do not.

# %%
half = max(2, len(n_values) // 2)
time_n, time_d = series(sweep_n, "seconds"), series(sweep_d, "seconds")
mem_n = series(sweep_n, "memory_bytes")
fit_tn, fit_td, fit_mn = slopes(n_values, time_n, half), slopes(d_values, time_d, half), slopes(n_values, mem_n, half)
figures.loglog_figure(n_values, time_n, fits=fit_tn, xlabel="n", ylabel="seconds", title=f"time against n (d = {d_fixed})").show()
figures.loglog_figure(d_values, time_d, fits=fit_td, xlabel="d", ylabel="seconds", title=f"time against d (n = {n_fixed})").show()
figures.loglog_figure(n_values, mem_n, fits=fit_mn, xlabel="n", ylabel="peak bytes", title=f"peak activation memory against n (d = {d_fixed})").show()
display(Markdown(markdown_table([{"layer": NAMES[k], "time slope in n": round(fit_tn[NAMES[k]][0], 2),
                                  "time slope in d": round(fit_td[NAMES[k]][0], 2),
                                  "memory slope in n": round(fit_mn[NAMES[k]][0], 2)} for k in KINDS])))
metrics.update({f"time_slope_n_{k}": fit_tn[NAMES[k]][0] for k in KINDS})
metrics.update({f"time_slope_d_{k}": fit_td[NAMES[k]][0] for k in KINDS})
metrics.update({f"memory_slope_n_{k}": fit_mn[NAMES[k]][0] for k in KINDS})

# %% [markdown]
# ## Where self-attention stops being cheaper: $n = d$
#
# Per layer, self-attention's core costs about $n^2 d$ and the recurrent layer about $n d^2$, so attention is the
# cheaper of the two while $n < d$, which the paper notes is the usual case for sentence-level translation
# (sentences of tens of tokens, $d$ = 512). Counted alike, attention does two products ($QK^\top$ and weights
# times $V$, $2n^2d$ multiply-adds) and the recurrent layer two as well ($W_x x_t$ and $W_h h_{t-1}$ at every step,
# $2nd^2$), so the table's figures and the counted FLOPs of the two layers, for $d$ fixed and $n$ going through $d$,
# cross at $n = d$ exactly. In wall-clock time the crossing moves: the recurrent layer's $n$ small steps each pay a
# fixed overhead and cannot run in parallel, which is the *sequential operations* column at work.

# %%
d_cross = d_fixed
ns_cross = [d_cross // 4, d_cross // 2, d_cross, 2 * d_cross, 4 * d_cross]
att_f = [measure_layer("self_attention", n, d_cross, repeats=1)["flops"] for n in ns_cross]
rnn_f = [measure_layer("recurrent", n, d_cross, repeats=1)["flops"] for n in ns_cross]
ratio = [a / r for a, r in zip(att_f, rnn_f)]
table_ratio = [layer_macs("self_attention", n, d_cross) / layer_macs("recurrent", n, d_cross) for n in ns_cross]
figures.line_figure(ns_cross, {"self-attention / recurrent FLOPs": ratio}, xlabel="n", log_x=True, log_y=True,
                    title=f"FLOP ratio against n for d = {d_cross}: 1 at n = d").show()
att_t, rnn_t = time_n["self-attention"], time_n["recurrent"]
faster = [n for n, a, r in zip(n_values, att_t, rnn_t) if a > r]
time_crossover = faster[0] if faster else None
print(f"FLOP ratio attention/recurrent at n = d = {d_cross}: {ratio[2]:.3f}")
if time_crossover is None:
    print(f"time: self-attention stayed faster than the recurrent loop up to n = {n_values[-1]}, "
          f"{n_values[-1] // d_fixed} times past n = d = {d_fixed}: the loop's n dependent steps cost more than the n² work")
else:
    print(f"time: self-attention first slower than the recurrent loop at n = {time_crossover} (FLOPs cross at n = d = {d_fixed})")
metrics.update(flop_ratio_at_n_eq_d=ratio[2], table_ratio_error=max(abs(t / c - 1) for t, c in zip(table_ratio, ratio)),
               flop_ratio_below_d=[x for n, x in zip(ns_cross, ratio) if n < d_cross],
               flop_ratio_above_d=[x for n, x in zip(ns_cross, ratio) if n > d_cross],
               time_crossover_n=time_crossover)

# %% [markdown]
# **Predict, then run.** Count the projections too: a self-attention layer then does $2n^2d + 4nd^2$ multiply-adds and an LSTM layer (four gates) $8nd^2$. For $d$ = `D_FIXED`, at which $n$ do the two cost the same? Write your prediction in the next cell before you run the cells after it (leave `None` to skip: the lesson runs either way).

# %% tags=["answer"]
PREDICT_LSTM_CROSSING: int | None = None  # a sequence length n

# %% [markdown]
# ### Counting the projections too
#
# Table 1, and the crossing at $n = d$, count only attention's core. A self-attention *layer* also projects every
# position into queries, keys and values and back through $W^O$: four $d \times d$ products per position, $4nd^2$
# multiply-adds, the same order as the recurrent layer's $2nd^2$. Counted with them, the ratio becomes
# $(2n^2d + 4nd^2) / (2nd^2) = 2 + n/d$: self-attention costs more than a plain (tanh) recurrent layer at every $n$,
# and the statement "cheaper while $n < d$" is about the part that grows with $n^2$. Against an LSTM, whose four gates
# make $8nd^2$, the ratio $(2n^2d + 4nd^2) / (8nd^2)$ crosses one again, at $n = 2d$. PyTorch's FLOP counter checks the
# projections' share on a real attention module.

# %%
import torch
import torch.nn.functional as F
from workbench.lessons.measure import counted_flops
mha = wb.MultiHeadAttention(d_cross, 8)
x_proj = torch.randn(1, d_cross, d_cross)  # n = d positions
proj_flops = counted_flops(lambda: (F.linear(x_proj, mha.in_proj_weight, mha.in_proj_bias), mha.out_proj(x_proj)))
proj_macs_formula = 4 * d_cross * d_cross * d_cross  # 4 n d^2 at n = d
# layer_macs counts multiply-adds: 2 n² d for attention's two products, 2 n d² for the recurrent cell's two
with_proj = [(layer_macs("self_attention", n, d_cross) + 4 * n * d_cross**2) / layer_macs("recurrent", n, d_cross)
             for n in ns_cross]
vs_lstm = [(layer_macs("self_attention", n, d_cross) + 4 * n * d_cross**2) / (8 * n * d_cross**2) for n in ns_cross]
display(Markdown(markdown_table([{"n": n, "core only / recurrent": round(r, 3), "with projections / recurrent": round(w, 3),
                                  "with projections / LSTM": round(v, 3)} for n, r, w, v in zip(ns_cross, ratio, with_proj, vs_lstm)])))
print(f"projections counted by PyTorch at n = d = {d_cross}: {proj_flops:,} FLOPs = 2 x {proj_flops // 2:,} multiply-adds "
      f"(formula 4nd² = {proj_macs_formula:,})")
metrics.update(projection_flops_match=proj_flops == 2 * proj_macs_formula, ratio_with_projections=with_proj,
               ratio_with_projections_vs_lstm=vs_lstm)

# %%
from workbench.lessons import exercises as ex
ex.predict("11.lstm_crossing", PREDICT_LSTM_CROSSING, next(n for n, v in zip(ns_cross, vs_lstm) if abs(v - 1) < 1e-9),
           "2n²d + 4nd² = 8nd² gives 2n²d = 4nd², so n = 2d: twice the crossing of attention's core alone (n = d).")

# %% [markdown]
# ## Sequential steps
#
# The recurrent layer computes $h_t = \tanh(W_x x_t + W_h h_{t-1})$: step $t$ needs step $t-1$, so a sequence of $n$
# positions takes $n$ dependent steps however many processors there are. The other three layers are a fixed number
# of batched tensor operations for any $n$. The workbench's recurrent layer counts its steps as it runs them:

# %%
steps = {NAMES[k]: [m["steps"] for m in sweep_n[k]] for k in KINDS}
figures.line_figure(n_values, steps, xlabel="n", ylabel="dependent steps", log_x=True, log_y=True,
                    title="sequential steps per layer").show()
metrics.update(recurrent_steps_equal_n=steps["recurrent"] == [float(n) for n in n_values],
               parallel_layers_one_step=all(steps[NAMES[k]] == [1.0] * len(n_values) for k in KINDS if k != "recurrent"))

# %% [markdown]
# ## Maximum path length, measured
#
# Stack layers of one kind until the last output position depends on input position 0, testing each depth with
# autograd (a non-zero gradient means a path exists):
#
# * **self-attention**: one layer, whatever $n$;
# * **restricted** self-attention: each layer reaches $r/2$ positions, so $\lceil (n-1)/(r/2) \rceil$ layers, $O(n/r)$;
# * **convolution**, contiguous kernels: $(k-1)/2$ positions per layer (centred kernels), $O(n/k)$ layers;
# * **dilated causal convolution** (kernel $k$, dilations $1, k, k^2, \dots$): $\lceil \log_k n \rceil$ layers, the
#   paper's $O(\log_k n)$;
# * **recurrent**: unrolled in time, the layer is a stack of $n$ cells; the depth tried is the number of cells
#   unrolled before the last position (the state restarted from zero that many positions back), and position 0 is
#   reached at $n$ cells, the paper's $O(n)$ in the same unit as the other rows.
#
# Restricted self-attention uses `R` here as everywhere else in this notebook; with the default `R` = 16 the window
# covers every $n \le 9$ in one layer, so the smallest lengths show 1.

# %% [markdown]
# ### Exercise 11.path_length · `path_length`
#
# Before measuring, count: how many layers of `kind` does a signal cross from input position 0 to output position
# $n-1$? Self-attention: 1 (and 1 for any kind when $n \le 1$); recurrent: $n$ cells; a centred kernel of width $k$
# reaches $\lfloor (k-1)/2 \rfloor$ positions per layer and a window of $r$ keys $\lfloor r/2 \rfloor$, so
# $\lceil (n-1) / \text{reach} \rceil$ layers; dilated convolutions (dilations $1, k, k^2, \dots$) reach $k^L - 1$
# positions after $L$ layers, so the smallest $L$ with $k^L \ge n$. Count that last one in integers:
# `math.log(125, 5)` is not exactly 3.
#
# Shapes: `kind` a string, `n`, `k`, `r` ints, `dilated` a bool → an int.

# %% tags=["exercise", "hide-input"]
def path_length(kind, n, k=3, r=8, dilated=False):
    """Layers before output n-1 depends on input 0."""
    # BEGIN SOLUTION NO PROMPT
    if kind == "recurrent":
        return max(n, 1)
    if n <= 1 or kind == "self_attention":
        return 1
    if kind == "convolutional" and dilated:
        layers, reach = 0, 1
        while reach < n:
            layers, reach = layers + 1, reach * k
        return layers
    step = (k - 1) // 2 if kind == "convolutional" else r // 2
    return -(-(n - 1) // step)  # ceiling division in integers
    # END SOLUTION
    """ # BEGIN PROMPT
    raise NotImplementedError("write path_length, then run the check below")
    """  # END PROMPT

# %%
result = ex.check("11.path_length", path_length)
path_length = result.function
result

# %%
r_path = R
paths = {"self-attention": [], f"restricted (r={r_path})": [], f"convolution (k={KERNEL})": [],
         f"dilated convolution (k={KERNEL})": [], "recurrent (cells unrolled)": []}
expected = {name: [] for name in paths}
for n in path_ns:
    paths["self-attention"].append(measured_path_length("self_attention", n))
    expected["self-attention"].append(analytic_path_length("self_attention", n))
    paths[f"restricted (r={r_path})"].append(measured_path_length("restricted", n, r=r_path))
    expected[f"restricted (r={r_path})"].append(analytic_path_length("restricted", n, r=r_path))
    paths[f"convolution (k={KERNEL})"].append(measured_path_length("convolutional", n, k=KERNEL))
    expected[f"convolution (k={KERNEL})"].append(analytic_path_length("convolutional", n, k=KERNEL))
    paths[f"dilated convolution (k={KERNEL})"].append(measured_path_length("convolutional", n, k=KERNEL, dilated=True))
    expected[f"dilated convolution (k={KERNEL})"].append(analytic_path_length("convolutional", n, k=KERNEL, dilated=True))
    paths["recurrent (cells unrolled)"].append(measured_path_length("recurrent", n))
    expected["recurrent (cells unrolled)"].append(analytic_path_length("recurrent", n))
figures.line_figure(path_ns, paths, xlabel="n", ylabel="layers crossed", log_x=True, log_y=True,
                    title="maximum path length from position 0 to position n-1").show()
display(Markdown(markdown_table([{"n": n, **{name: f"{paths[name][i]} (expected {expected[name][i]})" for name in paths}}
                                 for i, n in enumerate(path_ns)])))
metrics["path_lengths"] = {name: {"n": path_ns, "measured": paths[name], "expected": expected[name]} for name in paths}
metrics["path_lengths_match"] = all(paths[name] == expected[name] for name in paths)
metrics["recurrent_path_equals_steps"] = paths["recurrent (cells unrolled)"] == [
    int(measure_layer("recurrent", n, 4, repeats=1)["steps"]) for n in path_ns]

# %%
metrics.update(ex.summary())  # every exercise's check and prediction, read back by `workbench notebooks grade`

# %%
with open("metrics.json", "w") as f:
    json.dump(metrics, f, indent=1)
# counted FLOPs follow Table 1's exponents (deterministic: exact up to rounding of the fit)
for kind, a_n, a_d in (("self_attention", 2, 1), ("recurrent", 1, 2), ("convolutional", 1, 2), ("restricted", 1, 1)):
    assert abs(metrics[f"flops_slope_n_{kind}"] - a_n) < 0.1, (kind, metrics[f"flops_slope_n_{kind}"])
    assert abs(metrics[f"flops_slope_d_{kind}"] - a_d) < 0.1, (kind, metrics[f"flops_slope_d_{kind}"])
assert metrics["conv_flops_per_knd2_spread"] < 1e-9                   # O(k·n·d²): the square is real
for kind, (lo, hi) in metrics["counted_over_table"].items():          # the table counts what the layers run:
    target = (R + 1) / R if kind == "restricted" else 1.0             # 2 FLOPs per multiply-add, every row alike
    assert abs(lo - target) < 1e-9 and abs(hi - target) < 1e-9, (kind, lo, hi)
assert metrics["table_ratio_error"] < 1e-9                           # so the table crosses where the counts do
assert abs(metrics["flop_ratio_at_n_eq_d"] - 1) < 1e-9                # crossover at n = d
assert all(x < 1 for x in metrics["flop_ratio_below_d"]) and all(x > 1 for x in metrics["flop_ratio_above_d"])
# with the projections counted (PyTorch's count of them matches 4nd²) attention costs 2 + n/d times a tanh RNN layer:
# never less than twice; against an LSTM's 8nd² it crosses one at n = 2d (ns_cross[3])
assert metrics["projection_flops_match"]
assert all(abs(w - (2 + n / d_cross)) < 1e-9 for w, n in zip(metrics["ratio_with_projections"], ns_cross))
assert min(metrics["ratio_with_projections"]) > 2 and abs(metrics["ratio_with_projections_vs_lstm"][3] - 1) < 1e-9
assert metrics["memory_slope_n_self_attention"] > 1.7 and metrics["memory_slope_n_recurrent"] < 1.2   # n² vs n memory
assert metrics["recurrent_steps_equal_n"] and metrics["parallel_layers_one_step"]
assert metrics["path_lengths_match"], metrics["path_lengths"]
assert metrics["recurrent_path_equals_steps"]                         # path length n = n sequential steps
if not SMOKE:  # wall-clock slopes only at full size, with generous margins
    assert metrics["time_slope_n_self_attention"] > metrics["time_slope_n_recurrent"] + 0.3
    assert metrics["time_slope_d_convolutional"] > metrics["time_slope_d_self_attention"] + 0.3

# %% [markdown]
# ## Try it
#
# * `workbench notebooks run --only 11 -p R=4` — a neighbourhood of 4 instead of 16: restricted attention's work falls
#   by 4 in the table, its counted FLOPs are now $5/4$ of the table's (the window holds $r+1$ keys), and its path
#   length grows to $\lceil (n-1)/2 \rceil$ layers.
# * `workbench notebooks run --only 11 -p KERNEL=5` — wider kernels: the convolution's work per position grows by
#   $5/3$, the contiguous stack reaches 2 positions per layer instead of 1, and the dilated stack needs
#   $\lceil \log_5 n \rceil$ layers; check both path columns.
# * `workbench notebooks run --only 11 -p N=64` — Table 1 at sentence length with $d$ = 512: self-attention's
#   multiply-adds are $n/d = 1/8$ of the recurrent layer's, the paper's case for attention on sentences.
