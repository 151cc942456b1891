"""Exercises of notebook 05 (masked attention): the padding and causal masks (True = may attend), one decoding step
of self-attention with a hand-written key/value cache, and the greedy loop, checked against
:func:`workbench.model.masks.padding_mask`, :func:`~workbench.model.masks.causal_mask`, the package's causal
:func:`~workbench.model.attention.scaled_dot_product_attention` and the loop of
:func:`workbench.translation.decode.greedy_decode`."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from workbench.lessons.exercises import properties as P
from workbench.lessons.exercises.core import Case, Exercise, Invariant, Mistake, register, variants
from workbench.lessons.exercises.predictions import Prediction, register_prediction
from workbench.model.attention import scaled_dot_product_attention
from workbench.model.masks import causal_mask, padding_mask


# -- padding_mask -------------------------------------------------------------------------------------------------
def _pad_cases() -> list[Case]:
    return [Case("batch 2 with padding", (torch.tensor([[5, 6, 7, 0, 0], [4, 0, 0, 0, 0]]), 0)),
            Case("batch 1, no padding", (torch.tensor([[3, 9, 4]]), 0)),
            Case("pad id 1", (torch.tensor([[5, 0, 1, 1], [7, 8, 9, 1]]), 1)),
            Case("length 1", (torch.tensor([[4], [0]]), 0)),
            Case("padding not only at the end", (torch.tensor([[0, 0, 5, 6], [7, 0, 8, 0]]), 0))]


def _pad_draw(rng) -> Case:
    B, T, pad = rng.randint(1, 5), rng.randint(1, 8), rng.randint(0, 3)
    lens = P.lengths(rng, B, T)
    tokens = torch.tensor([[rng.choice([t for t in range(4, 40) if t != pad]) for _ in range(T)] for _ in range(B)])
    tokens = tokens.masked_fill(~P.key_mask(lens, T), pad)
    return Case(f"batch {B}, lengths {lens}, pad id {pad}", (tokens, pad))


register(Exercise(
    "05.padding_mask", "the key-padding mask: True at real tokens", padding_mask, _pad_cases, draw=_pad_draw,
    package=("workbench.model.masks.attention_mask",), invariants=(P.boolean(),),
    mistakes=(
        Mistake("mask convention inverted", "True means 'may attend' (a real token): tokens != pad_id",
                lambda tokens, pad_id: tokens == pad_id),
        Mistake("0/1 numbers instead of booleans", "return a boolean tensor (tokens != pad_id), not .float() or "
                ".long(): a float mask is added to the scores, not used to select them",
                lambda tokens, pad_id: (tokens != pad_id).float()),
        Mistake("pad id assumed to be 0", "compare with the pad_id argument, not with 0",
                lambda tokens, pad_id: tokens != 0),
    )))


# -- causal_mask --------------------------------------------------------------------------------------------------
register(Exercise(
    "05.causal_mask", "the causal mask: query i may attend to keys j <= i", causal_mask,
    lambda: [Case("T = 5", (5,)), Case("T = 1", (1,)), Case("T = 8", (8,)), Case("T = 37", (37,))],
    draw=lambda rng: (lambda T: Case(f"T = {T}", (T,)))(rng.randint(1, 64)),
    package=("workbench.model.masks.attention_mask",), invariants=(P.boolean(),),
    mistakes=(
        Mistake("future allowed, past blocked", "the upper triangle is the future: keep the lower triangle "
                "(torch.tril), j <= i", lambda T: torch.ones(T, T, dtype=torch.bool).triu()),
        Mistake("a token cannot see itself", "the diagonal belongs in the mask: query i may attend to key i "
                "(j <= i, not j < i)", lambda T: torch.ones(T, T, dtype=torch.bool).tril(-1)),
        Mistake("mask convention inverted", "True means 'may attend' (SDPA's convention); torch.nn.Transformer's "
                "True = blocked is the opposite", lambda T: torch.ones(T, T, dtype=torch.bool).triu(1)),
        Mistake("0/1 numbers instead of booleans", "return booleans: torch.ones(T, T, dtype=torch.bool).tril()",
                lambda T: torch.ones(T, T).tril()),
    )))


# -- attend_with_cache --------------------------------------------------------------------------------------------
@dataclass
class KVStore:
    """A hand-written key/value cache: keys and values of the positions decoded so far (None before the first)."""

    k: Tensor | None = None  # (B, t, D)
    v: Tensor | None = None  # (B, t, D)


def attend_with_cache(x_new: Tensor, cache: KVStore, W_q: Tensor, W_k: Tensor, W_v: Tensor) -> Tensor:
    """One decoding step of single-head causal self-attention: project the new position, append its key and value to
    ``cache``, attend from its query to every cached position (itself included), scaled by 1/√D.

    Shapes: x_new (B, 1, D), cache.k / cache.v (B, t, D) -> (B, 1, D); the cache grows to (B, t+1, D)
    """
    k_new, v_new = x_new @ W_k, x_new @ W_v  # (B, 1, D)
    cache.k = k_new if cache.k is None else torch.cat([cache.k, k_new], dim=1)  # (B, t+1, D)
    cache.v = v_new if cache.v is None else torch.cat([cache.v, v_new], dim=1)
    q = x_new @ W_q
    # the explicit path: its gradients are the reference, and the fused kernel's float32 backward loses the tiny
    # gradients of a saturated softmax on some CPUs (4e-4 where the exact value is 1e-10, on AVX-512)
    out, _ = scaled_dot_product_attention(q[:, None], cache.k[:, None], cache.v[:, None], need_weights=True)  # (B, 1, 1, D)
    return out[:, 0]


def run_step_by_step(step, x: Tensor, W_q: Tensor, W_k: Tensor, W_v: Tensor) -> Tensor:
    """Decode ``x`` one position at a time with ``step`` and a fresh cache; the outputs side by side.

    Shapes: x (B, T, D) -> (B, T, D)"""
    cache = KVStore()
    return torch.cat([step(x[:, t:t + 1], cache, W_q, W_k, W_v) for t in range(x.shape[1])], dim=1)


CACHE_K, CACHE_V = "cache.k after each step", "cache.v after each step"


def run_and_watch_cache(step, x: Tensor, W_q: Tensor, W_k: Tensor, W_v: Tensor) -> dict[str, object]:
    """As :func:`run_step_by_step`, and what the cache holds after every call (it must hold the keys x[:, :t+1] W_k
    and the values x[:, :t+1] W_v of every position so far, in order), for the check."""
    cache = KVStore()
    outs, ks, vs = [], [], []
    for t in range(x.shape[1]):
        outs.append(step(x[:, t:t + 1], cache, W_q, W_k, W_v))
        ks.append(cache.k.clone() if isinstance(cache.k, Tensor) else cache.k)
        vs.append(cache.v.clone() if isinstance(cache.v, Tensor) else cache.v)
    return {"output": torch.cat(outs, dim=1), CACHE_K: ks, CACHE_V: vs}


def full_causal_attention(x: Tensor, W_q: Tensor, W_k: Tensor, W_v: Tensor) -> Tensor:
    """The same attention in one pass with the causal mask (what training computes). Shapes: (B, T, D) -> (B, T, D)."""
    out, _ = scaled_dot_product_attention((x @ W_q)[:, None], (x @ W_k)[:, None], (x @ W_v)[:, None], is_causal=True,
                                          need_weights=True)  # the explicit path, as attend_with_cache
    return out[:, 0]


def _cache_case(B: int, T: int, D: int, seed: int, dtype: torch.dtype = torch.float32) -> tuple:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, T, D, generator=g, dtype=dtype),
            *(torch.randn(D, D, generator=g, dtype=dtype) / math.sqrt(D) * 2 for _ in range(3)))


def _cache_large() -> tuple:
    """Inputs of size 12 through near-identity projections: scores in the hundreds, past exp()'s float32 range."""
    x, *Ws = _cache_case(2, 5, 4, 4)
    return (x * 12, *[W * 0.2 + torch.eye(4) for W in Ws])


def _only_new(x_new, cache, W_q, W_k, W_v):
    return x_new @ W_v


def _keys_prepended(x_new, cache, W_q, W_k, W_v):
    k_new, v_new = x_new @ W_k, x_new @ W_v
    cache.k = k_new if cache.k is None else torch.cat([k_new, cache.k], dim=1)
    cache.v = v_new if cache.v is None else torch.cat([cache.v, v_new], dim=1)
    w = torch.softmax((x_new @ W_q) @ cache.k.transpose(1, 2) / math.sqrt(x_new.shape[-1]), -1)
    return w @ cache.v


def _unscaled(x_new, cache, W_q, W_k, W_v):
    k_new, v_new = x_new @ W_k, x_new @ W_v
    cache.k = k_new if cache.k is None else torch.cat([cache.k, k_new], dim=1)
    cache.v = v_new if cache.v is None else torch.cat([cache.v, v_new], dim=1)
    return torch.softmax((x_new @ W_q) @ cache.k.transpose(1, 2), -1) @ cache.v


def _cache_draw(rng) -> Case:
    B, T, D, dt = rng.randint(1, 3), rng.randint(1, 12), rng.randint(1, 8), P.dtype(rng)
    return Case(f"batch {B}, {T} steps, D={D}, {dt}", _cache_case(B, T, D, rng.randrange(10**6), dt))


def _reprojects(x_new, cache, W_q, W_k, W_v):
    """Stores the raw inputs in the cache and projects the whole history again at every step (same outputs)."""
    cache.k = x_new if cache.k is None else torch.cat([cache.k, x_new], dim=1)
    cache.v = cache.k
    k, v = cache.k @ W_k, cache.k @ W_v
    return torch.softmax((x_new @ W_q) @ k.transpose(1, 2) / math.sqrt(x_new.shape[-1]), -1) @ v


register(Exercise(
    "05.attend_with_cache", "one decoding step of self-attention with a key/value cache", attend_with_cache,
    lambda: [Case("batch 2, 6 steps, D=8", _cache_case(2, 6, 8, 0)), Case("batch 1, 1 step", _cache_case(1, 1, 4, 1)),
             Case("float64, 4 steps", _cache_case(2, 4, 6, 2, torch.float64)),
             # long enough that a cache which keeps only its last few positions (a window) shows
             Case("batch 1, 16 steps, D=4", _cache_case(1, 16, 4, 3)),
             Case("large scores (exp overflows unless the row's maximum is taken off first)", _cache_large())],
    driver=run_and_watch_cache, draw=_cache_draw, differentiable=True, fills=(CACHE_K, CACHE_V),
    package=("workbench.model.attention.scaled_dot_product_attention", "workbench.model.attention.KVCache.append",
             "torch.nn.functional.scaled_dot_product_attention",
             "torch._C._nn.scaled_dot_product_attention"),
    mistakes=(
        Mistake("cache holds the inputs, not keys and values", "store the projected keys x_new @ W_k and values "
                "x_new @ W_v: a cache that keeps the raw inputs projects the whole history again at every step, "
                "which is the work the cache exists to save", _reprojects),
        Mistake("attends only to the new token", "append the new key and value to the cache and attend over all "
                "of it: the new position sees every earlier one", _only_new),
        Mistake("keys and values misaligned", "append the new key at the end (torch.cat([cache.k, k_new], 1)), in "
                "the same order as the values", _keys_prepended),
        Mistake("forgot to divide by sqrt(d_k)", "scale the scores by 1/√D before the softmax", _unscaled),
    )))


# -- greedy_loop --------------------------------------------------------------------------------------------------
def greedy_loop(next_logits, bos_id: int, eos_id: int, max_len: int) -> list[int]:
    """Greedy decoding of one sentence, as :func:`~workbench.translation.decode.greedy_decode` does: start from
    [bos], append the most probable next token until eos; when the budget of ``max_len`` tokens runs out the last
    token is eos. Returns the tokens without bos, eos included.

    ``next_logits(prefix)`` takes the list of tokens so far (bos first) and returns the next token's logits (V,).
    """
    return _loop(next_logits, bos_id, eos_id, max_len)  # every switch at its right setting


def _tokens(prefix: object) -> list[int]:
    """The prefix a toy decoder is called with, which must be what the docstring says: a list of Python ints."""
    if not isinstance(prefix, list) or not all(type(t) is int for t in prefix):
        got = (f"a list holding {type(next(t for t in prefix if type(t) is not int)).__name__}"
               if isinstance(prefix, list) else f"a {type(prefix).__name__}")
        raise TypeError(f"next_logits takes the prefix as a list of Python ints (bos first), got {got}: keep the "
                        "tokens in a list and append int(...) of each argmax")
    return prefix


class BigramModel:
    """A toy "decoder": the next token's logits depend on the last token only (a (V, V) table)."""

    def __init__(self, table: Tensor) -> None:
        self.table = table

    def __call__(self, prefix: list[int]) -> Tensor:
        return self.table[_tokens(prefix)[-1]]


class PrefixModel:
    """A toy decoder whose next token depends on the whole prefix (a hash of every token so far seeds its logits),
    so a loop that feeds the model only the last token, or drops bos, goes another way. After ``eos_after`` tokens
    (bos not counted) eos becomes the most probable token."""

    def __init__(self, V: int, seed: int, eos_id: int, eos_after: int) -> None:
        self.V, self.seed, self.eos_id, self.eos_after = V, seed, eos_id, eos_after

    def __call__(self, prefix: list[int]) -> Tensor:
        tokens = _tokens(prefix)
        h = self.seed
        for t in tokens:
            h = (h * 1_000_003 + t + 1) % 2_147_483_647
        logits = torch.randn(self.V, generator=torch.Generator().manual_seed(h)) * 3
        logits[self.eos_id] = 20.0 if len(tokens) - 1 >= self.eos_after else -20.0
        return logits


def _bigram(V: int, chain: list[int], seed: int) -> BigramModel:
    g = torch.Generator().manual_seed(seed)
    table = torch.randn(V, V, generator=g)
    table[:, 3] = -10.0  # eos (id 3) only where the chain puts it
    for a, b in zip(chain, chain[1:], strict=False):
        table[a, b] = 10.0
    return BigramModel(table)


def _loop_cases() -> list[Case]:
    return [Case("eos after 4 tokens", (_bigram(12, [2, 5, 7, 4, 3], 0), 2, 3, 20)),
            Case("no eos: budget of 6", (_bigram(12, [2, 5, 6, 5, 6], 1), 2, 3, 6)),
            Case("budget of 1", (_bigram(12, [2, 8, 3], 2), 2, 3, 1)),
            Case("eos first", (_bigram(9, [2, 3], 3), 2, 3, 5)),
            Case("a model that reads the whole prefix", (PrefixModel(30, 7, 3, 6), 2, 3, 12)),
            Case("a model that reads the whole prefix, bos 1, eos 0", (PrefixModel(25, 8, 0, 4), 1, 0, 9)),
            Case("ties: two tokens share the top score (argmax takes the first)", (_tied([2, 5, 7, 3]), 2, 3, 10)),
            Case("near-ties: the best token leads by 0.001 (lost in float16 or bfloat16)",
                 (_near_tie([2, 6, 9, 5, 3]), 2, 3, 10))]


def _near_tie(chain: list[int]) -> BigramModel:
    """A bigram table in which each step's best token beats the id just below it by 0.001 only: in float32 the
    argmax is exact, while a half-precision copy (float16 steps of 1/128 at 8) rounds both to one value."""
    table = torch.zeros(12, 12)
    table[:, 3] = -10.0
    for a, b in zip(chain, chain[1:], strict=False):
        table[a, b] = 8.001
        if b != 3 and b - 1 != 3:
            table[a, b - 1] = 8.0
    return BigramModel(table)


def _tied(chain: list[int]) -> BigramModel:
    """A bigram table in which each step's best token ties with the next id (eos excepted)."""
    table = torch.zeros(12, 12)
    table[:, 3] = -10.0
    for a, b in zip(chain, chain[1:], strict=False):
        table[a, b] = 5.0
        if b != 3:
            table[a, b + 1] = 5.0
    return BigramModel(table)


def _loop_draw(rng) -> Case:
    V, bos, eos = rng.randint(6, 40), rng.randint(0, 2), rng.randint(3, 5)
    eos_after, max_len = rng.randint(0, 10), rng.randint(1, 12)
    return Case(f"a prefix model, V={V}, eos after {eos_after}, budget {max_len}",
                (PrefixModel(V, rng.randrange(10**6), eos, eos_after), bos, eos, max_len))


def _ends_with_eos(args: tuple, out: object) -> str | None:
    _, _, eos_id, max_len = args
    if not isinstance(out, list):
        return None
    if not out or out[-1] != eos_id:
        return f"the output {out[:8]} does not end with eos ({eos_id})"
    if len(out) > max_len:
        return f"{len(out)} tokens, more than the budget of {max_len}"
    return None


def _loop(next_logits, bos_id, eos_id, max_len, keep_eos=True, keep_bos=False, stop=True, force=True):
    """The greedy loop with a switch for each planted mistake; at the defaults it is :func:`greedy_loop`."""
    prefix = [bos_id]
    for t in range(max_len):
        nxt = int(next_logits(prefix).argmax())
        if force and t + 1 >= max_len:
            nxt = eos_id
        if nxt == eos_id and stop:
            if keep_eos:
                prefix.append(nxt)
            break
        prefix.append(nxt)
    return prefix if keep_bos else prefix[1:]


register(Exercise(
    "05.greedy_loop", "the greedy decoding loop", greedy_loop, _loop_cases, draw=_loop_draw,
    package=("workbench.lessons.exercises.nb05._loop", "workbench.translation.decode.greedy_decode"),
    invariants=(Invariant("ends with eos within the budget of max_len tokens", _ends_with_eos),),
    mistakes=variants(
        _loop,
        ("eos not included", "append eos before stopping: the output ends with eos", {"keep_eos": False}),
        ("bos left in the output", "return the tokens after bos (prefix[1:])", {"keep_bos": True}),
        ("eos never checked", "stop as soon as the appended token is eos", {"stop": False}),
        ("budget end not forced to eos", "when t + 1 reaches max_len, append eos instead of the argmax",
         {"force": False}),
    )))


# -- the prediction ------------------------------------------------------------------------------------------------
register_prediction(Prediction(
    "05.causal_true", "how many entries of a 10 × 10 causal mask are True?", "PREDICT_CAUSAL_TRUE", "count",
    wrong=(("the diagonal forgotten", 45), ("every pair", 100), ("half of the pairs", 50), ("the diagonal only", 10)),
    expected=lambda params: 10 * 11 // 2))
