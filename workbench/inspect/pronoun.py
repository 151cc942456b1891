"""Where the heads look from a pronoun: the study notes' "The animal didn't cross the street because it was too
tired" question asked of a German sentence with a pronoun after its antecedent (notebook 10).

Two places are read: **encoder self-attention** from the German pronoun (which source words build its vector) and
**cross-attention** from the decoder position that emits the English pronoun (which source words each head reads
while the model writes "he", "her", "they", ...). The measure is the weight each head puts on the antecedent's
subword tokens, against the share a head spreading its weight evenly over the source would give them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from workbench.errors import InputTextError
from workbench.inspect.align import word_spans
from workbench.inspect.inspection import Inspection, inspect_translation
from workbench.model.sites import KindDict

EN_PRONOUNS = frozenset({"he", "she", "it", "they", "him", "her"})
KINDS = ("enc.self", "dec.cross")


def words_of(tokens: Sequence[str]) -> tuple[list[int], list[str]]:
    """The word index of every subword token (-1 for specials) and the words, lower-cased, punctuation stripped."""
    spans, words = word_spans(tokens), {}
    for t, w in zip(tokens, spans, strict=True):
        if w >= 0:
            words[w] = words.get(w, "") + t.replace("▁", "")
    return spans, [words[w].strip(".,;:!?\"'").lower() for w in range(len(words))]


def english_pronouns(text: str) -> list[str]:
    """The English pronouns of :data:`EN_PRONOUNS` in ``text``, sorted (lower-cased, punctuation stripped)."""
    return sorted({w.strip(".,;:!?\"'").lower() for w in text.split()} & EN_PRONOUNS)


@dataclass(frozen=True)
class PronounReading:
    """How the heads of one translation read the antecedent from the pronoun.

    Shapes:
        on_antecedent[kind], most_read_word[kind]: (L, H); best_cross_row: (T_out, S)
    """

    inspection: Inspection  # the translation, its tokens and its attention
    src_words: list[str]  # the source words, lower-cased
    antecedent_tokens: list[int]  # source positions of the antecedent's subwords
    antecedent_word: int  # index of the antecedent in src_words
    de_query: int  # source position of the German pronoun's first subword
    en_query: int  # output position that emits the English pronoun
    pronoun_emitted: str  # that English pronoun
    uniform: float  # the antecedent's share under uniform attention over the source
    on_antecedent: dict[str, Tensor]  # kind -> weight each head puts on the antecedent, from the pronoun
    most_read_word: dict[str, Tensor]  # kind -> index (in src_words) of the word each head reads most

    def stats(self, kind: str) -> dict[str, Any]:
        """Largest and mean weight on the antecedent, the head with the largest, and how many heads read it most."""
        w = self.on_antecedent[kind]
        layer, head = divmod(int(w.argmax()), w.shape[1])
        return {"max": float(w.max()), "mean": float(w.mean()), "best_head": [layer, head],
                "heads_reading_antecedent_most": int((self.most_read_word[kind] == self.antecedent_word).sum())}

    def best_cross_row(self) -> Tensor:
        """The cross-attention head with the largest weight on the antecedent, on every output token: (T_out, S)."""
        layer, head = self.stats("dec.cross")["best_head"]
        return self.inspection.weights("dec.cross", layer)[head]

    def antecedent_weight_elsewhere(self) -> float:
        """That head's mean weight on the antecedent from the output tokens other than the pronoun."""
        row = self.best_cross_row()
        others = torch.cat([row[: self.en_query], row[self.en_query + 1 :]])  # (T_out - 1, S)
        return float(others[:, self.antecedent_tokens].sum(-1).mean()) if len(others) else float("nan")


def pronoun_attention(model: nn.Module, tokenizer: Any, sentence: str, antecedent: str,
                      pronoun: str) -> PronounReading:
    """Translate ``sentence`` and measure every encoder and cross-attention head from the pronoun to its antecedent.

    Args:
        sentence: a source sentence with ``pronoun`` after ``antecedent`` (whole words, any case).
        antecedent: the word the pronoun refers to; ``pronoun``: its first occurrence after ``antecedent`` is read.

    Raises:
        InputTextError: the antecedent or the pronoun is not a word of the sentence (in that order), or the
            translation has no English pronoun (the model rephrased it): choose another sentence.
    """
    ins = inspect_translation(model, tokenizer, sentence)
    src_spans, src_words = words_of(ins.src_tokens)
    out_spans, out_words = words_of(ins.out_tokens)
    if antecedent.lower() not in src_words:
        raise InputTextError(f"antecedent {antecedent!r} is not a word of {sentence!r} (words: {src_words}): "
                             "give one of its words")
    ante_w = src_words.index(antecedent.lower())
    if pronoun.lower() not in src_words[ante_w + 1 :]:
        raise InputTextError(f"pronoun {pronoun!r} does not follow {antecedent!r} in {sentence!r}: give a pronoun "
                             "that comes after its antecedent")
    pron_w = src_words.index(pronoun.lower(), ante_w + 1)
    en_w = next((w for w, word in enumerate(out_words) if word in EN_PRONOUNS), None)
    if en_w is None:
        raise InputTextError(f"no English pronoun in the translation {ins.translation!r}: choose a sentence the model "
                             "renders with one")
    ante = [i for i, w in enumerate(src_spans) if w == ante_w]
    de_q, en_q = src_spans.index(pron_w), out_spans.index(en_w)
    rows = {"enc.self": (de_q, len(ins.cache.layers("enc.self"))), "dec.cross": (en_q, len(ins.cache.layers("dec.cross")))}
    on_ante, most = KindDict(), KindDict()  # kind -> (L, H); an old kind spelling ("cross") warns
    for kind, (q, n_layers) in rows.items():
        w = torch.stack([ins.weights(kind, layer)[:, q] for layer in range(n_layers)])  # (L, H, S)
        on_ante[kind] = w[..., ante].sum(-1)  # (L, H)
        by_word = torch.stack([w[..., [i for i, s in enumerate(src_spans) if s == k]].sum(-1)
                               for k in range(len(src_words))], -1)  # (L, H, words)
        most[kind] = by_word.argmax(-1)  # (L, H)
    return PronounReading(inspection=ins, src_words=src_words, antecedent_tokens=ante, antecedent_word=ante_w,
                          de_query=de_q, en_query=en_q, pronoun_emitted=out_words[en_w],
                          uniform=len(ante) / len(ins.src_tokens), on_antecedent=on_ante, most_read_word=most)
