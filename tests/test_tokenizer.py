"""Subword and word tokenizers: exact round trips, specials, unknown characters, persistence."""

from __future__ import annotations

import json
import unicodedata

import pytest
import torch

from workbench import CheckpointError, ConfigError, InputTextError
from workbench.translation.data import load_multi30k, synthetic_pairs
from workbench.translation.tokenizer import (
    BOS,
    EOS,
    PAD,
    UNK,
    SubwordTokenizer,
    WordTokenizer,
    tokenizer_from_json,
)


def _roundtrip_failures(tok: SubwordTokenizer, texts: list[str], side: str) -> list[tuple[str, str]]:
    """(expected, got) for every sentence whose decoded text is not its NFKC form (``unicodedata``, independent of
    the tokenizer's own normalizer)."""
    if side == "src":  # the source side has no decoder of its own in a translator; check it through its tokenizer
        got = [tok.src_tok.decode(ids) for ids in tok.encode_src(texts, add_eos=False)]
    else:
        got = tok.decode_tgt(tok.encode_tgt(texts))
    return [(unicodedata.normalize("NFKC", x), y) for x, y in zip(texts, got, strict=True) if y != unicodedata.normalize("NFKC", x)]


def test_roundtrip_on_unseen_validation_text(subword_tokenizer, multi30k_dir):
    """Trained on 3,000 training pairs, the tokenizer gives back 100 % of the 1,014 val sentences, both sides:
    every character of the val split occurs in those training pairs, and NFKC + Metaspace decoding is exact."""
    val = load_multi30k("val", data_dir=multi30k_dir)
    assert len(val) == 1014
    for side, texts in (("src", [de for de, _ in val]), ("tgt", [en for _, en in val])):
        failures = _roundtrip_failures(subword_tokenizer, texts, side)
        assert failures == [], f"{side}: {len(failures)} of {len(texts)} sentences differ, e.g. {failures[:3]}"


def test_normalisation_is_nfkc_and_single_spaces(subword_tokenizer):
    tok = subword_tokenizer
    text = "  Ein  Mann\tfährt ﬁx  "  # doubled and odd whitespace, the "fi" ligature
    assert tok.normalize(text) == "Ein Mann fährt fix"
    assert tok.decode_tgt(tok.encode_tgt([text])) == ["Ein Mann fährt fix"]
    assert tok.decode_tgt(tok.encode_tgt(["A man."])) == ["A man."]  # no space creeps in before punctuation


def test_special_ids_and_layout(subword_tokenizer):
    tok = subword_tokenizer
    assert (tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id) == (PAD, UNK, BOS, EOS) == (0, 1, 2, 3)
    assert [tok.id_to_token(i) for i in range(4)] == ["<pad>", "<unk>", "<bos>", "<eos>"]
    assert [tok.id_to_token(i, "src") for i in range(4)] == ["<pad>", "<unk>", "<bos>", "<eos>"]
    src = tok.encode_src(["Ein Mann fährt Fahrrad."])[0]
    tgt = tok.encode_tgt(["A man rides a bike."])[0]
    assert src[-1] == EOS and BOS not in src and EOS not in src[:-1]
    assert tgt[0] == BOS and tgt[-1] == EOS and min(tgt[1:-1]) > EOS
    assert tok.encode_src(["Ein Mann fährt Fahrrad."], add_bos=True, add_eos=False)[0] == [BOS, *src[:-1]]
    assert tok.encode_src([""]) == [[EOS]] and tok.encode_tgt([""]) == [[BOS, EOS]]
    assert tok.decode_tgt([[BOS, EOS]]) == [""]


def test_token_strings_match_ids_one_to_one(subword_tokenizer):
    tok = subword_tokenizer
    de, en = "Zwei Hunde spielen im Schnee.", "Two dogs play in the snow."
    src_tokens, tgt_tokens = tok.tokens_src(de), tok.tokens_tgt(en)
    assert src_tokens == [tok.id_to_token(i, "src") for i in tok.encode_src([de])[0]]
    assert tgt_tokens == [tok.id_to_token(i) for i in tok.encode_tgt([en])[0]]
    assert src_tokens[-1] == "<eos>" and tgt_tokens[0] == "<bos>" and tgt_tokens[-1] == "<eos>"


def test_decoding_stops_at_eos_and_skips_specials(subword_tokenizer):
    tok = subword_tokenizer
    ids = tok.encode_tgt(["A dog runs."])[0]
    padded = [*ids, PAD, PAD]
    junk_after_eos = [*ids, *tok.encode_tgt(["Two cats."])[0][1:]]
    assert tok.decode_tgt([padded, junk_after_eos]) == ["A dog runs.", "A dog runs."]
    assert tok.decode_tgt(torch.tensor([padded])) == ["A dog runs."]  # a (B, T) tensor works too
    with pytest.raises(InputTextError, match="batch"):
        tok.decode_tgt(ids)


def test_unseen_characters_become_unk(subword_tokenizer):
    tok = subword_tokenizer
    ids = tok.encode_src(["Ein Mann 漢字"])[0]
    assert ids.count(UNK) == 2 and ids[-1] == EOS  # one <unk> per unseen character, no crash
    assert "<unk>" in tok.tokens_src("Ein Mann 漢字")
    assert tok.decode_tgt([[BOS, *tok.encode_src(["A 漢 man"], add_eos=False)[0], EOS]]) == ["A man"]


def test_typed_special_tokens_stay_text(subword_tokenizer):
    ids = subword_tokenizer.encode_src(["a <eos> b <pad>"])[0]
    assert ids.count(EOS) == 1 and ids[-1] == EOS and PAD not in ids


def test_json_roundtrip_save_load_and_separate_vocabularies(subword_tokenizer, small_pairs, tmp_path):
    text = ["Zwei Hunde spielen im Schnee.", "Ein Mädchen in einem rosa Kleid 漢"]
    text_json = subword_tokenizer.to_json()
    assert isinstance(json.loads(text_json), dict)  # plain JSON: fits a weights_only checkpoint
    again = tokenizer_from_json(text_json)
    assert again.to_json() == text_json
    assert again.encode_src(text) == subword_tokenizer.encode_src(text)
    assert again.tokens_src(text[1]) == subword_tokenizer.tokens_src(text[1])
    assert again.encode_src(["<eos>"]) == subword_tokenizer.encode_src(["<eos>"])  # settings survive the trip
    sep = SubwordTokenizer.train(small_pairs[:500], vocab_size=600, joint=False)
    assert not sep.joint and sep.src_vocab_size <= 600 and sep.tgt_vocab_size <= 600
    assert sep.src_tok.get_vocab() != sep.tgt_tok.get_vocab()
    sep.save(tmp_path / "t.json")
    loaded = SubwordTokenizer.load(tmp_path / "t.json")
    assert loaded.to_json() == sep.to_json() and not loaded.joint
    assert loaded.encode_tgt(["a dog"]) == sep.encode_tgt(["a dog"])
    assert loaded.encode_src(["ein Hund"]) == sep.encode_src(["ein Hund"])


def test_trained_on_given_pairs_only(small_pairs):
    pairs = small_pairs[:300]
    tok = SubwordTokenizer.train(pairs, vocab_size=400)
    seen = set("".join(s + t for s, t in pairs)) | {"▁"}
    learned = {c for w in tok.src_tok.get_vocab() if w not in ("<pad>", "<unk>", "<bos>", "<eos>") for c in w}
    assert tok.src_vocab_size <= 400 and learned <= seen
    tiny = SubwordTokenizer.train([("x y", "y x")] * 3, vocab_size=100)
    assert tiny.src_vocab_size < 20 and UNK in tiny.encode_src(["z"])[0]


def test_bad_settings_and_files(subword_tokenizer, tmp_path):
    with pytest.raises(InputTextError, match="list"):
        subword_tokenizer.encode_src("Ein Mann")
    with pytest.raises(InputTextError, match=r"sentence 2 \(index 1\)"):
        subword_tokenizer.encode_tgt(["ok", None])
    with pytest.raises(InputTextError, match="no sentences"):
        SubwordTokenizer.train([])
    with pytest.raises(ConfigError, match="vocab_size=3"):
        SubwordTokenizer.train([("a", "b")], vocab_size=3)
    with pytest.raises(CheckpointError, match="not a workbench tokenizer"):
        tokenizer_from_json(json.dumps({"hello": 1}))
    with pytest.raises(CheckpointError, match="not valid JSON"):
        tokenizer_from_json("{")
    with pytest.raises(CheckpointError, match="does not exist"):
        SubwordTokenizer.load(tmp_path / "missing.json")


def test_word_tokenizer_same_interface(tmp_path):
    pairs = synthetic_pairs("reverse", 100, 2, 6, 12, seed=0)
    tok = WordTokenizer.train(pairs)
    assert tok.src_vocab_size == tok.tgt_vocab_size == 4 + 12
    src, tgt = pairs[0]
    ids = tok.encode_tgt([tgt])[0]
    assert ids[0] == BOS and ids[-1] == EOS and UNK not in ids
    assert tok.decode_tgt([ids]) == [tgt]
    assert tok.tokens_src(src) == [tok.id_to_token(i) for i in tok.encode_src([src])[0]]
    assert tok.tokens_tgt(tgt) == [tok.id_to_token(i) for i in ids]
    unk = tok.encode_tgt(["t2 zz t1"])[0]
    assert unk[2] == UNK and tok.decode_tgt([unk]) == ["t2 t1"]  # unknown words become <unk>, dropped on decode
    assert tok.encode_src([""]) == [[EOS]]
    tok.save(tmp_path / "w.json")
    again = WordTokenizer.load(tmp_path / "w.json")
    assert isinstance(again, WordTokenizer) and again.itos == tok.itos
    assert tokenizer_from_json(tok.to_json()).encode_src([src]) == tok.encode_src([src])
    small = WordTokenizer.train([("a a a b", "c")], vocab_size=5)
    assert small.itos == ["<pad>", "<unk>", "<bos>", "<eos>", "a"]


def test_typed_special_tokens_stay_text_in_the_word_tokenizer_too():
    """The probe's finding: a typed <pad> became the padding id (masked out), a typed <eos> ended the sentence."""
    from workbench.translation.tokenizer import WordTokenizer

    tok = WordTokenizer.train([("a b c", "x y z")])
    ids = tok.encode_src(["a <pad> b <eos> c <bos>"])[0]
    assert ids[:-1] == [tok.encode_src(["a"])[0][0], tok.unk_id, ids[2], tok.unk_id, ids[4], tok.unk_id]
    assert ids[-1] == tok.eos_id and tok.pad_id not in ids and tok.bos_id not in ids
    assert tok.decode_tgt(tok.encode_tgt(["x <eos> y z"])) == ["x y z"]  # nothing after the typed <eos> is lost
