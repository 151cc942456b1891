"""Analysis helpers the notebooks and widgets share: translate-and-capture, bertviz export, word alignments,
and the small measurements the teaching notebooks make (softmax scaling, position distances, leaks, Table 1)."""

from __future__ import annotations

import math
import statistics
import time
import weakref
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from .capture import AttentionCache, capture_attention
from .decode import beam_search, greedy_decode
from .errors import InputTextError


@dataclass
class Inspection:
    """One sentence translated, with every attention pattern of the teacher-forced pass over the output."""

    source: str  # the input sentence
    translation: str  # the detokenized output
    src_tokens: list[str]  # subword tokens of the source (eos included): encoder keys and queries
    tgt_tokens: list[str]  # decoder input tokens (bos, y1 .. y_{n-1}): decoder queries and self-attention keys
    out_tokens: list[str]  # the token each decoder position produced (y1 .. yn, eos included)
    cache: AttentionCache  # cache["enc_self" | "dec_self" | "cross", layer] -> (1, H, Tq, Tk)
    src_ids: list[int] = field(default_factory=list)  # ids of src_tokens
    out_ids: list[int] = field(default_factory=list)  # ids of out_tokens (y1 .. yn, eos); decoder input: [bos, *out_ids[:-1]]

    def weights(self, kind: str, layer: int) -> Tensor:
        """Shapes: -> (H, Tq, Tk) for this sentence."""
        return self.cache[kind, layer][0]

    def axes(self, kind: str) -> tuple[list[str], list[str]]:
        """(query labels, key labels) for an attention kind."""
        if kind == "enc_self":
            return self.src_tokens, self.src_tokens
        if kind == "dec_self":
            return self.tgt_tokens, self.tgt_tokens
        return self.out_tokens, self.src_tokens


@torch.no_grad()
def inspect_translation(model: nn.Module, tokenizer: Any, sentence: str, beam: int = 1, max_extra: int = 50) -> Inspection:
    """Translate one sentence, then run the model once more on (source, output) recording all attention."""
    if not sentence or not sentence.strip():
        raise InputTextError("type a sentence to translate (the input is empty)")
    model.eval()
    device = next(model.parameters()).device
    ids = tokenizer.encode_src([sentence])[0]
    if len(ids) > model.cfg.max_len:
        raise InputTextError(f"the sentence is {len(ids)} tokens long, more than max_len={model.cfg.max_len}: shorten it")
    src = torch.tensor([ids], device=device)
    kw = dict(bos_id=tokenizer.bos_id, eos_id=tokenizer.eos_id, max_extra=max_extra)
    out = greedy_decode(model, src, **kw) if beam == 1 else beam_search(model, src, beam=beam, **kw)
    hyp = [int(i) for i in out[0].tolist() if i != model.pad_id]
    if not hyp or hyp[-1] != tokenizer.eos_id:
        hyp.append(tokenizer.eos_id)
    tgt_in = torch.tensor([[tokenizer.bos_id, *hyp[:-1]]], device=device)
    with capture_attention(model) as cache:
        model(src, tgt_in)
    tok = lambda i, side: tokenizer.id_to_token(i, side)  # noqa: E731
    return Inspection(
        source=sentence,
        translation=tokenizer.decode_tgt([hyp])[0],
        src_tokens=[tok(i, "src") for i in ids],
        tgt_tokens=[tok(i, "tgt") for i in tgt_in[0].tolist()],
        out_tokens=[tok(i, "tgt") for i in hyp],
        cache=cache,
        src_ids=[int(i) for i in ids],
        out_ids=hyp,
    )


def to_bertviz(cache: AttentionCache, src_tokens: Sequence[str], tgt_tokens: Sequence[str]) -> dict[str, Any]:
    """Keyword arguments for ``bertviz.head_view`` / ``model_view`` of an encoder-decoder model (batch of one).

    Example:
        ``bertviz.head_view(**to_bertviz(insp.cache, insp.src_tokens, insp.tgt_tokens))``
    """
    def layers(kind: str) -> tuple[Tensor, ...]:
        stacked = tuple(cache[kind, i][:1] for i in cache.layers(kind))  # each (1, H, Tq, Tk)
        if not stacked:
            raise KeyError(f"no {kind!r} attention captured: run the model inside capture_attention(model)")
        return stacked

    enc, dec, cross = layers("enc_self"), layers("dec_self"), layers("cross")
    if enc[0].shape[-1] != len(src_tokens) or dec[0].shape[-1] != len(tgt_tokens):
        raise ValueError(
            f"token lists do not match the captured attention: {len(src_tokens)} source tokens for "
            f"{enc[0].shape[-1]} positions, {len(tgt_tokens)} target tokens for {dec[0].shape[-1]} positions"
        )
    return {
        "encoder_attention": enc,
        "decoder_attention": dec,
        "cross_attention": cross,
        "encoder_tokens": list(src_tokens),
        "decoder_tokens": list(tgt_tokens),
    }


# -- word alignment (IBM Model 1) --------------------------------------------------------------------------------
def ibm1(pairs: Sequence[tuple[str, str]], iterations: int = 5) -> dict[tuple[str, str], float]:
    """Translation probabilities t(target word | source word) by EM (Brown et al., 1993), with a NULL source word.

    A small, classic word aligner: used as the reference alignment that cross-attention is compared against.
    """
    corpus = [(["<null>", *s.lower().split()], t.lower().split()) for s, t in pairs]
    t_prob: dict[tuple[str, str], float] = defaultdict(lambda: 1.0)
    for _ in range(iterations):
        count: dict[tuple[str, str], float] = defaultdict(float)
        total: dict[str, float] = defaultdict(float)
        for src, tgt in corpus:
            for e in tgt:
                z = sum(t_prob[(f, e)] for f in src)
                for f in src:
                    c = t_prob[(f, e)] / z
                    count[(f, e)] += c
                    total[f] += c
        t_prob = defaultdict(float, {(f, e): c / total[f] for (f, e), c in count.items()})
    return dict(t_prob)


def ibm1_align(t_prob: dict[tuple[str, str], float], source: str, target: str) -> list[int | None]:
    """For each target word, the index of its most probable source word (None for NULL)."""
    src = source.lower().split()
    out: list[int | None] = []
    for e in target.lower().split():
        scores = [t_prob.get((f, e), 0.0) for f in src]
        null = t_prob.get(("<null>", e), 0.0)
        best = max(range(len(src)), key=lambda i: scores[i]) if src else None
        out.append(None if best is None or null > scores[best] else best)
    return out


def word_spans(tokens: Sequence[str]) -> list[int]:
    """Word index of each Metaspace subword token (``▁`` starts a word); specials get -1."""
    words, current = [], -1
    for t in tokens:
        if t.startswith("<") and t.endswith(">"):
            words.append(-1)
            continue
        if t.startswith("▁") or current < 0:
            current += 1
        words.append(current)
    return words


def word_attention(weights: Tensor, q_words: Sequence[int], k_words: Sequence[int]) -> Tensor:
    """Pool subword attention to words: sum over key subwords, mean over query subwords.

    Shapes:
        weights (Tq, Tk) -> (n_query_words, n_key_words)
    """
    nq, nk = max(q_words) + 1, max(k_words) + 1
    out = torch.zeros(nq, nk)
    hits = torch.zeros(nq, 1)
    for i, qw in enumerate(q_words):
        if qw < 0:
            continue
        hits[qw] += 1
        for j, kw in enumerate(k_words):
            if kw >= 0:
                out[qw, kw] += float(weights[i, j])
    return out / hits.clamp_min(1)


def alignment_agreement(predicted: Sequence[int | None], reference: Sequence[int | None]) -> float:
    """Share of target words (with a non-NULL reference link) whose predicted source word matches."""
    pairs = [(p, r) for p, r in zip(predicted, reference, strict=False) if r is not None]
    return sum(p == r for p, r in pairs) / len(pairs) if pairs else math.nan


# -- helpers of the teaching notebooks (02 scaling, 03 positions, 04 masks, 06 complexity) -----------------------
def median_seconds(fn: Callable[[], Any], repeats: int = 5, warmup: int = 1) -> float:
    """Median wall-clock seconds of ``fn()`` over ``repeats`` calls, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def softmax_entropy(p: Tensor) -> Tensor:
    """Entropy (nats) of each distribution in the last dimension (0 log 0 taken as 0).

    Shapes:
        p (..., K) -> (...)
    """
    return -(p * torch.log(p.clamp_min(1e-30))).sum(-1)


def softmax_jacobian_norm(logits: Tensor) -> Tensor:
    """Frobenius norm of d softmax(z) / d z at each row of ``logits``, measured with autograd (``torch.func``).

    The Jacobian is diag(p) - p pᵀ: near zero when one weight is ~1 (a saturated softmax passes back almost no
    gradient), largest when the weights are spread.

    Shapes:
        logits (N, K) -> (N,)
    """
    jac = torch.func.vmap(torch.func.jacrev(lambda z: torch.softmax(z, -1)))(logits)  # (N, K, K)
    return jac.flatten(1).norm(dim=-1)


def scaling_study(d_ks: Sequence[int], n_pairs: int = 20000, n_keys: int = 16, n_queries: int = 512,
                  generator: torch.Generator | None = None) -> dict[str, list[float]]:
    """Why the paper divides by sqrt(d_k), measured for each d_k on random unit-variance queries and keys.

    Returns lists (one value per d_k) under these keys:
        ``var_dot``, ``var_scaled``: variance of q·k and of q·k / sqrt(d_k) over ``n_pairs`` pairs;
        ``max_weight_unscaled``, ``max_weight_scaled``: mean largest softmax weight over ``n_keys`` keys;
        ``entropy_unscaled``, ``entropy_scaled``: mean entropy of those weights (log(n_keys) = uniform);
        ``jacobian_unscaled``, ``jacobian_scaled``: mean Frobenius norm of the softmax Jacobian (gradient size).
    """
    out: dict[str, list[float]] = defaultdict(list)
    for d_k in d_ks:
        q = torch.randn(n_pairs, d_k, generator=generator)
        k = torch.randn(n_pairs, d_k, generator=generator)
        dots = (q * k).sum(-1)  # (N,)
        out["var_dot"].append(float(dots.var()))
        out["var_scaled"].append(float((dots / math.sqrt(d_k)).var()))
        qs = torch.randn(n_queries, 1, d_k, generator=generator)
        ks = torch.randn(n_queries, n_keys, d_k, generator=generator)
        scores = (qs * ks).sum(-1)  # (n_queries, n_keys)
        for tag, logits in (("unscaled", scores), ("scaled", scores / math.sqrt(d_k))):
            p = torch.softmax(logits, -1)
            out[f"max_weight_{tag}"].append(float(p.max(-1).values.mean()))
            out[f"entropy_{tag}"].append(float(softmax_entropy(p).mean()))
            out[f"jacobian_{tag}"].append(float(softmax_jacobian_norm(logits).mean()))
    return dict(out)


def additive_scores(q: Tensor, k: Tensor, w_q: Tensor, w_k: Tensor, v: Tensor) -> Tensor:
    """Bahdanau's additive compatibility score vᵀ tanh(W_q q_i + W_k k_j) for every (query, key) pair.

    Shapes:
        q (B, Tq, d), k (B, Tk, d), w_q and w_k (d, d_a), v (d_a,) -> scores (B, Tq, Tk)
    """
    hidden = torch.tanh((q @ w_q)[:, :, None, :] + (k @ w_k)[:, None, :, :])  # (B, Tq, Tk, d_a)
    return (hidden @ v[:, None]).squeeze(-1)  # (B, Tq, Tk, 1) -> (B, Tq, Tk)


def dot_scores(q: Tensor, k: Tensor) -> Tensor:
    """Scaled dot-product scores q·k / sqrt(d). Shapes: q (B, Tq, d), k (B, Tk, d) -> (B, Tq, Tk)."""
    return (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])


def score_cost(kind: str, batch: int, Tq: int, Tk: int, d: int, d_a: int | None = None) -> dict[str, int]:
    """Analytic FLOPs (a multiply-add counts 2) and the largest intermediate (elements) of one score matrix.

    ``additive``: projections 2·B·(Tq + Tk)·d·d_a, then per pair an add, a tanh and a d_a-long dot product
    (about 4·d_a FLOPs), and a (B, Tq, Tk, d_a) hidden tensor. ``dot``: 2·B·Tq·Tk·d and a (B, Tq, Tk) matrix.
    """
    d_a = d if d_a is None else d_a
    if kind == "additive":
        flops = 2 * batch * (Tq + Tk) * d * d_a + 4 * batch * Tq * Tk * d_a
        return {"flops": flops, "largest_intermediate": batch * Tq * Tk * d_a}
    if kind == "dot":
        return {"flops": 2 * batch * Tq * Tk * d, "largest_intermediate": batch * Tq * Tk}
    raise ValueError(f"unknown score kind {kind!r}: choose 'additive' or 'dot'")


def counted_flops(fn: Callable[[], Any]) -> int:
    """FLOPs of the matrix products, convolutions and attention kernels ``fn()`` runs, counted by
    ``torch.utils.flop_counter.FlopCounterMode`` while it runs (element-wise ops are not counted)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter, torch.no_grad():
        fn()
    return int(counter.get_total_flops())


def offset_profile(dist: Tensor, max_offset: int | None = None) -> dict[str, list[float]]:
    """Distances grouped by offset k = |p - q|: mean, min and max of every k-th diagonal, k = 1..max_offset.

    Shapes:
        dist (T, T)
    """
    T = dist.shape[0]
    max_offset = T - 1 if max_offset is None else min(max_offset, T - 1)
    prof: dict[str, list[float]] = {"offset": [], "mean": [], "min": [], "max": []}
    for k in range(1, max_offset + 1):
        diag = dist.diagonal(k).double()
        prof["offset"].append(k)
        prof["mean"].append(float(diag.mean()))
        prof["min"].append(float(diag.min()))
        prof["max"].append(float(diag.max()))
    return prof


def offset_spread(dist: Tensor, max_offset: int | None = None) -> float:
    """Largest (max - min) over the pairs sharing one offset: 0 when distance depends only on the offset."""
    prof = offset_profile(dist, max_offset)
    return max((hi - lo for hi, lo in zip(prof["max"], prof["min"], strict=True)), default=0.0)


def cosine_matrix(table: Tensor) -> Tensor:
    """Cosine similarity between every pair of rows. Shapes: (T, D) -> (T, T)."""
    unit = torch.nn.functional.normalize(table.double(), dim=-1)
    return (unit @ unit.T).to(table.dtype)


@torch.no_grad()
def future_leak_check(model: nn.Module, src: Tensor, tgt_in: Tensor, position: int,
                      generator: torch.Generator | None = None) -> dict[str, Any]:
    """Replace every target token after ``position`` with random ids and compare the decoder's logits.

    With a correct causal mask, the logits at positions 0..position are bit-for-bit unchanged.

    Returns:
        ``past_identical`` (torch.equal on positions <= position), ``past_max_diff``, ``future_max_diff``
        (positions > position, which should move) and the perturbed input ``tgt_changed``.

    Shapes:
        src (B, S), tgt_in (B, T)
    """
    model.eval()
    low = 4 if model.tgt_vocab_size > 5 else 0  # keep clear of the special ids when the vocabulary allows
    changed = tgt_in.clone()
    tail = changed[:, position + 1 :]
    fresh = torch.randint(low, model.tgt_vocab_size, tail.shape, generator=generator)
    same = fresh == tail  # make sure every later token really changes
    fresh[same] = (fresh[same] + 1 - low) % (model.tgt_vocab_size - low) + low
    changed[:, position + 1 :] = fresh
    a, b = model(src, tgt_in), model(src, changed)  # (B, T, V)
    return {
        "past_identical": bool(torch.equal(a[:, : position + 1], b[:, : position + 1])),
        "past_max_diff": float((a[:, : position + 1] - b[:, : position + 1]).abs().max()),
        "future_max_diff": float((a[:, position + 1 :] - b[:, position + 1 :]).abs().max()),
        "tgt_changed": changed,
    }


@torch.no_grad()
def incremental_logits(model: nn.Module, src: Tensor, tgt_in: Tensor) -> tuple[Tensor, Any]:
    """Decoder logits computed one target token at a time with the key/value cache (as at inference).

    Returns:
        The logits, comparable with ``model(src, tgt_in)``, and the filled cache (``cache.length`` tokens fed;
        per layer ``cache.layers[i].self_attn`` grew one key per step, ``cross_attn`` was computed once).

    Shapes:
        src (B, S), tgt_in (B, T) -> logits (B, T, V)
    """
    model.eval()
    src_mask = model.src_mask(src)
    memory = model.encode(src, src_mask)
    cache = model.init_cache(memory, src_mask)
    steps = [model.decode(tgt_in[:, t : t + 1], memory, src_mask, cache) for t in range(tgt_in.shape[1])]
    return torch.cat(steps, dim=1), cache  # (B, T, V)


class _PeakTensorBytes(TorchDispatchMode):
    """Counts the bytes of the tensor storages that operations create while it is active, and their peak."""

    def __init__(self, existing: set[int]) -> None:
        super().__init__()
        self.existing = existing  # storages that were there before (inputs, parameters): not counted
        self.live: dict[int, list[int]] = {}  # storage data_ptr -> [bytes, tensors alive that use it]
        self.current = 0
        self.peak = 0

    def _release(self, key: int) -> None:
        entry = self.live.get(key)
        if entry is not None:
            entry[1] -= 1
            if entry[1] == 0:
                self.current -= entry[0]
                del self.live[key]

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, Tensor):
                continue
            storage = t.untyped_storage()
            key = storage.data_ptr()
            if key in self.existing or storage.nbytes() == 0:
                continue
            if key in self.live:
                self.live[key][1] += 1
            else:
                self.live[key] = [storage.nbytes(), 1]
                self.current += storage.nbytes()
                self.peak = max(self.peak, self.current)
            weakref.finalize(t, self._release, key)
        return out


def peak_tensor_bytes(fn: Callable[[], Any], *keep: Tensor | nn.Module) -> int:
    """Peak bytes of the tensors ``fn()`` allocates while it runs (measured by intercepting every operation).

    Storages of the tensors and modules in ``keep`` (inputs, parameters) existed before and are not counted.
    Works on any device; on the CPU, where torch keeps no allocator statistics, this is the way to see that
    self-attention materialises n x n matrices while the other layers keep O(n d) activations.
    """
    existing: set[int] = set()
    for item in keep:
        tensors = list(item.parameters()) + list(item.buffers()) if isinstance(item, nn.Module) else [item]
        existing.update(t.untyped_storage().data_ptr() for t in tensors)
    with torch.no_grad(), _PeakTensorBytes(existing) as mode:
        fn()
    return mode.peak


class LocalSelfAttention(nn.Module):
    """Restricted self-attention (paper Table 1, last row): each position attends to its neighbourhood of
    r // 2 keys on each side plus itself, computed on windows so the cost really is O(r·n·d), not O(n²·d)."""

    def __init__(self, r: int) -> None:
        super().__init__()
        if r < 2 or r % 2:
            raise ValueError(f"r={r}: use an even neighbourhood size of 2 or more (r // 2 keys on each side)")
        self.r = r

    def forward(self, x: Tensor) -> Tensor:
        """Shapes: x (B, n, d) -> (B, n, d)."""
        B, n, d = x.shape
        half = self.r // 2
        padded = torch.nn.functional.pad(x, (0, 0, half, half))  # (B, n + r, d)
        windows = padded.unfold(1, 2 * half + 1, 1)  # (B, n, d, r + 1): keys p - r/2 .. p + r/2
        scores = torch.einsum("bnd,bndw->bnw", x, windows) / math.sqrt(d)  # (B, n, r + 1)
        pos = torch.arange(n)[:, None] + torch.arange(-half, half + 1)[None, :]  # (n, r + 1) key positions
        scores = scores.masked_fill(((pos < 0) | (pos >= n))[None], float("-inf"))  # padding is no key
        return torch.einsum("bnw,bndw->bnd", torch.softmax(scores, -1), windows)  # (B, n, d)


class ExplicitSelfAttention(nn.Module):
    """softmax(x xᵀ / sqrt(d)) x written out with matrix products (one head, no projections: the n²·d core the
    paper's table counts); the FLOP counter sees these products, while it cannot see inside the fused CPU kernel."""

    def forward(self, x: Tensor) -> Tensor:
        """Shapes: x (B, n, d) -> (B, n, d)."""
        return torch.softmax(dot_scores(x, x), -1) @ x  # (B, n, n) @ (B, n, d)


def table1_layer(kind: str, d: int, k: int = 3, r: int = 8) -> nn.Module:
    """The layer measured for one row of Table 1: explicit self-attention, windowed restricted attention, or
    ``complexity.make_layer``'s recurrent (explicit loop) and convolutional layers."""
    from .complexity import make_layer

    if kind == "self_attention":
        return ExplicitSelfAttention()
    if kind == "restricted":
        return LocalSelfAttention(r)
    return make_layer(kind, d, k, r)


@torch.no_grad()
def measure_table1(kind: str, n: int, d: int, k: int = 3, r: int = 8, batch: int = 1, repeats: int = 3) -> dict[str, float]:
    """Counted FLOPs, peak activation bytes, median seconds and sequential steps of one layer of ``kind`` on a
    (batch, n, d) input.

    ``steps`` is the number of dependent steps the layer ran (the recurrent layer counts its loop; the others
    run as a handful of batched operations and report 1).
    """
    torch.manual_seed(0)
    layer = table1_layer(kind, d, k, r).eval()
    x = torch.randn(batch, n, d)
    flops = counted_flops(lambda: layer(x))
    memory = peak_tensor_bytes(lambda: layer(x), x, layer)
    seconds = median_seconds(lambda: layer(x), repeats=repeats)
    return {"flops": float(flops), "memory_bytes": float(memory), "seconds": seconds,
            "steps": float(getattr(layer, "steps", 1) or 1)}


def causal_dilated_path_length(n: int, k: int = 3, d: int = 2, max_layers: int = 64) -> int:
    """Stack causal convolutions of width k with dilations 1, k, k², ... (as in WaveNet/ByteNet) until the
    last output depends on input position 0 (checked with autograd); the paper's O(log_k n)."""
    torch.manual_seed(0)
    x = torch.randn(1, d, n, requires_grad=True)
    h = x
    for depth in range(1, max_layers + 1):
        dilation = k ** (depth - 1)
        conv = nn.Conv1d(d, d, k, dilation=dilation)
        h = conv(torch.nn.functional.pad(h, ((k - 1) * dilation, 0)))  # left padding: causal
        grad = torch.autograd.grad(h[0, :, -1].sum(), x, retain_graph=True)[0]
        if grad[0, :, 0].abs().sum() > 0:
            return depth
    raise RuntimeError(f"position 0 never reached position {n - 1} within {max_layers} layers")


def log_k_ceil(n: int, k: int) -> int:
    """Smallest L with k**L >= n, in exact integer arithmetic (math.log can be off by one at powers of k)."""
    L, reach = 0, 1
    while reach < n:
        reach *= k
        L += 1
    return L


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """A Markdown table of dict rows (floats with 4 significant digits), for ``IPython.display.Markdown``."""
    columns = list(columns or (rows[0].keys() if rows else []))

    def fmt(v: Any) -> str:
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def decoder_dependency(model: nn.Module, src: Tensor, tgt_in: Tensor) -> Tensor:
    """Which decoder inputs each output position depends on, measured with autograd.

    Entry [t, s] is the norm of d(logits at position t) / d(decoder input vector at position s), summed over the
    batch. With causal masking the upper triangle (s > t) is exactly zero.

    Shapes:
        src (B, S), tgt_in (B, T) -> (T, T)
    """
    model.eval()
    captured: dict[str, Tensor] = {}

    def keep(_module: nn.Module, _args: Any, output: Tensor) -> None:
        captured["x"] = output  # (B, T, d_model): token embedding + position, the decoder's input

    handle = model.tgt_embed.register_forward_hook(keep)
    try:
        with torch.enable_grad():
            logits = model(src, tgt_in)  # (B, T, V)
            rows = [torch.autograd.grad(logits[:, t].sum(), captured["x"], retain_graph=True)[0].norm(dim=-1).sum(0)
                    for t in range(tgt_in.shape[1])]  # each (T,)
    finally:
        handle.remove()
    return torch.stack(rows).detach()  # (T, T)
