"""Subword tokenizers (HuggingFace ``tokenizers`` BPE) and a whitespace tokenizer for synthetic tasks.

Both share one interface and the special ids ``<pad>`` = 0, ``<unk>`` = 1, ``<bos>`` = 2, ``<eos>`` = 3, the same
on the source and the target side:

* ``encode_src(texts)`` -> ``[x1 .. xn, eos]`` (``add_bos`` / ``add_eos`` to change), ``encode_tgt(texts)`` ->
  ``[bos, y1 .. yn, eos]``; an empty string gives just the specials (``encode_src([""]) == [[eos]]``).
* ``decode_tgt(ids_batch)`` stops at the first eos and skips special tokens, giving detokenized text.
* ``tokens_src(text)`` / ``tokens_tgt(text)``: the string of each position of ``encode_src`` / ``encode_tgt``,
  one to one, for figure labels (``tokens_tgt(y)[:-1]`` labels decoder inputs, ``[1:]`` its predictions).

The BPE tokenizer normalises with NFKC (and turns every run of whitespace into one space, trimming the ends), splits
with the Metaspace pre-tokenizer and joins with the Metaspace decoder, so ``decode(encode(s)) == normalize(s)``:
BLEU is computed on properly detokenized text. It is trained on the pairs it is given (pass the training split
only) and stored inside checkpoints as a plain JSON string (``to_json`` / ``tokenizer_from_json``).

Characters never seen in training become ``<unk>`` (one per character) instead of failing; ``decode_tgt``
drops them like every special token. Text that spells a special token (``"<eos>"``) is encoded as ordinary
characters, never as the control id.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from workbench.errors import CheckpointError, ConfigError, InputTextError
from workbench.translation.files import atomic_write_text

SPECIALS = ("<pad>", "<unk>", "<bos>", "<eos>")
PAD, UNK, BOS, EOS = 0, 1, 2, 3
FORMAT = "attention-workbench-tokenizer"  # tag inside the JSON, to recognise our own files
VERSION = 1
# the largest BPE vocabulary trained: the tokenizers library reserves memory for every entry asked for, and at about
# 10^9 it aborts the whole process (no Python exception); real vocabularies stay far below (the paper's: 37,000)
MAX_VOCAB_SIZE = 1_000_000


# Unicode's invisible format characters (category Cf) that text copied from the web carries: soft hyphen, zero-width
# space and (non-)joiners, direction marks and embeddings, word joiner, invisible operators, byte-order mark
_INVISIBLE = re.compile("[\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff]")


def visible_text(text: str) -> str:
    """``text`` without invisible format characters (a zero-width space is not a word: it would encode as
    ``<unk>``, and a sentence of nothing else is empty)."""
    return _INVISIBLE.sub("", text)


def check_texts(texts: Sequence[str]) -> list[str]:
    """``texts`` as a list of strings, invisible format characters removed (:func:`visible_text`); one string or a
    non-string item is refused with an :class:`InputTextError`."""
    if isinstance(texts, str):
        raise InputTextError(f"pass a list of sentences, not one string: wrap it in a list, e.g. [{texts[:30]!r}]")
    if isinstance(texts, dict):
        raise InputTextError("pass a list of sentences, not a dict (its keys would be translated): pass "
                             "list(d.values()) for its values, or list(d) for its keys")
    if isinstance(texts, (set, frozenset)) or not hasattr(texts, "__iter__"):
        why = " (a set has no order: translations could not be told apart)" if isinstance(texts, (set, frozenset)) else ""
        raise InputTextError(f"pass a list of sentences, not {type(texts).__name__} {texts!r:.40}{why}")
    texts = list(texts)
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise InputTextError(f"sentence {i + 1} (index {i}) is a {type(t).__name__} ({t!r:.40}), not a str: pass text")
        try:
            t.encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate: bytes that were not text, kept by "surrogateescape"
            raise InputTextError(f"sentence {i + 1} (index {i}) holds {t[exc.start]!r} at column {exc.start + 1}, "
                                 "which is not a character: read the text with its real encoding (open(..., "
                                 "encoding=...))") from None
    return [visible_text(t) for t in texts]


def _rows(ids_batch: Any) -> list[list[int]]:
    """A batch of id rows (nested lists, a 2-D tensor or array) as lists of ints."""
    if hasattr(ids_batch, "tolist"):
        ids_batch = ids_batch.tolist()
    if ids_batch and isinstance(ids_batch[0], int):
        raise InputTextError("decode_tgt takes a batch of id rows: wrap a single row in a list, e.g. [ids]")
    return [[int(i) for i in row] for row in ids_batch]


def _content(row: list[int]) -> list[int]:
    """The ids before the first eos, special tokens removed."""
    out = []
    for i in row:
        if i == EOS:
            break
        if i > EOS:
            out.append(i)
    return out


class _Vocab:
    """What both tokenizers share: special ids and the layout of source and target sequences."""

    pad_id, unk_id, bos_id, eos_id = PAD, UNK, BOS, EOS
    joint = True

    def encode_src(self, texts: Sequence[str], add_bos: bool = False, add_eos: bool = True) -> list[list[int]]:
        """Source ids, ``[x1 .. xn, eos]`` by default.

        Args:
            texts: a list of sentences.
            add_bos: start with ``<bos>``.
            add_eos: end with ``<eos>`` (the default; an empty sentence is then just ``[eos]``).

        Raises:
            InputTextError: a single string or a non-string item instead of a list of sentences.
        """
        return [([BOS] if add_bos else []) + ids + ([EOS] if add_eos else []) for ids in self._encode(texts, "src")]

    def encode_tgt(self, texts: Sequence[str]) -> list[list[int]]:
        """Target ids with bos and eos: ``[bos, y1 .. yn, eos]``."""
        return [[BOS, *ids, EOS] for ids in self._encode(texts, "tgt")]

    def tokens_src(self, text: str) -> list[str]:
        """Token strings of a source sentence, one per position of ``encode_src([text])[0]`` (eos included)."""
        return [*self._tokens(text, "src"), "<eos>"]

    def tokens_tgt(self, text: str) -> list[str]:
        """Token strings of a target sentence, one per position of ``encode_tgt([text])[0]`` (bos, eos included)."""
        return ["<bos>", *self._tokens(text, "tgt"), "<eos>"]

    def save(self, path: str | Path) -> None:
        """Write :meth:`to_json` to a UTF-8 file, atomically (:func:`workbench.translation.files.atomic_write`)."""
        atomic_write_text(path, self.to_json())

    @classmethod
    def load(cls, path: str | Path) -> SubwordTokenizer | WordTokenizer:
        """Read a file written by :meth:`save` (either kind of tokenizer)."""
        path = Path(path)
        if path.is_dir():
            raise CheckpointError(f"{path} is a folder: give the tokenizer's file (tokenizer.json in a model folder)")
        if not path.is_file():
            raise CheckpointError(f"tokenizer file {path} does not exist: check the path")
        try:
            return tokenizer_from_json(path.read_text(encoding="utf-8"))
        except UnicodeDecodeError as exc:
            raise CheckpointError(f"{path} is not text ({exc.reason}): give a file written by .save()") from exc

    @classmethod
    def from_json(cls, text: str) -> SubwordTokenizer | WordTokenizer:
        """Rebuild a tokenizer from :meth:`to_json` output (either kind)."""
        return tokenizer_from_json(text)

    # implemented by subclasses
    def _encode(self, texts: Sequence[str], side: str) -> list[list[int]]:  # content ids, no specials
        raise NotImplementedError

    def _tokens(self, text: str, side: str) -> list[str]:
        raise NotImplementedError

    def to_json(self) -> str:
        raise NotImplementedError


class SubwordTokenizer(_Vocab):
    """Byte-pair encoding: one joint vocabulary for both languages, or one per side.

    Build it with :meth:`train`; wrap existing ``tokenizers.Tokenizer`` objects only if they carry the four
    special tokens at ids 0-3.
    """

    def __init__(self, src: Tokenizer, tgt: Tokenizer | None = None) -> None:
        self.joint = tgt is None or tgt is src
        self.src_tok = src
        self.tgt_tok = src if tgt is None else tgt
        for tok in {id(self.src_tok): self.src_tok, id(self.tgt_tok): self.tgt_tok}.values():
            for i, name in enumerate(SPECIALS):
                if tok.token_to_id(name) != i:
                    raise ConfigError(
                        f"this tokenizer has {name} at id {tok.token_to_id(name)}, the workbench needs it at {i}: "
                        "build it with SubwordTokenizer.train"
                    )
            tok.encode_special_tokens = True  # "<eos>" typed in a sentence is text, not the control token

    def __repr__(self) -> str:
        kind = "joint" if self.joint else "separate"
        return f"SubwordTokenizer({kind}, src_vocab_size={self.src_vocab_size}, tgt_vocab_size={self.tgt_vocab_size})"

    # -- training ----------------------------------------------------------------------------------------------
    @staticmethod
    def _new(vocab_size: int, min_frequency: int) -> tuple[Tokenizer, trainers.BpeTrainer]:
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.normalizer = normalizers.Sequence(
            [normalizers.NFKC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Strip()]
        )
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=list(SPECIALS), show_progress=False
        )
        return tok, trainer

    @classmethod
    def train(
        cls, pairs: Iterable[tuple[str, str]], vocab_size: int = 8000, joint: bool = True, min_frequency: int = 2
    ) -> SubwordTokenizer:
        """Learn BPE merges from (source, target) pairs.

        Args:
            pairs: the training pairs only (never validation or test text).
            vocab_size: upper bound of each vocabulary, specials included (smaller if the text has fewer merges).
            joint: one vocabulary for both sides (needed to tie source and target embeddings), else one per side.
            min_frequency: a merge must occur at least this often.

        Raises:
            InputTextError: no pairs, or pairs that are not (str, str).
            ConfigError: vocab_size or min_frequency out of range.
        """
        pairs = list(pairs)
        if not pairs:
            raise InputTextError("cannot train a tokenizer on no sentences: pass the training pairs")
        for i, p in enumerate(pairs):
            if not (isinstance(p, tuple | list) and len(p) == 2 and all(isinstance(s, str) for s in p)):
                raise InputTextError(f"pair {i} is {p!r:.60}: pass (source, target) tuples of strings")
        if vocab_size <= len(SPECIALS):
            raise ConfigError(f"vocab_size={vocab_size} is too small: use at least a few hundred (8000 in the paper's setting)")
        if vocab_size > MAX_VOCAB_SIZE:
            raise ConfigError(f"vocab_size={vocab_size} is larger than any BPE vocabulary needs (at most {MAX_VOCAB_SIZE:,}; "
                              "the paper's is 37,000): use a size such as 8000")
        if min_frequency < 1:
            raise ConfigError(f"min_frequency={min_frequency} must be at least 1")
        if joint:
            tok, trainer = cls._new(vocab_size, min_frequency)
            tok.train_from_iterator((visible_text(s) for pair in pairs for s in pair), trainer=trainer)
            return cls(tok)
        src, t1 = cls._new(vocab_size, min_frequency)
        src.train_from_iterator((visible_text(p[0]) for p in pairs), trainer=t1)
        tgt, t2 = cls._new(vocab_size, min_frequency)
        tgt.train_from_iterator((visible_text(p[1]) for p in pairs), trainer=t2)
        return cls(src, tgt)

    # -- encoding / decoding -----------------------------------------------------------------------------------
    def _side(self, side: str) -> Tokenizer:
        return self.src_tok if side == "src" else self.tgt_tok

    def _encode(self, texts: Sequence[str], side: str) -> list[list[int]]:
        texts = check_texts(texts)
        return [enc.ids for enc in self._side(side).encode_batch(texts, add_special_tokens=False)]

    def _tokens(self, text: str, side: str) -> list[str]:
        return self._side(side).encode(check_texts([text])[0], add_special_tokens=False).tokens

    def normalize(self, text: str, side: str = "tgt") -> str:
        """The text as the tokenizer sees it (NFKC, single spaces, trimmed): what ``decode(encode(text))`` returns
        when every character was seen in training."""
        text, normalizer = visible_text(text), self._side(side).normalizer
        return normalizer.normalize_str(text) if normalizer is not None else text

    def decode_tgt(self, ids_batch: Sequence[Sequence[int]]) -> list[str]:
        """Detokenized target text of each row: stops at the first eos and drops special tokens (``<unk>`` too).

        Shapes:
            ids_batch: (B, T) nested lists, or a 2-D tensor.
        """
        texts = self.tgt_tok.decode_batch([_content(row) for row in _rows(ids_batch)], skip_special_tokens=True)
        return [" ".join(t.split()) for t in texts]  # a dropped <unk> leaves no stray space

    def id_to_token(self, i: int, side: str = "tgt") -> str:
        """The token string of one id (``"<unk>"`` for an id outside the vocabulary)."""
        return self._side(side).id_to_token(int(i)) or "<unk>"

    @property
    def src_vocab_size(self) -> int:
        """Number of source ids (specials included): the encoder embedding's size."""
        return self.src_tok.get_vocab_size()

    @property
    def tgt_vocab_size(self) -> int:
        """Number of target ids (specials included): the decoder embedding and output size."""
        return self.tgt_tok.get_vocab_size()

    # -- persistence --------------------------------------------------------------------------------------------
    def to_json(self) -> str:
        """Both tokenizers as one plain JSON string (fits a ``torch.load(weights_only=True)`` checkpoint)."""
        data = {"format": FORMAT, "version": VERSION, "kind": "subword", "src": self.src_tok.to_str()}
        if not self.joint:
            data["tgt"] = self.tgt_tok.to_str()
        return json.dumps(data, ensure_ascii=False)


class WordTokenizer(_Vocab):
    """Whitespace tokenizer with one joint vocabulary (synthetic tasks, worked examples).

    Words are kept as they are (no normalisation); unknown words become ``<unk>``.
    """

    def __init__(self, words: Sequence[str]) -> None:
        self.itos = list(SPECIALS) + [w for w in dict.fromkeys(words) if w not in SPECIALS]
        self.stoi = {w: i for i, w in enumerate(self.itos)}

    def __repr__(self) -> str:
        return f"WordTokenizer(vocab_size={len(self.itos)})"

    @classmethod
    def train(
        cls, pairs: Iterable[tuple[str, str]], vocab_size: int | None = None, min_frequency: int = 1
    ) -> WordTokenizer:
        """Collect the words of (source, target) pairs, in sorted order after the specials.

        Args:
            pairs: the training pairs.
            vocab_size: keep at most this many ids (specials included), the most frequent words first.
            min_frequency: drop words seen fewer times.
        """
        counts: Counter[str] = Counter()
        for i, p in enumerate(pairs):
            if not (isinstance(p, tuple | list) and len(p) == 2 and all(isinstance(s, str) for s in p)):
                raise InputTextError(f"pair {i} is {p!r:.60}: pass (source, target) tuples of strings")
            counts.update(visible_text(p[0]).split())
            counts.update(visible_text(p[1]).split())
        words = [w for w, c in counts.items() if c >= min_frequency]
        if vocab_size is not None:
            if vocab_size <= len(SPECIALS):
                raise ConfigError(f"vocab_size={vocab_size} leaves no room for words: use more than {len(SPECIALS)}")
            words = sorted(words, key=lambda w: (-counts[w], w))[: vocab_size - len(SPECIALS)]
        return cls(sorted(words))

    def _id(self, word: str) -> int:
        # a typed "<pad>", "<eos>"... is text, not the control token: it is an unknown word (a <pad> in a sentence
        # would be masked out, an <eos> would end its decoding)
        return UNK if word in SPECIALS else self.stoi.get(word, UNK)

    def _encode(self, texts: Sequence[str], side: str) -> list[list[int]]:
        return [[self._id(w) for w in text.split()] for text in check_texts(texts)]

    def _tokens(self, text: str, side: str) -> list[str]:
        return [self.itos[self._id(w)] for w in check_texts([text])[0].split()]

    def normalize(self, text: str, side: str = "tgt") -> str:
        """Words joined by single spaces: what ``decode(encode(text))`` returns when every word is known."""
        return " ".join(visible_text(text).split())

    def decode_tgt(self, ids_batch: Sequence[Sequence[int]]) -> list[str]:
        """Words of each row joined by spaces: stops at the first eos and drops special tokens.

        Shapes:
            ids_batch: (B, T) nested lists, or a 2-D tensor.
        """
        out = []
        for row in _rows(ids_batch):
            out.append(" ".join(self.itos[i] for i in _content(row) if i < len(self.itos)))
        return out

    def id_to_token(self, i: int, side: str = "tgt") -> str:
        """The word of one id (``"<unk>"`` for an id outside the vocabulary)."""
        i = int(i)
        return self.itos[i] if 0 <= i < len(self.itos) else "<unk>"

    @property
    def src_vocab_size(self) -> int:
        """Number of ids (joint vocabulary, specials included)."""
        return len(self.itos)

    @property
    def tgt_vocab_size(self) -> int:
        """Number of ids (joint vocabulary, specials included)."""
        return len(self.itos)

    def to_json(self) -> str:
        """The vocabulary as a plain JSON string."""
        return json.dumps({"format": FORMAT, "version": VERSION, "kind": "word", "itos": self.itos}, ensure_ascii=False)


def tokenizer_from_json(text: str) -> SubwordTokenizer | WordTokenizer:
    """Rebuild whichever tokenizer a checkpoint or file stored (the output of ``to_json``).

    Raises:
        CheckpointError: the text is not a workbench tokenizer.
    """
    try:
        data = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"the stored tokenizer is not valid JSON ({exc}): save it again with .save()") from exc
    if not isinstance(data, dict) or data.get("kind") not in ("subword", "word"):
        raise CheckpointError(
            "the stored text is not a workbench tokenizer (no 'kind': 'subword' or 'word'): "
            "pass the output of SubwordTokenizer.to_json() or WordTokenizer.to_json()"
        )
    version = data.get("version", VERSION)
    if not isinstance(version, int) or isinstance(version, bool):
        raise CheckpointError(f"the stored tokenizer has version {version!r}, not a whole number: it was not written by "
                              "to_json(); save it again with .save()")
    if version > VERSION:
        raise CheckpointError(
            f"tokenizer format version {data['version']} is newer than this workbench ({VERSION}): upgrade the package"
        )
    try:
        if data["kind"] == "word":
            tok: SubwordTokenizer | WordTokenizer = WordTokenizer(data["itos"])
            if tok.itos != list(data["itos"]):
                raise ValueError("its word list does not start with the four special tokens")
            return tok
        src = Tokenizer.from_str(data["src"])
        return SubwordTokenizer(src, Tokenizer.from_str(data["tgt"]) if "tgt" in data else None)
    except Exception as exc:  # tokenizers raises plain Exception on a malformed file
        raise CheckpointError(f"the stored tokenizer is damaged ({exc}): save it again with .save()") from exc


__all__ = ["BOS", "EOS", "PAD", "SPECIALS", "UNK", "SubwordTokenizer", "WordTokenizer", "tokenizer_from_json"]
