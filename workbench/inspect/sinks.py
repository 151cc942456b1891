"""Attention sinks: how much of each head's weight lands on ``</s>``, punctuation and the first position.

Many heads park weight on tokens that carry little content (Xiao et al., 2024 call them *attention sinks*; in
translation models end-of-sentence tokens and punctuation take much of the cross-attention). Reading such a head's
weights as a word alignment then fails for a reason unrelated to alignment. :func:`sink_audit` measures it for every
head of every attention kind the model has (``enc.self``, ``dec.self``, ``dec.cross``, the kinds of
:mod:`workbench.model.sites`, which the table's ``kind`` column holds; the recurrent baseline's one attention is
``dec.cross`` too, its site being ``dec.0.cross.pattern``), on teacher-forced (source, reference) pairs:

* the share of each query's weight on each *key category*, averaged over a sentence's real query positions, then
  over sentences, with percentile bootstrap intervals over sentences. Every real key position falls in exactly one
  category, checked in this order: ``first`` (position 0: the first source token, or the decoder's start token),
  ``eos`` (the ``</s>`` token), ``punctuation`` (a token that is only punctuation once the word-start mark ``▁`` is
  dropped; a word with its full stop attached is a content token), ``content`` (everything else). The four shares
  of a row sum to 1;
* for cross-attention heads, alignment agreement with the IBM Model 1 aligner of :mod:`workbench.inspect.align`
  (lesson 13): the share of target words whose most-attended source word is the aligner's, **raw** (``</s>`` is a
  candidate, and counts as a miss when it wins) and **content-only** (``</s>`` and punctuation words are removed
  before the argmax); both over the same target words (those the aligner links to a content word);
* optionally, the change in corpus BLEU (greedy) when the sink-heavy heads (sink share >= ``sink_threshold``) are
  switched off together with :func:`workbench.inspect.intervene.ablate_heads` (mean ablation by default), beside
  the change when as many other heads, drawn at random, are switched off instead.
"""

from __future__ import annotations

import logging
import math
import time
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn

from workbench.errors import DataError, InterventionError
from workbench.inspect.align import ibm1, ibm1_align, word_spans
from workbench.inspect.capture import capture_attention
from workbench.model.sites import ATTENTION_KINDS, KindDict, split_site

log = logging.getLogger(__name__)

__all__ = ["CATEGORIES", "SinkAudit", "is_punctuation", "key_categories", "sink_audit"]

CATEGORIES = ("first", "eos", "punctuation", "content")
SINKS = CATEGORIES[:3]


def is_punctuation(token: str) -> bool:
    """A token that is only punctuation once the word-start mark ``▁`` is dropped (``","``, ``"▁."``, ``"-"``)."""
    text = token.replace("▁", "")
    return bool(text) and all(unicodedata.category(ch).startswith("P") for ch in text)


def key_categories(tokens: Sequence[str], ids: Sequence[int], eos_id: int) -> list[int]:
    """Category index (into :data:`CATEGORIES`) of each key position: first, eos, punctuation, content, in order."""
    out = []
    for pos, (token, i) in enumerate(zip(tokens, ids, strict=True)):
        if pos == 0:
            out.append(0)
        elif int(i) == eos_id:
            out.append(1)
        elif is_punctuation(token):
            out.append(2)
        else:
            out.append(3)
    return out


@dataclass
class SinkAudit:
    """What :func:`sink_audit` found.

    ``table`` has one row per head: ``kind, layer, head`` (``kind`` a site kind, ``enc.self``, ``dec.self`` or
    ``dec.cross``, so a row's ``(kind, layer, head)`` is what :func:`~workbench.inspect.intervene.ablate_heads`
    takes), for each category its mean share and bootstrap interval (``first, first_lo, first_hi, eos, ...``),
    ``sink`` (first + eos + punctuation, with interval), ``align_raw`` and ``align_content`` (cross-attention only,
    else NaN) and ``ablated`` (in the sink-heavy set). ``ablation`` holds the BLEU figures (empty when not run),
    ``per_sentence`` the (N, H, 4) shares per block, by ``(kind, layer)``.
    """

    table: pd.DataFrame
    ablation: dict[str, Any] = field(default_factory=dict)
    per_sentence: dict[tuple[str, int], np.ndarray] = field(default_factory=KindDict)  # (kind, layer) -> (N, H, 4)
    n_sentences: int = 0
    seconds: float = 0.0

    def summary(self) -> pd.DataFrame:
        """Mean share of every category per attention kind (heads averaged)."""
        return self.table.groupby("kind")[[*CATEGORIES, "align_raw", "align_content"]].mean()


def _one_hot(cats: list[int], width: int) -> Tensor:
    out = torch.zeros(width, len(CATEGORIES))
    out[torch.arange(len(cats)), torch.tensor(cats)] = 1.0
    return out  # (Tk, 4); padded keys stay 0


def _word_pools(out_tokens: Sequence[str], src_tokens: Sequence[str], src_ids: Sequence[int], eos_id: int,
                n_src_words: int, punct_words: set[int]) -> tuple[Tensor, Tensor, Tensor] | None:
    """Pooling matrices: target words x query rows (mean), key rows x (source words + one ``</s>`` column) (sum).

    Returns None when the subword spans do not match the whitespace words (the sentence is left out).
    """
    q_words, k_words = word_spans(out_tokens), word_spans(src_tokens)
    if max(k_words, default=-1) + 1 != n_src_words:
        return None
    nq = max(q_words, default=-1) + 1
    if nq == 0:
        return None
    qpool = torch.zeros(nq, len(out_tokens))
    for row, w in enumerate(q_words):
        if w >= 0:
            qpool[w, row] = 1.0
    qpool = qpool / qpool.sum(1, keepdim=True).clamp_min(1)  # mean over a word's subwords
    kpool = torch.zeros(len(src_tokens), n_src_words + 1)  # the last column: </s>
    for pos, (w, i) in enumerate(zip(k_words, src_ids, strict=True)):
        if int(i) == eos_id:
            kpool[pos, -1] = 1.0
        elif w >= 0:
            kpool[pos, w] = 1.0
    content = torch.ones(n_src_words + 1, dtype=torch.bool)
    content[-1] = False
    for w in punct_words:
        content[w] = False
    return qpool, kpool, content


def _bleu_with(model: nn.Module, tokenizer: Any, sources: list[str], refs: list[str], heads: list, mode: str,
               means: Any, max_extra: int) -> float:
    from workbench.inspect.intervene import ablate_heads
    from workbench.translation.decode import translate
    from workbench.translation.metrics import corpus_bleu

    if heads:
        with ablate_heads(model, heads, mode=mode, means=means):
            hyps = translate(model, tokenizer, sources, beam=1, max_extra=max_extra, progress=False)
    else:
        hyps = translate(model, tokenizer, sources, beam=1, max_extra=max_extra, progress=False)
    return float(corpus_bleu(hyps, refs).score)


def sink_audit(model: nn.Module, tokenizer: Any, pairs: Sequence[tuple[str, str]], batch_size: int = 64,
               n_bootstrap: int = 1000, seed: int = 0, align: bool = True, ablate: bool = True,
               sink_threshold: float = 0.5, ablation_mode: str = "mean", max_extra: int = 20,
               ibm1_pairs: Sequence[tuple[str, str]] | None = None) -> SinkAudit:
    """Sink shares, alignment agreement and sink-head ablation for every head of a translator.

    Args:
        model: a workbench Transformer (imported Marian models included) or the recurrent baseline.
        tokenizer: the model's tokenizer (``encode_src``, ``encode_tgt``, ``tokens_src``, ``tokens_tgt``).
        pairs: (source, reference) sentences, e.g. test2016; each sentence is one bootstrap unit.
        batch_size: sentences per teacher-forced run.
        n_bootstrap: bootstrap resamples for the 95 % intervals.
        seed: seeds the bootstrap and the random control heads.
        align: measure alignment agreement of cross-attention heads (IBM Model 1 trained on ``ibm1_pairs``,
            default ``pairs``).
        ablate: translate ``pairs`` with the sink-heavy heads switched off (Transformers only).
        sink_threshold: a head is sink-heavy when its sink share (first + eos + punctuation) reaches this.
        ablation_mode: ``"mean"`` or ``"zero"`` (see :func:`~workbench.inspect.intervene.ablate_heads`).
        max_extra: greedy output budget beyond the source length for the BLEU runs.

    Returns:
        A :class:`SinkAudit`; its ``table`` is the labelled per-head table.

    Raises:
        DataError: fewer than 2 pairs, or pairs that are not (source, reference) strings.
        InterventionError: a threshold outside (0, 1].
    """
    from workbench.lessons.pronoun_pairs import bootstrap_ci
    from workbench.translation.batching import pad_to_tensor

    start = time.perf_counter()
    pairs = list(pairs)
    if len(pairs) < 2:
        raise DataError(f"sink_audit needs at least 2 (source, reference) pairs for its intervals, got {len(pairs)}")
    if not all(isinstance(p, tuple | list) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in pairs):
        raise DataError("pairs must be (source, reference) string pairs, e.g. load_multi30k('test_2016_flickr')")
    if not 0 < sink_threshold <= 1:
        raise InterventionError(f"sink_threshold={sink_threshold!r} must lie in (0, 1], e.g. 0.5")
    device = next(model.parameters()).device
    eos_id, pad_id = tokenizer.eos_id, model.pad_id
    t_prob = ibm1(list(ibm1_pairs or pairs)) if align else None
    shares: dict[tuple[str, int], list[Tensor]] = {}
    hits: dict[tuple[str, int], Tensor] = {}  # (kind, layer) -> (H, 2) matches, raw and content-only
    links: dict[tuple[str, int], int] = {}
    was_training = model.training
    model.eval()
    try:
        for b0 in range(0, len(pairs), batch_size):
            chunk = pairs[b0:b0 + batch_size]
            src_rows = tokenizer.encode_src([s for s, _ in chunk])
            tgt_rows = tokenizer.encode_tgt([t for _, t in chunk])
            src = pad_to_tensor(src_rows, pad_id).to(device)
            tgt = pad_to_tensor([r[:-1] for r in tgt_rows], pad_id).to(device)  # (B, T): bos + reference
            src_tokens = [tokenizer.tokens_src(s) for s, _ in chunk]
            tgt_tokens = [tokenizer.tokens_tgt(t) for _, t in chunk]
            S, T = src.shape[1], tgt.shape[1]
            src_cat = torch.stack([_one_hot(key_categories(tk, ids, eos_id), S) for tk, ids in zip(src_tokens, src_rows, strict=True)])
            tgt_cat = torch.stack([_one_hot(key_categories(tk[:-1], ids[:-1], eos_id), T)
                                   for tk, ids in zip(tgt_tokens, tgt_rows, strict=True)])  # (B, T, 4)
            real_src, real_tgt = (src != pad_id).cpu(), (tgt != pad_id).cpu()
            with torch.no_grad(), capture_attention(model) as cache:
                model(src, tgt)
            for name in cache:
                kind, layer, _ = split_site(name)
                w = cache[name].float()  # (B, H, Tq, Tk)
                keys = tgt_cat if kind == "dec.self" else src_cat  # (B, Tk, 4)
                queries = real_src if kind == "enc.self" else real_tgt  # (B, Tq)
                per_query = w @ keys[:, None]  # (B, H, Tq, 4)
                q = queries[:, None, :, None].float()
                per_sentence = (per_query * q).sum(2) / q.sum(2).clamp_min(1)  # (B, H, 4)
                shares.setdefault((kind, layer), []).append(per_sentence)
                if t_prob is None or kind != "dec.cross":
                    continue
                for b, (source, reference) in enumerate(chunk):
                    src_words, tgt_words = source.split(), reference.split()
                    punct = {i for i, word in enumerate(src_words) if is_punctuation(word)}
                    pools = _word_pools(tgt_tokens[b][1:], src_tokens[b], src_rows[b], eos_id, len(src_words), punct)
                    reference_links = ibm1_align(t_prob, source, reference)
                    if pools is None or len(reference_links) != len(tgt_words):
                        continue
                    qpool, kpool, content = pools
                    n_out = len(tgt_tokens[b]) - 1
                    word_w = qpool @ w[b, :, :n_out, :len(src_rows[b])] @ kpool  # (H, n_tgt_words, n_src_words + 1)
                    rows = [j for j, r in enumerate(reference_links) if r is not None and r not in punct
                            and j < word_w.shape[1]]
                    if not rows:
                        continue
                    ref_idx = torch.tensor([reference_links[j] for j in rows])
                    raw = word_w[:, rows].argmax(-1)  # (H, n)
                    clean = word_w[:, rows].masked_fill(~content, -1.0).argmax(-1)
                    got = torch.stack([(raw == ref_idx).sum(-1), (clean == ref_idx).sum(-1)], -1)  # (H, 2)
                    hits[kind, layer] = hits.get((kind, layer), 0) + got
                    links[kind, layer] = links.get((kind, layer), 0) + len(rows)
    finally:
        model.train(was_training)
    rows_out, per_block = [], KindDict()  # an old kind spelling (per_sentence["cross", 0]) warns
    for (kind, layer), parts in sorted(shares.items()):
        x = torch.cat(parts).double().numpy()  # (N, H, 4)
        per_block[kind, layer] = x
        mean, lo, hi = bootstrap_ci(x, n_resamples=n_bootstrap, seed=seed)  # (H, 4) each
        sink = x[..., :3].sum(-1)  # (N, H)
        smean, slo, shi = bootstrap_ci(sink, n_resamples=n_bootstrap, seed=seed)
        got = hits.get((kind, layer))
        for h in range(x.shape[1]):
            row: dict[str, Any] = {"kind": kind, "layer": layer, "head": h}
            for c, name in enumerate(CATEGORIES):
                row[name], row[f"{name}_lo"], row[f"{name}_hi"] = mean[h, c], lo[h, c], hi[h, c]
            row["sink"], row["sink_lo"], row["sink_hi"] = smean[h], slo[h], shi[h]
            n = links.get((kind, layer), 0)
            row["align_raw"] = float(got[h, 0]) / n if got is not None and n else math.nan
            row["align_content"] = float(got[h, 1]) / n if got is not None and n else math.nan
            rows_out.append(row)
    table = pd.DataFrame(rows_out)
    table["ablated"] = False
    audit = SinkAudit(table=table, per_sentence=per_block, n_sentences=len(pairs))
    if ablate:
        audit.ablation = _ablation(model, tokenizer, pairs, table, sink_threshold, ablation_mode, max_extra, seed,
                                   batch_size)
        if audit.ablation.get("heads"):
            picked = set(map(tuple, audit.ablation["heads"]))
            table["ablated"] = [(k, int(lay), int(h)) in picked for k, lay, h in
                                zip(table["kind"], table["layer"], table["head"], strict=True)]
    audit.seconds = time.perf_counter() - start
    return audit


def _ablation(model: nn.Module, tokenizer: Any, pairs: list[tuple[str, str]], table: pd.DataFrame,
              threshold: float, mode: str, max_extra: int, seed: int, batch_size: int) -> dict[str, Any]:
    from workbench.inspect.intervene import attention_blocks, head_means
    from workbench.inspect.lens import text_batches

    if not attention_blocks(model):
        return {"skipped": f"{type(model).__name__} has no multi-head blocks to switch off (one attention, one head)"}
    heads_table = table[table["kind"].isin(ATTENTION_KINDS)]
    heavy = heads_table[heads_table["sink"] >= threshold]
    heads = [(k, int(lay), int(h)) for k, lay, h in zip(heavy["kind"], heavy["layer"], heavy["head"], strict=True)]
    sources, refs = [s for s, _ in pairs], [t for _, t in pairs]
    means = head_means(model, text_batches(tokenizer, pairs, batch_size, next(model.parameters()).device)) \
        if mode == "mean" and heads else None
    before = _bleu_with(model, tokenizer, sources, refs, [], mode, means, max_extra)
    out: dict[str, Any] = {"threshold": threshold, "mode": mode, "heads": heads, "n_heads": len(heads),
                           "n_heads_total": len(heads_table), "bleu": before}
    if not heads:
        return out
    after = _bleu_with(model, tokenizer, sources, refs, heads, mode, means, max_extra)
    others = heads_table[heads_table["sink"] < threshold]
    rng = np.random.default_rng(seed)
    control: list = []
    if len(others) >= len(heads):
        pick = rng.choice(len(others), size=len(heads), replace=False)
        control = [(others["kind"].iloc[i], int(others["layer"].iloc[i]), int(others["head"].iloc[i])) for i in pick]
    out.update(bleu_ablated=after, delta=after - before)
    if control:
        if mode == "mean" and means is None:
            means = head_means(model, text_batches(tokenizer, pairs, batch_size, next(model.parameters()).device))
        control_bleu = _bleu_with(model, tokenizer, sources, refs, control, mode, means, max_extra)
        out.update(control_heads=control, bleu_control=control_bleu, delta_control=control_bleu - before)
    return out
