"""Minimal pairs for "what carries the pronoun": German sentences that differ in their gendered words.

Three kinds of pair, all made from real Multi30k sentences:

* ``"possessive"``: one possessive swapped (``seinem`` <-> ``ihrem``, every ending), the rest untouched;
* ``"subject"``: the person swapped (``Ein Mann`` <-> ``Eine Frau``, articles and one adjective's ending
  following: ``Ein junger Mann`` <-> ``Eine junge Frau``, ``einem Mann`` <-> ``einer Frau`` ...) together with
  every possessive and ``er`` -> ``sie``, in sentences that mention one man or one woman and nobody else gendered;
* ``"number"``: a sentence-initial singular subject made plural with its verb (``Ein kleiner Hund rennt`` <->
  ``Zwei kleine Hunde rennen``, ``Die Frau sitzt`` <-> ``Die Frauen sitzen``, a verb joined by ``und`` too), in
  sentences without a comma or a third-person pronoun. A plural verb is used only when it occurs as a word in the
  sentences searched (``rennt`` -> ``rennen``; strong verbs from a table: ``liest`` -> ``lesen``).

A pair is kept only when the two sources have the same number of subword tokens and the translator renders the
swap: its two greedy translations agree up to the first pronoun except in swapped words (man/woman, boy/girl;
none for possessive pairs), and that pronoun is the masculine one (his, he) on one side and the feminine one (her,
she) on the other. What follows the pronoun is not compared: the metric never reads it. The *clean* side is always the masculine one, so
every pair's metric is ``logit(his) - logit(her)`` (or he/she) at the first pronoun, read with each side's decoder
fed its own translation prefix (the same prefix for possessive pairs, "A man" / "A woman" for subject pairs).
Number pairs follow the same rule with singular and plural in place of masculine and feminine: the prefixes may
differ in swapped words (A/Two, man/men, dog/dogs), the contrast is the first number-marked word (is/are, was/were,
has/have, his/their, he/they ...), and the clean side is the singular one.

:func:`bootstrap_ci` gives percentile bootstrap intervals over pairs, for the lesson's averaged results.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from workbench.errors import DataError

__all__ = ["KINDS", "NUMBER_SUBJECT", "PronounPair", "bootstrap_ci", "build_pronoun_pairs", "candidate_swaps",
           "resampled_interval"]

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
# singular/plural: German nouns (singular -> plural, gender), the English words the prefixes may swap, the contrast
NUMBER_NOUNS = {
    "Mann": ("Männer", "m"), "Frau": ("Frauen", "f"), "Junge": ("Jungen", "m"), "Mädchen": ("Mädchen", "n"),
    "Kind": ("Kinder", "n"), "Hund": ("Hunde", "m"), "Person": ("Personen", "f"), "Herr": ("Herren", "m"),
    "Dame": ("Damen", "f"), "Katze": ("Katzen", "f"), "Pferd": ("Pferde", "n"), "Vogel": ("Vögel", "m"),
    "Baby": ("Babys", "n"), "Typ": ("Typen", "m"), "Polizist": ("Polizisten", "m"), "Tourist": ("Touristen", "m"),
    "Koch": ("Köche", "m"), "Mensch": ("Menschen", "m"), "Sportler": ("Sportler", "m"),
    **{n: (n, "m") for n in ("Arbeiter", "Bauarbeiter", "Spieler", "Radfahrer", "Fahrer", "Musiker", "Künstler",
                             "Tänzer", "Sänger", "Läufer", "Schwimmer", "Kellner", "Lehrer", "Schüler", "Surfer",
                             "Reiter", "Skateboarder", "Snowboarder", "Fußballspieler", "Tennisspieler",
                             "Basketballspieler", "Motorradfahrer", "Bergsteiger", "Kletterer", "Verkäufer")},
}
# strong and irregular verbs: third person singular -> plural (the rest: stem + en / n, checked against the corpus)
STRONG_VERBS = {"ist": "sind", "hat": "haben", "liest": "lesen", "isst": "essen", "sieht": "sehen", "gibt": "geben",
                "nimmt": "nehmen", "spricht": "sprechen", "wirft": "werfen", "hilft": "helfen", "tritt": "treten",
                "fährt": "fahren", "läuft": "laufen", "trägt": "tragen", "hält": "halten", "schläft": "schlafen",
                "fällt": "fallen", "lässt": "lassen", "wäscht": "waschen", "fängt": "fangen", "schlägt": "schlagen",
                "bläst": "blasen", "gräbt": "graben", "wächst": "wachsen", "tut": "tun", "weiß": "wissen",
                "steht": "stehen", "geht": "gehen", "sitzt": "sitzen", "trifft": "treffen", "bricht": "brechen",
                "stößt": "stoßen", "brät": "braten", "lädt": "laden", "schiebt": "schieben", "zieht": "ziehen"}
# uninflected words ending in -t that are not verbs
NOT_VERBS = frozenset({"rot", "bunt", "alt", "weit", "leicht", "nackt", "hart", "kalt", "breit", "gestreift",
                       "bemalt", "gut", "jetzt", "nicht", "fast", "mit", "bekleidet", "gekleidet", "verkleidet",
                       "zuerst", "selbst", "seit", "bereit", "geöffnet", "geschminkt", "gepunktet", "kariert"})
NUMBER_TARGET_SWAPS = {("a", "two"), ("an", "two"), ("one", "two"), ("man", "men"), ("woman", "women"),
                       ("child", "children"), ("person", "people"), ("gentleman", "gentlemen"), ("lady", "ladies"),
                       ("policeman", "policemen"), ("baby", "babies"), ("is", "are"), ("was", "were"),
                       ("has", "have"), *((w, w + "s") for w in (
                           "boy", "girl", "kid", "dog", "worker", "player", "cyclist", "biker", "rider", "driver",
                           "musician", "artist", "dancer", "singer", "runner", "swimmer", "officer", "cat", "horse",
                           "bird", "student", "tourist", "skateboarder", "snowboarder", "surfer", "guy", "waiter",
                           "cook", "chef", "teacher", "athlete", "climber", "vendor", "puppy", "male", "female"))}
NUMBER_CONTRASTS = {("is", "are"), ("was", "were"), ("has", "have"), ("his", "their"), ("he", "they"),
                    ("her", "their"), ("she", "they"), ("its", "their"), ("him", "them")}
KINDS = ("possessive", "subject", "number")
_WORD = re.compile(r"\w+|[^\w\s]+")
GENDERED = re.compile(r"\b(" + "|".join(sorted(NOUNS, key=len, reverse=True)) + r"|Männer|Frauen|Herrn|sie|Sie|er|Er)\b")


@dataclass(frozen=True)
class PronounPair:
    """One minimal pair with the model's translations.

    ``clean_src`` / ``corrupt_src`` are source ids (eos included) of equal length; ``tgt`` / ``corrupt_tgt`` the
    decoder inputs (bos + each side's translation prefix, of equal length), ``pos`` the row of the logits whose next token is the pronoun,
    ``good`` / ``bad`` the pronoun ids; ``edit`` the source positions that differ.
    """

    kind: str  # "possessive", "subject" or "number"
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


NUMBER_SUBJECT = re.compile(r"^(Ein|Eine|Der|Die|Das)\s+((?:\w+?(?:er|es|e)\s+){0,2})(\w+)\b")
_BLOCKS_NUMBER = re.compile(r",|\b(er|Er|sie|Sie|sein\w*|ihr\w*|Ihr\w*|es|Es)\b")


def _plural_verb(word: str, verbs: frozenset[str] | None) -> str | None:
    """The plural of a third-person singular verb form, or None when it is not one (or not known)."""
    if word in STRONG_VERBS:
        return STRONG_VERBS[word]
    if not word.endswith("t") or word in NOT_VERBS or not word.islower() or verbs is None:
        return None
    for plural in (word[:-1] + "en", word[:-1] + "n", word[:-2] + "en"):
        if plural in verbs:
            return plural
    return None


def _swap_number(sentence: str, verbs: frozenset[str] | None) -> tuple[str, str] | None:
    """(singular, plural) versions of a sentence that opens with one person or animal and its verb, or None."""
    m = NUMBER_SUBJECT.match(sentence)
    if m is None or _BLOCKS_NUMBER.search(sentence):
        return None
    art, adjectives, noun = m.group(1), m.group(2).split(), m.group(3)
    if noun not in NUMBER_NOUNS:
        return None
    plural_noun, gender = NUMBER_NOUNS[noun]
    if art.lower() not in {"m": ("ein", "der"), "f": ("eine", "die"), "n": ("ein", "das")}[gender]:
        return None  # the article does not agree with the noun (or the noun is not the subject)
    definite = art in ("Der", "Die", "Das")
    stems = [re.sub(r"(er|es|e)$", "", a) for a in adjectives]
    phrase = " ".join(["Die" if definite else "Zwei", *(st + ("en" if definite else "e") for st in stems),
                       plural_noun])
    rest = sentence[m.end():]
    words = list(re.finditer(r"\w+", rest))
    verb_at = next((j for j, w in enumerate(words) if _plural_verb(w.group(), verbs) is not None), None)
    if verb_at is None:
        return None
    out, last = [], 0
    for j, w in enumerate(words):
        if j == verb_at or (j > verb_at and words[j - 1].group() == "und"):
            plural = _plural_verb(w.group(), verbs)
            if plural is not None:
                out += [rest[last:w.start()], plural]
                last = w.end()
            elif w.group().endswith("t") and w.group().islower() and w.group() not in NOT_VERBS:
                return None  # "und" + a verb whose plural is not known: the plural side would be wrong
    out.append(rest[last:])
    return sentence, phrase + "".join(out)


def candidate_swaps(sentence: str, verbs: frozenset[str] | None = None) -> list[tuple[str, str, str]]:
    """Every pair made from ``sentence``: (kind, masculine or singular version, feminine or plural version).

    ``"possessive"``: one pair per possessive, that word alone swapped (a feminine original gives the pair whose
    masculine side is the edited sentence). ``"subject"``: at most one pair, see the module's description.
    ``"number"``: at most one pair; ``verbs`` is the set of words a regular plural verb must be found in (without
    it only the verbs of ``STRONG_VERBS`` are made plural).
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
    number = _swap_number(sentence, verbs)
    if number is not None:
        out.append(("number", *number))
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
                        max_extra: int = 20, limit_per_kind: Mapping[str, int] | None = None,
                        round_size: int = 512) -> list[PronounPair]:
    """Minimal pairs the model translates correctly both ways, from ``(split, German sentence)`` items.

    Candidates are checked in rounds of ``round_size``, in the order of ``sentences``, until every kind has its
    quota (or the sentences run out): a small quota costs only the rounds it needs.

    Args:
        sentences: where to look, e.g. the val and test sources tagged with their split.
        kinds: which pairs to make (``"possessive"``, ``"subject"``, ``"number"``).
        limit: stop after this many pairs in all (None: all).
        max_extra: greedy output budget beyond the source length.
        limit_per_kind: at most this many pairs of a kind (a kind not named: no limit of its own).
        round_size: candidates decoded per round.

    Returns:
        The kept pairs, in the order of ``sentences``; no two of a kind share a clean source.
    """
    for kind in [*kinds, *(limit_per_kind or {})]:
        if kind not in KINDS:
            raise DataError(f"unknown pair kind {kind!r}: choose from {KINDS}")
    if round_size < 1:
        raise DataError(f"round_size={round_size!r} must be at least 1, e.g. 512")
    tables = {kind: _kind_tables(tokenizer, kind) for kind in kinds}
    for kind, (_, contrasts) in tables.items():
        if not contrasts:
            raise DataError(f"the target vocabulary has no single token for the contrasts of {kind!r} pairs "
                            "(his/her, he/she; is/are ...): these pairs need them")
    # a regular plural verb is accepted only when it occurs as a word in the sentences searched
    verbs = frozenset(w for _, sentence in sentences for w in re.findall(r"\w+", sentence) if w.islower())
    quota = {kind: (limit_per_kind or {}).get(kind) for kind in kinds}
    cands, seen = [], set()
    for split, sentence in sentences:
        for kind, masc, fem in candidate_swaps(sentence, verbs):
            if kind not in kinds or (kind, masc, fem) in seen:
                continue
            seen.add((kind, masc, fem))
            a, b = tokenizer.encode_src([masc, fem])
            if len(a) == len(b) and a != b:
                cands.append((split, kind, masc, fem, a, b))
    model.eval()
    pairs: list[PronounPair] = []
    count = dict.fromkeys(kinds, 0)
    for start in range(0, len(cands), round_size):
        todo = [c for c in cands[start:start + round_size] if quota[c[1]] is None or count[c[1]] < quota[c[1]]]
        for p in _check(model, tokenizer, todo, tables, max_extra):  # in the order of ``sentences``
            if quota[p.kind] is None or count[p.kind] < quota[p.kind]:
                pairs.append(p)
                count[p.kind] += 1
        if limit is not None and len(pairs) >= limit:
            break
        if all(q is not None and count[k] >= q for k, q in quota.items()):
            break
    return pairs[:limit] if limit is not None else pairs


def _kind_tables(tokenizer, kind: str) -> tuple[dict[int, int], dict[int, set[int]]]:
    """(prefix swaps: clean token -> corrupted token, contrasts: clean token -> corrupted tokens) of one kind."""
    prefix_words = {"possessive": set(), "subject": TARGET_SWAPS, "number": NUMBER_TARGET_SWAPS}[kind]
    contrast_words = NUMBER_CONTRASTS if kind == "number" else PRONOUN_SWAPS
    swaps = {(a, b) for m, f in prefix_words for a in _target_ids(tokenizer, m) for b in _target_ids(tokenizer, f)}
    prefix = dict(sorted(swaps, reverse=True))  # one counterpart per clean token
    contrasts: dict[int, set[int]] = {}
    for m, f in contrast_words:
        for x in _target_ids(tokenizer, m):
            contrasts.setdefault(x, set()).update(_target_ids(tokenizer, f))
    return prefix, {x: ys for x, ys in contrasts.items() if ys}


def _check(model: nn.Module, tokenizer, cands: list, tables: dict, max_extra: int) -> list[PronounPair]:
    """The candidates the model translates correctly both ways, in their order."""
    if not cands:
        return []
    # the clean side is translated greedily; it must contain a contrast word (his or he; is, are ...)
    order = sorted(range(len(cands)), key=lambda j: len(cands[j][4]))  # batches of similar length: less padding
    decoded = _greedy(model, tokenizer, [cands[j][4] for j in order], max_extra)
    clean_out: list[list[int]] = [[] for _ in cands]
    for j, out in zip(order, decoded, strict=True):
        clean_out[j] = out
    todo = []
    for i, (_, kind, _, _, _, _) in enumerate(cands):
        prefix_swaps, contrasts = tables[kind]
        oa = clean_out[i]
        k = next((t for t, x in enumerate(oa) if x in contrasts), None)
        if k is not None:
            todo.append((i, k, [prefix_swaps.get(x, x) for x in oa[:k]]))
    # the corrupted side must translate, token by token, into the same prefix with the swappable words swapped and
    # then the contrast word: checked under teacher forcing, which is what greedy decoding does while the argmaxes agree
    pairs: list[PronounPair] = []
    device = next(model.parameters()).device
    for start in range(0, len(todo), 64):
        chunk = todo[start:start + 64]
        src = _pad([cands[i][5] for i, _, _ in chunk], model.pad_id)
        tgt = _pad([[tokenizer.bos_id, *prefix] for _, _, prefix in chunk], model.pad_id)
        with torch.no_grad():
            argmax = model(src.to(device), tgt.to(device)).argmax(-1).cpu()  # (N, T)
        for row, (i, k, prefix) in enumerate(chunk):
            split, kind, masc, fem, a, b = cands[i]
            oa = clean_out[i]
            if argmax[row, :k].tolist() != prefix or int(argmax[row, k]) not in tables[kind][1][oa[k]]:
                continue
            pairs.append(PronounPair(
                kind=kind, split=split, clean_text=masc, corrupt_text=fem, clean_src=tuple(a), corrupt_src=tuple(b),
                tgt=(tokenizer.bos_id, *oa[:k]), corrupt_tgt=(tokenizer.bos_id, *prefix), pos=k, good=oa[k],
                bad=int(argmax[row, k]), edit=tuple(t for t, (x, y) in enumerate(zip(a, b, strict=True)) if x != y),
                translation=tokenizer.decode_tgt([oa])[0]))
    rank = {i: r for r, i in enumerate(i for i, _, _ in todo)}
    index = {(c[1], c[2], c[3]): j for j, c in enumerate(cands)}
    return sorted(pairs, key=lambda p: rank[index[(p.kind, p.clean_text, p.corrupt_text)]])


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
    idx = np.random.default_rng(seed).integers(0, x.shape[0], size=(n_resamples, x.shape[0]))  # (R, N)
    return resampled_interval(x, idx, level)


def resampled_interval(values: np.ndarray, resamples: np.ndarray, level: float = 0.95
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over the first axis and the percentile interval of the means of given resamples: (mean, low, high).

    Each row of ``resamples`` names N rows of ``values`` (drawn with replacement); the interval runs from the
    ``(1 - level) / 2`` to the ``(1 + level) / 2`` quantile of the R resampled means (linear interpolation, numpy's
    default). :func:`bootstrap_ci` draws the resamples from its seed.

    Shapes:
        values (N, ...), resamples (R, N) integers in 0..N-1 -> three arrays of shape (...)
    """
    x = np.asarray(values, dtype=float)
    means = x[np.asarray(resamples)].mean(axis=1)  # (R, ...): the mean over pairs of each resample
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2], axis=0)
    return x.mean(axis=0), lo, hi
