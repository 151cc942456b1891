"""Exercises of notebook 08 (subwords and batches): splitting a word by BPE merges applied in learned order, and the
padding a batching costs, checked against :func:`workbench.lessons.bpe.apply_merges` and
:func:`~workbench.lessons.bpe.padding_stats`."""

from __future__ import annotations

from itertools import pairwise

from workbench.lessons.bpe import apply_merges, padding_stats
from workbench.lessons.exercises.core import Case, Exercise, Mistake, register

PACKAGE = ("workbench.lessons.bpe.apply_merges", "workbench.lessons.bpe.learn_merges",
           "workbench.lessons.bpe.padding_stats")

# merges in learned order, chosen so that the order matters: "▁t"+"he" is learned after "h"+"e" and "t"+"h",
# "e"+"r" before "▁"+"t", and a longest-match split differs from the merge order on "▁there" and "▁other"
MERGES = [("h", "e"), ("t", "h"), ("e", "r"), ("▁", "t"), ("th", "e"), ("▁t", "he"), ("▁", "a"), ("i", "n"),
          ("▁a", "n"), ("o", "th"), ("he", "r"), ("a", "a")]
WORDS = ["▁the", "▁there", "▁other", "▁another", "▁thin", "▁a", "▁her", "▁aaaa", "▁", "x"]


def over_words(fn, words: list[str], merges: list[tuple[str, str]]) -> list[list[str]]:
    """``fn(word, merges)`` for every word, as lists of strings."""
    return [list(fn(w, merges)) for w in words]


def _merge_cases() -> list[Case]:
    return [Case("10 words, 12 merges", (WORDS, MERGES)),
            Case("no merges", (["▁ab", "c"], [])),
            Case("length 1 words", (["a", "▁"], [("▁", "a")]))]


ALPHABET = "▁abe"


def _merge_draw(rng) -> Case:
    """Merges learned from random words over a 4-letter alphabet (so pairs repeat and compete), then new words."""
    from workbench.lessons.bpe import learn_merges

    texts = [" ".join("".join(rng.choice("abe") for _ in range(rng.randint(1, 6))) for _ in range(rng.randint(1, 5)))
             for _ in range(12)]
    merges = list(learn_merges(texts, vocab_size=rng.randint(6, 20), min_frequency=1).merges)
    words = ["▁" + "".join(rng.choice("abe") for _ in range(rng.randint(0, 8))) for _ in range(6)]
    return Case(f"{len(merges)} merges learned from random words", (words, merges))


def _longest_match(word, merges):
    """WordPiece's rule: the longest known piece from the left."""
    vocab = set(word) | {a + b for a, b in merges}
    out, i = [], 0
    while i < len(word):
        j = len(word)
        while j > i + 1 and word[i:j] not in vocab:
            j -= 1
        out.append(word[i:j])
        i = j
    return out


def _latest_first(word, merges):
    return apply_merges(word, list(reversed(merges)))


def _one_pass_first_occurrence(word, merges):
    symbols = list(word)
    for a, b in merges:
        for i, pair in enumerate(pairwise(symbols)):
            if pair == (a, b):
                symbols[i: i + 2] = [a + b]
                break
    return symbols


def _leftmost_pair(word, merges):
    """Merge the leftmost pair that any merge knows, whatever its rank."""
    known = set(merges)
    symbols = list(word)
    while True:
        for i, pair in enumerate(pairwise(symbols)):
            if pair in known:
                symbols[i: i + 2] = [pair[0] + pair[1]]
                break
        else:
            return symbols


register(Exercise(
    "08.apply_merges", "split a word by applying the BPE merges in the order they were learned", apply_merges,
    _merge_cases, driver=over_words, draw=_merge_draw, package=PACKAGE,
    mistakes=(
        Mistake("longest known piece first", "that is WordPiece's rule: BPE merges the adjacent pair learned earliest, "
                "round after round, whatever the pieces' lengths", _longest_match),
        Mistake("latest merge first", "merges are ranked by when they were learned: the earliest (most frequent "
                "at the time) applies first", _latest_first),
        Mistake("each merge applied once", "a merge applies wherever its pair occurs, and again after later merges "
                "create it: repeat until no known pair is left", _one_pass_first_occurrence),
        Mistake("leftmost known pair first", "among the adjacent pairs, merge the one learned earliest, not the "
                "leftmost", _leftmost_pair),
    )))


# -- padding_stats ----------------------------------------------------------------------------------------------
def _pad_cases() -> list[Case]:
    src, tgt = [3, 9, 4, 4, 12, 1], [5, 7, 5, 3, 10, 2]
    return [Case("3 batches, two sides", ([[0, 1], [2, 3], [4, 5]], src, tgt)),
            Case("sorted by length, one side", ([[5, 0], [2, 3], [1, 4]], src)),
            Case("one batch of 1", ([[4]], src, tgt)),
            Case("an empty batch among others", ([[0, 1], [], [2]], src, tgt)),
            Case("no batches at all: no slots", ([], src))]


def _pad_draw(rng) -> Case:
    n = rng.randint(1, 20)
    order = list(range(n))
    rng.shuffle(order)
    size = rng.randint(1, 6)
    batches = [order[i: i + size] for i in range(0, n, size)]
    sides = [[rng.randint(1, 40) for _ in range(n)] for _ in range(rng.randint(1, 3))]
    return Case(f"{n} examples in batches of {size}, {len(sides)} side(s)", (batches, *sides))


def _pad(batches, *lengths, to="batch", per="slots", sides="all"):
    """A parametrised padding count, for writing the planted mistakes."""
    use = lengths[:1] if sides == "first" else lengths
    real = sum(side[i] for side in use for b in batches for i in b)
    if to == "corpus":
        slots = sum(len(b) * max(side) for side in use for b in batches if b)
    else:
        slots = sum(len(b) * max(side[i] for i in b) for side in use for b in batches if b)
    frac = (slots - real) / (real if per == "real" else slots) if slots else 0.0
    return {"real": float(real), "slots": float(slots), "padding_fraction": frac, "batches": float(len(batches))}


register(Exercise(
    "08.padding_stats", "real tokens, padded slots and the padding fraction of a batching", padding_stats,
    _pad_cases, draw=_pad_draw, package=PACKAGE, atol=1e-12, rtol=1e-9,
    mistakes=(
        Mistake("padded to the longest in the corpus", "each batch is padded to its own longest member: "
                "len(batch) x max length in that batch", lambda b, *ls: _pad(b, *ls, to="corpus")),
        Mistake("padding divided by real tokens", "the padding fraction is the share of slots that are padding: "
                "(slots - real) / slots", lambda b, *ls: _pad(b, *ls, per="real")),
        Mistake("only the first side counted", "sum over every side given (source and target are padded apart)",
                lambda b, *ls: _pad(b, *ls, sides="first")),
    )))
