"""Subword and word tokenizers: exact round trips, specials, persistence."""

from __future__ import annotations

import json
import unicodedata

import pytest

from workbench import InputTextError
from workbench.data import load_multi30k
from workbench.tokenizer import BOS, EOS, PAD, UNK, SubwordTokenizer, WordTokenizer, tokenizer_from_json


def test_roundtrip_on_unseen_validation_text(subword_tokenizer, multi30k_dir):
    val = load_multi30k("val", data_dir=multi30k_dir)
    ok = sum(subword_tokenizer.decode_tgt(subword_tokenizer.encode_tgt([en]))[0] == unicodedata.normalize("NFKC", en) for _, en in val)
    assert ok / len(val) >= 0.99


def test_special_ids_and_shapes(subword_tokenizer):
    tok = subword_tokenizer
    assert (tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id) == (PAD, UNK, BOS, EOS) == (0, 1, 2, 3)
    src = tok.encode_src(["Ein Mann fährt Fahrrad."])[0]
    tgt = tok.encode_tgt(["A man rides a bike."])[0]
    assert src[-1] == EOS and BOS not in src
    assert tgt[0] == BOS and tgt[-1] == EOS
    assert tok.encode_src([""]) == [[EOS]]
    assert tok.tokens_src("Ein Mann")[-1] == "<eos>"


def test_unseen_characters_become_unk(subword_tokenizer):
    ids = subword_tokenizer.encode_src(["Ein Mann 漢字"])[0]
    assert UNK in ids


def test_json_roundtrip_and_separate_vocabularies(subword_tokenizer, small_pairs, tmp_path):
    again = tokenizer_from_json(subword_tokenizer.to_json())
    text = ["Zwei Hunde spielen im Schnee."]
    assert again.encode_src(text) == subword_tokenizer.encode_src(text)
    json.loads(subword_tokenizer.to_json())  # plain JSON, fits a weights_only checkpoint
    sep = SubwordTokenizer.train(small_pairs[:500], vocab_size=600, joint=False)
    assert not sep.joint and sep.src_vocab_size <= 600
    sep.save(tmp_path / "t.json")
    assert SubwordTokenizer.load(tmp_path / "t.json").encode_tgt(["a dog"]) == sep.encode_tgt(["a dog"])


def test_word_tokenizer():
    tok = WordTokenizer.train([("t1 t2", "t2 t1")])
    ids = tok.encode_tgt(["t2 t1 t9"])[0]
    assert ids[0] == BOS and ids[-1] == EOS and UNK in ids
    assert tok.decode_tgt([ids[1:]]) == ["t2 t1"]  # special tokens, unk included, are dropped
    assert tokenizer_from_json(tok.to_json()).itos == tok.itos


def test_string_instead_of_list_is_refused(subword_tokenizer):
    with pytest.raises(InputTextError, match="list"):
        subword_tokenizer.encode_src("Ein Mann")
