"""Minimal pairs for "what carries the pronoun": German sentences that differ in their gendered words.

Two kinds of pair, both made from real Multi30k sentences:

* ``"possessive"``: one possessive swapped (``seinem`` <-> ``ihrem``, every ending), the rest untouched;
* ``"subject"``: the person swapped (``Ein Mann`` <-> ``Eine Frau``, articles and one adjective's ending
  following: ``Ein junger Mann`` <-> ``Eine junge Frau``, ``einem Mann`` <-> ``einer Frau`` ...) together with
  every possessive and ``er`` -> ``sie``, in sentences that mention one man or one woman and nobody else gendered.

A pair is kept only when the two sources have the same number of subword tokens and the translator renders the
swap: its two greedy translations agree up to the first pronoun except in swapped words (man/woman, boy/girl;
none for possessive pairs), and that pronoun is the masculine one (his, he) on one side and the feminine one (her,
she) on the other. What follows the pronoun is not compared: the metric never reads it. The *clean* side is always the masculine one, so
every pair's metric is ``logit(his) - logit(her)`` (or he/she) at the first pronoun, read with each side's decoder
fed its own translation prefix (the same prefix for possessive pairs, "A man" / "A woman" for subject pairs).

:func:`bootstrap_ci` gives percentile bootstrap intervals over pairs, for the lesson's averaged results.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from workbench.errors import DataError

__all__ = ["KINDS", "PronounPair", "bootstrap_ci", "build_pronoun_pairs", "candidate_swaps"]

# masculine -> feminine; possessive endings kept
POSSESSIVES = {f"sein{e}": f"ihr{e}" for e in ("", "e", "em", "en", "er", "es")}
# (masculine article, adjective ending, noun; feminine article, adjective ending, noun): one adjective may stand
# between article and noun, its ending following the article; the nominative rows come first
PHRASES = (
    ("ein", "er", "Mann", "eine", "e", "Frau"), ("der", "e", "Mann", "die", "e", "Frau"),
    ("einem", "en", "Mann", "einer", "en", "Frau"), ("dem", "en", "Mann", "der", "en", "Frau"),
    ("einen", "en", "Mann", "eine", "e", "Frau"), ("den", "en", "Mann", "die", "e", "Frau"),
    ("ein", "er", "Junge", "ein", "es", "Mädchen"), ("der", "e", "Junge", "das", "e", "Mädchen"),
    ("einem", "en", "Jungen", "einem", "en", "Mädchen"), ("dem", "en", "Jungen", "dem", "en", "Mädchen"),
    ("einen", "en", "Jungen", "ein", "es", "Mädchen"), ("den", "en", "Jungen", "das", "e", "Mädchen"),
)
# other people with a masculine and a feminine noun: nominative, dative and accusative after ein/der
PEOPLE = (("Herr", "Dame"), ("Vater", "Mutter"), ("Sohn", "Tochter"), ("Bruder", "Schwester"), ("Koch", "Köchin"),
          ("Freund", "Freundin"), *((n, n + "in") for n in (
              "Arbeiter", "Spieler", "Polizist", "Sänger", "Tänzer", "Läufer", "Künstler", "Musiker", "Kellner",
              "Lehrer", "Schwimmer", "Radfahrer", "Fahrer", "Verkäufer", "Tennisspieler", "Fußballspieler",
              "Basketballspieler", "Turner", "Schüler", "Surfer", "Skateboarder", "Snowboarder", "Reiter")))
PHRASES = PHRASES + tuple((m_art, m_end, masc, f_art, f_end, fem) for masc, fem in PEOPLE
                          for m_art, m_end, _, f_art, f_end, _ in PHRASES[:6])
NOUNS = tuple(sorted({row[2] for row in PHRASES} | {row[5] for row in PHRASES}))
MASCULINE_NOUNS = frozenset(row[2] for row in PHRASES)
# what the two translations may differ in (masculine, feminine), and which of those are pronouns
TARGET_SWAPS = {("man", "woman"), ("boy", "girl"), ("his", "her"), ("he", "she"), ("gentleman", "lady"),
                ("father", "mother"), ("son", "daughter"), ("brother", "sister"), ("waiter", "waitress"),
                ("boyfriend", "girlfriend"), ("friend", "girlfriend")}
PRONOUN_SWAPS = {("his", "her"), ("he", "she")}
KINDS = ("possessive", "subject")
_WORD = re.compile(r"\w+|[^\w\s]+")
GENDERED = re.compile(r"\b(" + "|".join(sorted(NOUNS, key=len, reverse=True)) + r"|Männer|Frauen|Herrn|sie|Sie|er|Er)\b")


@dataclass(frozen=True)
class PronounPair:
    """One minimal pair with the model's translations.

    ``clean_src`` / ``corrupt_src`` are source ids (eos included) of equal length; ``tgt`` / ``corrupt_tgt`` the
    decoder inputs (bos + each side's translation prefix, of equal length), ``pos`` the row of the logits whose next token is the pronoun,
    ``good`` / ``bad`` the pronoun ids; ``edit`` the source positions that differ.
    """

    kind: str  # "possessive" or "subject"
    split: str  # the Multi30k split the sentence comes from
    clean_text: str
    corrupt_text: str
    clean_src: tuple[int, ...]
    corrupt_src: tuple[int, ...]
    tgt: tuple[int, ...]
    corrupt_tgt: tuple[int, ...]
    pos: int
    good: int
    bad: int
    edit: tuple[int, ...]
    translation: str  # the clean side's greedy translation


def _case(new: str, like: str) -> str:
    return new[0].upper() + new[1:] if like[0].isupper() else new


def _swap_possessives(sentence: str, to_feminine: bool) -> tuple[str, int]:
    table = POSSESSIVES if to_feminine else {v: k for k, v in POSSESSIVES.items()}
    count = 0

    def one(m: re.Match) -> str:
        nonlocal count
        count += 1
        return _case(table[m.group().lower()], m.group())

    pattern = r"\b(" + "|".join(sorted(table, key=len, reverse=True)) + r")\b"
    return re.sub(pattern, one, sentence, flags=re.IGNORECASE), count


def _swap_subject(sentence: str) -> tuple[str, str] | None:
    """(masculine, feminine) versions of a sentence that mentions one man, woman, boy or girl, or None.

    A masculine phrase is swapped in any case (its article says which); a feminine or neuter one only when it
    opens the sentence (the nominative: ``eine Frau`` could also be an accusative).
    """
    found = [m.group() for m in GENDERED.finditer(sentence)]
    nouns = [w for w in found if w in NOUNS]
    if len(nouns) != 1:
        return None
    masculine = nouns[0] in MASCULINE_NOUNS
    if any(w in ("sie", "Sie") for w in found) or (not masculine and any(w in ("er", "Er") for w in found)):
        return None  # "sie" may be "they" or another person: never turn it into "er"; a man's "er" becomes "sie"
    for m_art, m_end, m_noun, f_art, f_end, f_noun in PHRASES:
        art, end, noun = (m_art, m_end, m_noun) if masculine else (f_art, f_end, f_noun)
        new_art, new_end, new_noun = (f_art, f_end, f_noun) if masculine else (m_art, m_end, m_noun)
        if noun != nouns[0]:
            continue
        m = re.search(rf"\b({art})\s+(?:(\w+){end}\s+)?{noun}\b", sentence, flags=re.IGNORECASE)
        if m is None or m.group(1).lower() != art or (not masculine and m.start() != 0):
            continue
        stem = m.group(2)
        phrase = _case(new_art, m.group(1)) + (f" {stem}{new_end}" if stem else "") + f" {new_noun}"
        swapped = sentence[:m.start()] + phrase + sentence[m.end():]
        swapped, _ = _swap_possessives(swapped, to_feminine=masculine)
        if masculine:
            swapped = re.sub(r"\b(er|Er)\b", lambda w: _case("sie", w.group()), swapped)
        return (sentence, swapped) if masculine else (swapped, sentence)
    return None


def candidate_swaps(sentence: str) -> list[tuple[str, str, str]]:
    """Every pair made from ``sentence``: (kind, masculine version, feminine version).

    ``"possessive"``: one pair per possessive, that word alone swapped (a feminine original gives the pair whose
    masculine side is the edited sentence). ``"subject"``: at most one pair, see the module's description.
    """
    out = []
    for m in _WORD.finditer(sentence):
        word = m.group()
        low = word.lower()
        fem_to_masc = {v: k for k, v in POSSESSIVES.items()}
        if low in POSSESSIVES:
            out.append(("possessive", sentence, sentence[:m.start()] + _case(POSSESSIVES[low], word) + sentence[m.end():]))
        elif low in fem_to_masc:
            out.append(("possessive", sentence[:m.start()] + _case(fem_to_masc[low], word) + sentence[m.end():], sentence))
    subject = _swap_subject(sentence)
    if subject is not None and subject[0] != subject[1]:
        out.append(("subject", *subject))
    return out


@torch.no_grad()
def _greedy(model: nn.Module, tokenizer, sources: list[list[int]], max_extra: int, batch_size: int = 64) -> list[list[int]]:
    from workbench.translation.decode import greedy_decode

    device = next(model.parameters()).device
    outs: list[list[int]] = []
    for k in range(0, len(sources), batch_size):
        chunk = sources[k:k + batch_size]
        width = max(len(s) for s in chunk)
        src = torch.full((len(chunk), width), model.pad_id, dtype=torch.long)
        for row, ids in enumerate(chunk):
            src[row, :len(ids)] = torch.tensor(ids)
        out = greedy_decode(model, src.to(device), bos_id=tokenizer.bos_id, eos_id=tokenizer.eos_id,
                            max_extra=max_extra)
        for row in out.tolist():
            outs.append(row[:row.index(tokenizer.eos_id) + 1] if tokenizer.eos_id in row else row)
    return outs


def build_pronoun_pairs(model: nn.Module, tokenizer, sentences: Sequence[tuple[str, str]],
                        kinds: Sequence[str] = KINDS, limit: int | None = None,
                        max_extra: int = 20) -> list[PronounPair]:
    """Minimal pairs the model translates correctly both ways, from ``(split, German sentence)`` items.

    Args:
        sentences: where to look, e.g. the val and test sources tagged with their split.
        kinds: which pairs to make (``"possessive"``, ``"subject"``).
        limit: stop after this many pairs (None: all).
        max_extra: greedy output budget beyond the source length.

    Returns:
        The kept pairs, in the order of ``sentences``; no two share a masculine source.
    """
    for kind in kinds:
        if kind not in KINDS:
            raise DataError(f"unknown pair kind {kind!r}: choose from {KINDS}")
    swaps = {(a, b) for m, f in TARGET_SWAPS for a in _target_ids(tokenizer, m) for b in _target_ids(tokenizer, f)}
    pronouns = {(a, b) for m, f in PRONOUN_SWAPS for a in _target_ids(tokenizer, m) for b in _target_ids(tokenizer, f)}
    if not pronouns:
        raise DataError("the target vocabulary has no single token for his/her or he/she: pronoun pairs need them")
    cands, seen = [], set()
    for split, sentence in sentences:
        for kind, masc, fem in candidate_swaps(sentence):
            if kind not in kinds or (masc, fem) in seen:
                continue
            seen.add((masc, fem))
            a, b = tokenizer.encode_src([masc, fem])
            if len(a) == len(b) and a != b:
                cands.append((split, kind, masc, fem, a, b))
    if not cands:
        return []
    order_of = {(c[2], c[3]): j for j, c in enumerate(cands)}
    model.eval()
    # the masculine side is translated greedily; it must contain his or he
    order = sorted(range(len(cands)), key=lambda j: len(cands[j][4]))  # batches of similar length: less padding
    decoded = _greedy(model, tokenizer, [cands[j][4] for j in order], max_extra)
    masc_out: list[list[int]] = [[] for _ in cands]
    for j, out in zip(order, decoded, strict=True):
        masc_out[j] = out
    masc_to_fem = dict(sorted(swaps, reverse=True))  # one feminine counterpart per masculine token
    fem_pronouns: dict[int, set[int]] = {}
    for x, y in pronouns:
        fem_pronouns.setdefault(x, set()).add(y)
    todo = []
    for i, (_, kind, _, _, _, _) in enumerate(cands):
        oa = masc_out[i]
        k = next((t for t, x in enumerate(oa) if x in fem_pronouns), None)
        if k is not None:
            prefix = oa[:k] if kind == "possessive" else [masc_to_fem.get(x, x) for x in oa[:k]]
            todo.append((i, k, prefix))
    # the feminine side must translate, token by token, into the same prefix with the swappable words swapped and
    # then her or she: checked under teacher forcing, which is what greedy decoding does while the argmaxes agree
    pairs: list[PronounPair] = []
    for start in range(0, len(todo), 64):
        chunk = todo[start:start + 64]
        src = _pad([cands[i][5] for i, _, _ in chunk], model.pad_id)
        tgt = _pad([[tokenizer.bos_id, *prefix] for _, _, prefix in chunk], model.pad_id)
        device = next(model.parameters()).device
        with torch.no_grad():
            argmax = model(src.to(device), tgt.to(device)).argmax(-1).cpu()  # (N, T)
        for row, (i, k, prefix) in enumerate(chunk):
            split, kind, masc, fem, a, b = cands[i]
            oa = masc_out[i]
            if argmax[row, :k].tolist() != prefix or int(argmax[row, k]) not in fem_pronouns[oa[k]]:
                continue
            pairs.append(PronounPair(
                kind=kind, split=split, clean_text=masc, corrupt_text=fem, clean_src=tuple(a), corrupt_src=tuple(b),
                tgt=(tokenizer.bos_id, *oa[:k]), corrupt_tgt=(tokenizer.bos_id, *prefix), pos=k, good=oa[k],
                bad=int(argmax[row, k]), edit=tuple(t for t, (x, y) in enumerate(zip(a, b, strict=True)) if x != y),
                translation=tokenizer.decode_tgt([oa])[0]))
    pairs = sorted(pairs, key=lambda p: order_of[(p.clean_text, p.corrupt_text)])
    return pairs[:limit] if limit is not None else pairs


def _pad(rows: list[list[int]], pad_id: int) -> torch.Tensor:
    out = torch.full((len(rows), max(len(r) for r in rows)), pad_id, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, :len(r)] = torch.tensor(r)
    return out  # (N, T)


def _target_ids(tokenizer, word: str) -> set[int]:
    """Ids of the single target tokens spelling ``word`` (lower case or capitalised; none if it takes several)."""
    ids = set()
    for form in (word, word.capitalize()):
        content = tokenizer.encode_tgt([form])[0][1:-1]
        if len(content) == 1:
            ids.add(content[0])
    return ids


def bootstrap_ci(values: Sequence[float] | np.ndarray, n_resamples: int = 2000, level: float = 0.95,
                 seed: int = 0) -> tuple[float, float, float]:
    """Mean and percentile bootstrap interval over the first axis: (mean, low, high).

    Shapes:
        values (N,) or (N, ...) -> floats, or arrays of shape (...) when ``values`` has more axes
    """
    x = np.asarray(values, dtype=float)
    if x.shape[0] < 2:
        raise DataError(f"a bootstrap interval needs at least 2 values, got {x.shape[0]}")
    if not 0 < level < 1:
        raise DataError(f"level={level!r} must lie in (0, 1), e.g. 0.95")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.shape[0], size=(n_resamples, x.shape[0]))
    means = x[idx].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2], axis=0)
    return x.mean(axis=0), lo, hi
