"""Attribution beside attention: which source tokens does each output token's log-probability depend on?

Gradient-based attributions come from Captum (``captum.attr``), the PyTorch attribution library:

* ``"saliency"``: the gradient of the output's log-probability with respect to each source token's embedding,
  reduced to its L2 norm per token (Simonyan et al., 2014; Li et al., 2016), always >= 0;
* ``"input_x_gradient"``: embedding times gradient, summed over the embedding dimension (signed);
* ``"integrated_gradients"``: the path integral of the gradient from a baseline embedding to the input
  (Sundararajan et al., 2017), summed over the embedding dimension (signed). Its *completeness* property —
  the scores sum to ``f(input) - f(baseline)`` — is checked by :attr:`Attribution.delta`.

What is attributed is ``x = E[src] * sqrt(d_model)``, the scaled source token embeddings the encoder receives
before the positional encoding is added (so positions are not attributed: the baseline keeps them). The
default baseline is ``x = 0`` (no token content at any source position); a token id (``<unk>``, ``<pad>``)
gives that token's embedding at every position instead. The model's own code runs unchanged: a forward
pre-hook on the source positional encoding swaps in the embeddings Captum asks for (removed after each call;
with tied source and target embeddings only the source side is affected).

The function attributed for output position ``t`` is ``log p(y_t | y_<t, x)`` under teacher forcing, or, for
*contrastive* attribution (Yin & Neubig, 2022), ``log p(y_t) - log p(foil)``: why this word and not that one.

Agreement with attention (Jain & Wallace, 2019; Wiegreffe & Pinter, 2019) is measured per output token as the
Spearman rank correlation between |attribution| and an attention summary over the source tokens, and per
sentence as the share of target words whose most-attributed source word matches an IBM Model 1 alignment.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from workbench.errors import AttributionError
from workbench.inspect.align import alignment_agreement, ibm1_align, word_attention, word_spans
from workbench.inspect.flow import rollout_from_cache
from workbench.inspect.inspection import inspect_translation
from workbench.runtime import full_precision

METHODS = ("saliency", "input_x_gradient", "integrated_gradients")
SIGNED = {"saliency": False, "input_x_gradient": True, "integrated_gradients": True}


@dataclass
class Attribution:
    """Attribution scores of one sentence: one row per attributed output position, one column per source token.

    Shapes:
        scores (T, S); targets, value (T,); foils, baseline_value, delta (T,) or None
    """

    method: str
    scores: Tensor  # per source token; saliency >= 0, the others signed
    positions: list[int]  # decoder positions attributed (row r is position positions[r])
    targets: Tensor  # token ids whose log-probability was attributed
    value: Tensor  # f(input): log p(target), or log p(target) - log p(foil)
    foils: Tensor | None = None  # contrast token ids (contrastive attribution), else None
    baseline_value: Tensor | None = None  # f(baseline), integrated gradients only
    delta: Tensor | None = None  # sum(scores) - (value - baseline_value), integrated gradients only
    extra: dict[str, Any] = field(default_factory=dict)

    def relative_completeness_error(self) -> Tensor:
        """|sum of scores - (f(input) - f(baseline))| / |f(input) - f(baseline)| per row (integrated gradients)."""
        if self.baseline_value is None:
            raise AttributionError(f"completeness is a property of integrated gradients, not of {self.method!r}")
        diff = self.value - self.baseline_value
        return (self.scores.sum(-1) - diff).abs() / diff.abs().clamp_min(1e-12)


# -- the attributed function -------------------------------------------------------------------------------------
def source_embeddings(model: nn.Module, src: Tensor) -> Tensor:
    """``E[src] * scale``: what the encoder's positional encoding receives. Shapes: (B, S) -> (B, S, D)."""
    embed = model.src_embed
    return embed.tokens(src) * embed.scale


@contextlib.contextmanager
def _embeddings_replaced(model: nn.Module, x: Tensor) -> Iterator[None]:
    """Run the source side on ``x`` (B, S, D) instead of ``E[src] * scale``; the hook is removed on exit."""

    def swap(_m: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
        if args[0].shape != x.shape:
            raise AttributionError(f"embeddings of shape {tuple(x.shape)} for a source of shape {tuple(args[0].shape)}")
        return (x, *args[1:])

    handle = model.src_embed.positional.register_forward_pre_hook(swap)
    try:
        yield
    finally:
        handle.remove()


def _log_prob_function(model: nn.Module) -> Any:
    """f(x, src, tgt_in, position, target, foil) -> (N,) log p(target) [- log p(foil)] at each row's position."""

    def f(x: Tensor, src: Tensor, tgt_in: Tensor, position: Tensor, target: Tensor, foil: Tensor) -> Tensor:
        with _embeddings_replaced(model, x):
            hidden = model(src, tgt_in, project=False)  # (N, T, D): decoder states before the output projection
        rows = torch.arange(hidden.shape[0], device=hidden.device)
        picked = model.generator(hidden[rows, position])  # (N, V): only the attributed position is projected
        logp = torch.log_softmax(picked.to(torch.promote_types(picked.dtype, torch.float32)), dim=-1)
        value = logp[rows, target]
        contrast = logp[rows, foil.clamp_min(0)]
        return torch.where(foil >= 0, value - contrast, value)  # foil -1: no contrast

    return f


def _as_row(x: Tensor | Sequence[int], name: str) -> Tensor:
    t = torch.as_tensor(x, dtype=torch.long)
    if t.dim() == 2 and t.shape[0] == 1:
        t = t[0]
    if t.dim() != 1 or t.numel() == 0:
        raise AttributionError(f"{name} must hold the ids of one sentence, shape (T,) or (1, T); got {tuple(t.shape)}")
    return t


def _ids(values: int | Sequence[int] | Tensor | None, n: int, vocab: int, name: str) -> Tensor | None:
    if values is None:
        return None
    t = torch.as_tensor(values, dtype=torch.long).reshape(-1)
    if t.numel() == 1:
        t = t.expand(n)
    if t.numel() != n:
        raise AttributionError(f"{name} has {t.numel()} ids for {n} positions: give one id, or one per position")
    bad = t[(t < 0) | (t >= vocab)]
    if bad.numel():
        raise AttributionError(f"{name} id {int(bad[0])} is outside the target vocabulary 0..{vocab - 1}")
    return t.clone()


def attribute(
    model: nn.Module,
    src: Tensor | Sequence[int],
    tgt_in: Tensor | Sequence[int],
    targets: Tensor | Sequence[int] | None = None,
    method: str = "integrated_gradients",
    positions: Sequence[int] | None = None,
    foil: int | Sequence[int] | Tensor | None = None,
    baseline: str | int = "zero",
    n_steps: int = 128,
    internal_batch_size: int | None = 512,
) -> Attribution:
    """Attribute each output token's log-probability to the source token embeddings, with Captum.

    Args:
        model: a workbench :class:`~workbench.model.Transformer` (run in eval mode; weights untouched).
        src: source ids of one sentence (eos included), (S,) or (1, S).
        tgt_in: decoder inputs (bos, y1 .. y_{T-1}), (T,) or (1, T).
        targets: for each of the T decoder positions, the token whose log-probability is attributed (y1 .. yT);
            default: the model's own most probable token there (for a greedy translation, the translation).
        method: ``"saliency"``, ``"input_x_gradient"`` or ``"integrated_gradients"``.
        positions: decoder positions to attribute (default all T).
        foil: contrastive attribution: one token id for every position, or one per position; the function
            attributed becomes ``log p(target) - log p(foil)``.
        baseline: integrated gradients' starting point: ``"zero"`` embeddings or a token id.
        n_steps: integration steps (Gauss-Legendre) of integrated gradients. ReLU kinks slow convergence: on
            a random ``tiny`` model the worst completeness error was 1.7 % at 64 steps, 0.6 % at 256; check
            :meth:`Attribution.relative_completeness_error` (a smooth GELU model needed only 16 steps).
        internal_batch_size: most (position x step) rows per forward pass.

    Returns:
        An :class:`Attribution`.

    Shapes:
        -> scores (len(positions), S)
    """
    from captum.attr import InputXGradient, IntegratedGradients, Saliency

    if method not in METHODS:
        raise AttributionError(f"unknown attribution method {method!r}: choose from {METHODS}")
    if method == "integrated_gradients" and not (isinstance(n_steps, int) and not isinstance(n_steps, bool)
                                                 and n_steps >= 1):
        raise AttributionError(f"n_steps={n_steps!r}: integrated gradients needs 1 or more steps (32 to 128 is usual; "
                               "check the completeness error)")
    if not hasattr(model, "src_embed") or not hasattr(model.src_embed, "positional"):
        raise AttributionError(f"{type(model).__name__} has no src_embed.positional: attribution needs a workbench Transformer")
    src, tgt_in = _as_row(src, "src"), _as_row(tgt_in, "tgt_in")
    T, V = tgt_in.numel(), model.tgt_vocab_size
    positions = list(range(T)) if positions is None else [int(p) for p in positions]
    if not positions or any(not 0 <= p < T for p in positions):
        raise AttributionError(f"positions {positions} must be decoder positions 0..{T - 1}")
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            src1, tgt1 = src[None].to(device), tgt_in[None].to(device)
            logits = model(src1, tgt1)[0]  # (T, V)
        pos = torch.tensor(positions, device=device)
        N = len(positions)
        target_ids = (logits.argmax(-1) if targets is None else _ids(targets, T, V, "targets").to(device))[pos]  # (N,)
        foil_ids = _ids(foil, N, V, "foil")
        foil_arg = foil_ids.to(device) if foil_ids is not None else torch.full((N,), -1, device=device)
        args = (src1.expand(N, -1), tgt1.expand(N, -1), pos, target_ids, foil_arg)
        f = _log_prob_function(model)
        with torch.no_grad():
            x = source_embeddings(model, src1).expand(N, -1, -1).contiguous()  # (N, S, D)
        if isinstance(baseline, str):
            if baseline != "zero":
                raise AttributionError(f"unknown baseline {baseline!r}: use 'zero' or a token id")
            base = torch.zeros_like(x)
        else:
            with torch.no_grad():
                base = source_embeddings(model, torch.full_like(src1, int(baseline))).expand(N, -1, -1).contiguous()
        with torch.enable_grad(), full_precision():  # fp32 gradients, whatever a surrounding run uses
            value = f(x, *args).detach()
            baseline_value = delta = None
            if method == "integrated_gradients":
                ig = IntegratedGradients(f)
                attr, delta = ig.attribute(x, baselines=base, additional_forward_args=args, n_steps=n_steps,
                                           internal_batch_size=internal_batch_size, return_convergence_delta=True)
                with torch.no_grad():
                    baseline_value = f(base, *args)
                scores = attr.sum(-1)  # (N, S)
            elif method == "input_x_gradient":
                scores = InputXGradient(f).attribute(x, additional_forward_args=args).sum(-1)
            else:
                scores = Saliency(f).attribute(x, additional_forward_args=args, abs=False).norm(dim=-1)
    finally:
        model.train(was_training)
    return Attribution(
        method=method, scores=scores.detach().double().cpu(), positions=positions, targets=target_ids.cpu(),
        value=value.double().cpu(), foils=None if foil_ids is None else foil_ids.cpu(),
        baseline_value=None if baseline_value is None else baseline_value.detach().double().cpu(),
        delta=None if delta is None else delta.detach().double().cpu(),
    )


def token_id(tokenizer: Any, word: str, side: str = "tgt") -> int:
    """The id of a word typed by the user (its first subword when it splits), for contrastive attribution."""
    if not isinstance(word, str) or not word.strip():
        raise AttributionError("type a word to contrast with (the foil is empty)")
    ids = (tokenizer.encode_tgt([word.strip()])[0][1:-1] if side == "tgt"
           else tokenizer.encode_src([word.strip()])[0][:-1])
    if not ids or tokenizer.unk_id in ids:
        raise AttributionError(f"{word!r} is not in the {side} vocabulary (it maps to <unk>): try another word")
    if len(ids) > 1 and tokenizer.id_to_token(ids[0], side) == "▁":
        ids = ids[1:]  # a bare word-start marker says nothing about the word
    return int(ids[0])


# -- agreement between attributions and attention -------------------------------------------------------------
def _rankdata(a: np.ndarray) -> np.ndarray:
    """Ranks 0..n-1 along a 1-D array, ties sharing their average rank."""
    order = np.argsort(a, kind="mergesort")
    ranks = np.empty(len(a), dtype=np.float64)
    ranks[order] = np.arange(len(a), dtype=np.float64)
    _, inverse = np.unique(a, return_inverse=True)
    return (np.bincount(inverse, ranks) / np.bincount(inverse))[inverse]


def spearman(a: Any, b: Any) -> Tensor:
    """Spearman rank correlation of matching rows (ties get average ranks); NaN where a row is constant.

    Shapes:
        a, b: (..., n) -> (...)
    """
    x = torch.as_tensor(a).detach().double().cpu().numpy()
    y = torch.as_tensor(b).detach().double().cpu().numpy()
    if x.shape != y.shape:
        raise AttributionError(f"cannot correlate shapes {x.shape} and {y.shape}: they must match")
    lead = x.shape[:-1]
    x, y = x.reshape(-1, x.shape[-1]), y.reshape(-1, y.shape[-1])
    out = np.full(len(x), np.nan)
    for i, (u, v) in enumerate(zip(x, y, strict=True)):
        ru, rv = _rankdata(u), _rankdata(v)
        ru, rv = ru - ru.mean(), rv - rv.mean()
        denom = math.sqrt(float((ru * ru).sum() * (rv * rv).sum()))
        if denom > 0:
            out[i] = float((ru * rv).sum()) / denom
    return torch.from_numpy(out.reshape(lead))


def attention_summaries(cache: Any, index: int = 0) -> dict[str, Tensor]:
    """Source-side attention of every output position, three ways (each (T, S), rows summing to 1).

    * ``"cross mean"``: cross-attention averaged over all decoder layers and heads;
    * ``"cross last"``: the last decoder layer's cross-attention averaged over heads;
    * ``"rollout"``: the decoder-to-source rollout (:func:`workbench.inspect.flow.decoder_rollout`), renormalised.
    """
    layers = cache.layers("dec.cross")
    if not layers:
        raise AttributionError("the cache holds no cross-attention: capture a teacher-forced pass of every kind")
    cross = torch.stack([cache["dec.cross", layer][index] for layer in layers]).double()  # (L, H, T, S)
    return {
        "cross mean": cross.mean((0, 1)),
        "cross last": cross[-1].mean(0),
        "rollout": rollout_from_cache(cache, index).source_normalised(),
    }


def word_alignment(scores: Any, src_tokens: Sequence[str], out_tokens: Sequence[str]) -> list[int | None]:
    """Most attributed (or attended) source word for each target word, from subword scores.

    Scores are made non-negative (absolute values), summed over the subwords of a source word and averaged over
    those of a target word (:func:`workbench.inspect.align.word_attention`); special tokens are left out.

    Shapes:
        scores (T_out, S) over subword tokens -> one source word index per target word
    """
    s = torch.as_tensor(scores).detach().double().abs()
    q_words, k_words = word_spans(out_tokens), word_spans(src_tokens)
    if s.shape != (len(q_words), len(k_words)):
        raise AttributionError(f"scores of shape {tuple(s.shape)} for {len(out_tokens)} output and "
                               f"{len(src_tokens)} source tokens")
    if max(q_words, default=-1) < 0 or max(k_words, default=-1) < 0:
        return []
    pooled = word_attention(s.float(), q_words, k_words)  # (target words, source words)
    return [int(row.argmax()) for row in pooled]


def diagonal_prior(n_out: int, n_src: int) -> Tensor:
    """A position-only baseline: output position ``t`` favours source position ``j`` the closer ``j / (S - 1)`` is
    to ``t / (T - 1)`` (a monotone, proportional alignment that ignores every word).

    Shapes:
        -> (T, S) in [0, 1], higher = more favoured (``1 - |t / (T - 1) - j / (S - 1)|``)
    """
    t = torch.arange(n_out, dtype=torch.float64)[:, None] / max(1, n_out - 1)
    j = torch.arange(n_src, dtype=torch.float64)[None, :] / max(1, n_src - 1)
    return 1.0 - (t - j).abs()


def measure_agreement(
    model: nn.Module,
    tokenizer: Any,
    sentences: Sequence[str],
    t_prob: dict[tuple[str, str], float] | None = None,
    methods: Sequence[str] = METHODS,
    n_steps: int = 32,
    progress: bool = False,
    baselines: bool = False,
    per_head: bool = False,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Attention-vs-attribution agreement, one row per sentence (greedy translation, teacher-forced).

    For each sentence and each attribution method and attention summary: the mean over output tokens (eos
    excluded) of the Spearman correlation between |attribution| and attention over the source tokens; and,
    given IBM Model 1 probabilities ``t_prob`` (:func:`workbench.inspect.align.ibm1`), the share of target words
    whose most-attributed / most-attended source word is the aligner's (:func:`alignment_agreement`).

    Args:
        baselines: also score what agreement looks like without attention: per method, the rank correlation
            with random scores (``"spearman/<method>/random"``, a fresh uniform draw per token) and with the
            position-only :func:`diagonal_prior` (``".../diagonal"``); for the aligner, a random source word per
            target word (``"align/random"``), the expected agreement of a uniform guess (``"align/uniform"``,
            the mean of 1 / number of source words over the aligned target words) and the diagonal prior
            (``"align/diagonal"``). Integrated gradients also reports its completeness: ``"ig/abs_delta"``
            (sum over tokens of |sum of scores - (f(x) - f(baseline))|), ``"ig/abs_change"`` (sum of
            |f(x) - f(baseline)|) and ``"ig/max_relative_error"``.
        per_head: also ``"head_spearman/<method>"``: an (L, H) nested list, the mean over output tokens of the
            rank correlation between |attribution| and each cross-attention head on its own.
        seed: seeds the random baselines (a ``numpy`` generator of its own; global state is untouched).

    Returns:
        Rows with ``"source"``, ``"translation"``, ``"spearman/<method>/<attention>"`` and
        ``"align/<method or attention>"`` values (NaN where undefined, e.g. a one-word source), plus the keys
        above when asked.
    """
    rows = []
    rng = np.random.default_rng(seed)
    todo: Any = sentences
    if progress:
        from tqdm.auto import tqdm

        todo = tqdm(sentences, desc="agreement", unit="sentence", leave=False)
    for sentence in todo:
        ins = inspect_translation(model, tokenizer, sentence)
        tgt_in = [tokenizer.bos_id, *ins.out_ids[:-1]]
        keep = [t for t, tok in enumerate(ins.out_tokens) if tok != "<eos>"]  # rows scored for rank agreement
        attention = attention_summaries(ins.cache)
        reference = ibm1_align(t_prob, sentence, ins.translation) if t_prob is not None else None
        row: dict[str, Any] = {"source": sentence, "translation": ins.translation}
        scores = {name: att for name, att in attention.items()}
        T, S = len(ins.out_ids), len(ins.src_ids)
        if baselines:
            scores["diagonal"] = diagonal_prior(T, S)
        heads = (torch.stack([ins.cache["dec.cross", layer][0] for layer in ins.cache.layers("dec.cross")]).double()
                 if per_head else None)  # (L, H, T, S)
        for method in methods:
            a = attribute(model, ins.src_ids, tgt_in, targets=ins.out_ids, method=method, n_steps=n_steps)
            scores[method] = a.scores
            mag = a.scores.abs()[keep]  # (T', S)
            for name, att in attention.items():
                row[f"spearman/{method}/{name}"] = _mean_spearman(mag, att[keep])
            if baselines:
                row[f"spearman/{method}/random"] = _mean_spearman(mag, torch.from_numpy(rng.random(tuple(mag.shape))))
                row[f"spearman/{method}/diagonal"] = _mean_spearman(mag, scores["diagonal"][keep])
                if a.baseline_value is not None:
                    change = (a.value - a.baseline_value)[keep]
                    row["ig/abs_delta"] = float((a.scores.sum(-1)[keep] - change).abs().sum())
                    row["ig/abs_change"] = float(change.abs().sum())
                    row["ig/max_relative_error"] = float(a.relative_completeness_error()[keep].max()) if keep else math.nan
            if heads is not None:
                row[f"head_spearman/{method}"] = [[_mean_spearman(mag, h[keep]) for h in layer] for layer in heads]
        if reference is not None:
            for name, s in scores.items():
                row[f"align/{name}"] = _agreement(word_alignment(s, ins.src_tokens, ins.out_tokens), reference)
            if baselines:
                # scored on the same sentences as the others: NaN where the aligner's words and the tokenizer's
                # words disagree in number (as _agreement does), or where no target word has a link
                n_words = max(word_spans(ins.src_tokens)) + 1
                same_words = max(word_spans(ins.out_tokens)) + 1 == len(reference) and n_words > 0
                guess = [int(rng.integers(n_words)) for _ in reference] if same_words else []
                row["align/random"] = _agreement(guess, reference)
                row["align/uniform"] = 1.0 / n_words if not math.isnan(row["align/random"]) else math.nan
        rows.append(row)
    return rows


def _mean_spearman(a: Tensor, b: Tensor) -> float:
    """Mean of the per-row rank correlations, rows where it is undefined (constant rows) left out."""
    rho = spearman(a, b).numpy() if len(a) else np.array([])
    return float(np.mean(rho[np.isfinite(rho)])) if np.isfinite(rho).any() else math.nan


def _agreement(predicted: list[int | None], reference: list[int | None]) -> float:
    if len(predicted) != len(reference):
        return math.nan  # the aligner's whitespace words and the tokenizer's words disagree: no score
    return alignment_agreement(predicted, reference)


# -- summaries over sentences (the notebook's and the benchmark's tables) -----------------------------------------
def _finite(values: Sequence[Any]) -> np.ndarray:
    a = np.asarray([v for v in values if isinstance(v, int | float)], dtype=np.float64)
    return a[np.isfinite(a)]


def mean_se(values: Sequence[float]) -> dict[str, float]:
    """Mean, standard error of the mean (sample standard deviation / sqrt(n)) and n of the finite values."""
    a = _finite(values)
    n = len(a)
    return {"mean": float(a.mean()) if n else math.nan,
            "se": float(a.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan, "n": n}


def summarise_agreement(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """:func:`mean_se` over sentences of every scalar ``spearman/...`` and ``align/...`` key of
    :func:`measure_agreement` rows (NaN sentences left out, so ``n`` can differ between keys)."""
    keys = sorted({k for row in rows for k, v in row.items()
                   if k.startswith(("spearman/", "align/")) and isinstance(v, int | float)})
    return {k: mean_se([row.get(k, math.nan) for row in rows]) for k in keys}


def paired_gap(rows: Sequence[dict[str, Any]], key: str, baseline: str) -> dict[str, float]:
    """``row[key] - row[baseline]`` over the sentences where both are defined: mean, standard error, n, and
    ``z`` = mean / standard error (how many standard errors the gap lies above zero)."""
    gaps = [row[key] - row[baseline] for row in rows
            if math.isfinite(row.get(key, math.nan)) and math.isfinite(row.get(baseline, math.nan))]
    out = mean_se(gaps)
    out["z"] = out["mean"] / out["se"] if out["n"] > 1 and out["se"] > 0 else math.nan
    return out


def completeness(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Integrated gradients' completeness over all scored tokens of ``rows`` (from ``baselines=True``):
    ``relative_error`` = sum |sum of scores - (f(x) - f(baseline))| / sum |f(x) - f(baseline)|, and the worst
    single token's relative error."""
    done = [row for row in rows if "ig/abs_delta" in row]
    if not done:
        raise AttributionError("no integrated-gradients completeness in these rows: measure with "
                               "methods including 'integrated_gradients' and baselines=True")
    change = sum(row["ig/abs_change"] for row in done)
    return {"relative_error": sum(row["ig/abs_delta"] for row in done) / change if change > 0 else math.nan,
            "worst_token_relative_error": float(np.nanmax([row["ig/max_relative_error"] for row in done])),
            "sentences": len(done)}


def head_agreement(rows: Sequence[dict[str, Any]], method: str = "integrated_gradients") -> Tensor:
    """Mean over sentences of each cross-attention head's rank agreement with ``method`` (``per_head=True`` rows).

    Shapes:
        -> (L, H)
    """
    key = f"head_spearman/{method}"
    mats = [np.asarray(row[key], dtype=np.float64) for row in rows if key in row]
    if not mats:
        raise AttributionError(f"no {key!r} in these rows: measure with per_head=True and method {method!r}")
    return torch.from_numpy(np.nanmean(np.stack(mats), axis=0))
