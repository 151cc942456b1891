"""Translate one sentence and capture every attention pattern of it, and export them to bertviz.

The translate-and-capture step of the notebooks and the :class:`~workbench.viz.widgets.AttentionInspector`: it uses
the capture side door (:func:`workbench.inspect.capture.capture_attention`) on one teacher-forced pass over the model's
own output, so the patterns belong to the translation the reader sees.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from workbench.errors import InputTextError
from workbench.inspect.capture import AttentionCache, capture_attention
from workbench.model.sites import ATTENTION_KINDS, kind_name
from workbench.translation.decode import DECODING, beam_search, greedy_decode


@dataclass
class Inspection:
    """One sentence translated, with every attention pattern of the teacher-forced pass over the output."""

    source: str  # the input sentence
    translation: str  # the detokenized output
    src_tokens: list[str]  # subword tokens of the source (eos included): encoder keys and queries
    tgt_tokens: list[str]  # decoder input tokens (bos, y1 .. y_{n-1}): decoder queries and self-attention keys
    out_tokens: list[str]  # the token each decoder position produced (y1 .. yn, eos included)
    cache: AttentionCache  # cache["enc.self" | "dec.self" | "dec.cross", layer] -> (1, H, Tq, Tk)
    src_ids: list[int] = field(default_factory=list)  # ids of src_tokens
    out_ids: list[int] = field(default_factory=list)  # ids of out_tokens (y1 .. yn, eos); decoder input: [bos, *out_ids[:-1]]

    def weights(self, kind: str, layer: int) -> Tensor:
        """One layer's weights, ``kind`` in ``("enc.self", "dec.self", "dec.cross")``. Shapes: -> (H, Tq, Tk)."""
        return self.cache[kind, layer][0]

    def axes(self, kind: str) -> tuple[list[str], list[str]]:
        """(query labels, key labels) for an attention kind (``"enc.self"``, ``"dec.self"``, ``"dec.cross"``)."""
        kind = kind_name(kind, ATTENTION_KINDS, what="attention kind")
        if kind == "enc.self":
            return self.src_tokens, self.src_tokens
        if kind == "dec.self":
            return self.tgt_tokens, self.tgt_tokens
        return self.out_tokens, self.src_tokens


@torch.no_grad()
def inspect_translation(model: nn.Module, tokenizer: Any, sentence: str, beam: int = 1,
                        max_extra: int = DECODING.max_extra) -> Inspection:
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

    bertviz needs the network: its views load require.js, d3 and jQuery from a CDN when displayed, so offline (and in
    some JupyterLab set-ups) they stay blank. The offline alternative draws the same lines between tokens in plotly:
    :func:`workbench.viz.figures.head_lines` (or :func:`~workbench.viz.figures.head_grid`, or the
    ``AttentionInspector`` widget).

    Example:
        ``bertviz.head_view(**to_bertviz(insp.cache, insp.src_tokens, insp.tgt_tokens))``
    """
    def layers(kind: str) -> tuple[Tensor, ...]:
        stacked = tuple(cache[kind, i][:1] for i in cache.layers(kind))  # each (1, H, Tq, Tk)
        if not stacked:
            raise KeyError(f"no {kind!r} attention captured: run the model inside capture_attention(model)")
        return stacked

    enc, dec, cross = layers("enc.self"), layers("dec.self"), layers("dec.cross")
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
