"""Subword tokenizers (HuggingFace ``tokenizers`` BPE) and a whitespace tokenizer for synthetic tasks.

Both share one interface and the special ids ``<pad>`` = 0, ``<unk>`` = 1, ``<bos>`` = 2, ``<eos>`` = 3.
The BPE tokenizer normalises with NFKC and splits with Metaspace, and decodes with the Metaspace decoder, so that
``decode(encode(text)) == NFKC(text)`` and BLEU is computed on properly detokenized text. It is trained on the
training split only, and stored inside checkpoints as a JSON string.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from .errors import InputTextError

SPECIALS = ("<pad>", "<unk>", "<bos>", "<eos>")
PAD, UNK, BOS, EOS = 0, 1, 2, 3


class _Vocab:
    pad_id, unk_id, bos_id, eos_id = PAD, UNK, BOS, EOS

    def _check(self, texts: Sequence[str]) -> None:
        if isinstance(texts, str):
            raise InputTextError("pass a list of sentences, not one string: wrap it in a list")

    def encode_tgt(self, texts: Sequence[str]) -> list[list[int]]:
        """Target ids with bos and eos: ``[bos, y1 .. yn, eos]``."""
        return [[BOS, *ids[:-1], EOS] for ids in self._encode(texts, "tgt")]

    def encode_src(self, texts: Sequence[str], add_bos: bool = False, add_eos: bool = True) -> list[list[int]]:
        """Source ids, eos appended (an empty sentence is just ``[eos]``)."""
        out = []
        for ids in self._encode(texts, "src"):
            core = ids[:-1]
            out.append(([BOS] if add_bos else []) + core + ([EOS] if add_eos else []))
        return out

    def _encode(self, texts: Sequence[str], side: str) -> list[list[int]]:  # ids + [EOS]
        raise NotImplementedError


class SubwordTokenizer(_Vocab):
    """Byte-pair encoding, one joint vocabulary for both languages or one per side."""

    def __init__(self, src: Tokenizer, tgt: Tokenizer | None = None) -> None:
        self.src_tok = src
        self.tgt_tok = tgt if tgt is not None else src
        self.joint = tgt is None

    # -- training ----------------------------------------------------------------------------------------------
    @staticmethod
    def _new(vocab_size: int, min_frequency: int) -> tuple[Tokenizer, trainers.BpeTrainer]:
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.normalizer = normalizers.NFKC()
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
        """Learn BPE merges from (source, target) pairs: pass the training split only."""
        pairs = list(pairs)
        if not pairs:
            raise InputTextError("cannot train a tokenizer on no sentences: pass the training pairs")
        if vocab_size <= len(SPECIALS):
            raise InputTextError(f"vocab_size={vocab_size} is too small: use at least a few hundred")
        if joint:
            tok, trainer = cls._new(vocab_size, min_frequency)
            tok.train_from_iterator((s for pair in pairs for s in pair), trainer=trainer)
            return cls(tok)
        src, t1 = cls._new(vocab_size, min_frequency)
        src.train_from_iterator((p[0] for p in pairs), trainer=t1)
        tgt, t2 = cls._new(vocab_size, min_frequency)
        tgt.train_from_iterator((p[1] for p in pairs), trainer=t2)
        return cls(src, tgt)

    # -- encoding / decoding -----------------------------------------------------------------------------------
    def _encode(self, texts: Sequence[str], side: str) -> list[list[int]]:
        self._check(texts)
        tok = self.src_tok if side == "src" else self.tgt_tok
        return [enc.ids + [EOS] for enc in tok.encode_batch(list(texts), add_special_tokens=False)]

    def decode_tgt(self, ids_batch: Sequence[Sequence[int]]) -> list[str]:
        """Detokenized text; stops at eos and drops special tokens."""
        cleaned = []
        for ids in ids_batch:
            row = []
            for i in ids:
                i = int(i)
                if i == EOS:
                    break
                if i > EOS:
                    row.append(i)
            cleaned.append(row)
        return self.tgt_tok.decode_batch(cleaned, skip_special_tokens=True)

    def tokens_src(self, text: str) -> list[str]:
        """Subword strings of a source sentence (for figure labels), eos included."""
        return self.src_tok.encode(text, add_special_tokens=False).tokens + ["<eos>"]

    def tokens_tgt(self, text: str) -> list[str]:
        return self.tgt_tok.encode(text, add_special_tokens=False).tokens + ["<eos>"]

    def id_to_token(self, i: int, side: str = "tgt") -> str:
        return (self.tgt_tok if side == "tgt" else self.src_tok).id_to_token(int(i)) or "<unk>"

    @property
    def src_vocab_size(self) -> int:
        return self.src_tok.get_vocab_size()

    @property
    def tgt_vocab_size(self) -> int:
        return self.tgt_tok.get_vocab_size()

    # -- persistence --------------------------------------------------------------------------------------------
    def to_json(self) -> str:
        """A plain JSON string (fits a ``weights_only`` checkpoint)."""
        data = {"kind": "subword", "src": self.src_tok.to_str()}
        if not self.joint:
            data["tgt"] = self.tgt_tok.to_str()
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> SubwordTokenizer | WordTokenizer:
        data = json.loads(text)
        if data.get("kind") == "word":
            return WordTokenizer.from_json(text)
        src = Tokenizer.from_str(data["src"])
        return cls(src, Tokenizer.from_str(data["tgt"]) if "tgt" in data else None)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json(), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> SubwordTokenizer | WordTokenizer:
        return cls.from_json(Path(path).read_text(encoding="utf-8"))


class WordTokenizer(_Vocab):
    """Whitespace tokenizer with one joint vocabulary (synthetic tasks, worked examples)."""

    def __init__(self, words: Sequence[str]) -> None:
        self.itos = list(SPECIALS) + [w for w in words if w not in SPECIALS]
        self.stoi = {w: i for i, w in enumerate(self.itos)}

    @classmethod
    def train(cls, pairs: Iterable[tuple[str, str]], **_: object) -> WordTokenizer:
        seen: dict[str, None] = {}
        for s, t in pairs:
            for w in (s + " " + t).split():
                seen.setdefault(w, None)
        return cls(sorted(seen))

    def _encode(self, texts: Sequence[str], side: str) -> list[list[int]]:
        self._check(texts)
        return [[self.stoi.get(w, UNK) for w in text.split()] + [EOS] for text in texts]

    def decode_tgt(self, ids_batch: Sequence[Sequence[int]]) -> list[str]:
        out = []
        for ids in ids_batch:
            words = []
            for i in ids:
                i = int(i)
                if i == EOS:
                    break
                if i > EOS:
                    words.append(self.itos[i])
            out.append(" ".join(words))
        return out

    def tokens_src(self, text: str) -> list[str]:
        return [w if w in self.stoi else "<unk>" for w in text.split()] + ["<eos>"]

    tokens_tgt = tokens_src

    def id_to_token(self, i: int, side: str = "tgt") -> str:
        return self.itos[int(i)]

    @property
    def src_vocab_size(self) -> int:
        return len(self.itos)

    tgt_vocab_size = src_vocab_size

    def to_json(self) -> str:
        return json.dumps({"kind": "word", "itos": self.itos})

    @classmethod
    def from_json(cls, text: str) -> WordTokenizer:
        return cls(json.loads(text)["itos"])

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json(), encoding="utf-8")


def tokenizer_from_json(text: str) -> SubwordTokenizer | WordTokenizer:
    """Rebuild whichever tokenizer a checkpoint stored."""
    return SubwordTokenizer.from_json(text)
