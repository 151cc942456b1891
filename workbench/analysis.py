"""Analysis helpers the notebooks and widgets share: translate-and-capture, bertviz export, word alignments."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

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
