"""The sink audit: shares partition each head's weight (sum to 1 per row and per sentence), categories are the
tokens they claim, the same audit runs on a Transformer, the recurrent baseline and an imported Marian model, the
sink-heavy heads are the ones ablated, bad input gets one line."""

from __future__ import annotations

import json

import pytest
import torch

from tests.conftest import require_module
from workbench import build_model, build_rnn, preset
from workbench.errors import DataError, InterventionError
from workbench.inspect.capture import capture_attention, hooks_remaining
from workbench.inspect.sinks import CATEGORIES, is_punctuation, key_categories, sink_audit
from workbench.model.rnn import RNNConfig


@pytest.fixture(scope="module")
def audit_pairs(small_pairs):
    return small_pairs[:24]


@pytest.fixture(scope="module")
def tiny_translator(subword_tokenizer):
    torch.manual_seed(0)
    V = subword_tokenizer.src_vocab_size
    return build_model(preset("tiny", d_model=32, n_heads=4, n_enc_layers=2, n_dec_layers=2), V, V).eval()


def test_categories_are_disjoint_and_in_order():
    assert is_punctuation(",") and is_punctuation("▁.") and is_punctuation("--")
    assert not is_punctuation("▁rennt.") and not is_punctuation("▁") and not is_punctuation("s.")
    tokens = ["▁Ein", "▁Hund", "▁,", "▁rennt.", "<eos>"]
    assert key_categories(tokens, [7, 8, 9, 10, 3], eos_id=3) == [0, 3, 2, 3, 1]
    assert key_categories([","], [9], eos_id=3) == [0]  # the first position wins over punctuation


def test_shares_and_content_sum_to_one_per_row_and_sentence(tiny_translator, subword_tokenizer, audit_pairs):
    audit = sink_audit(tiny_translator, subword_tokenizer, audit_pairs, batch_size=10, n_bootstrap=200, ablate=False)
    table = audit.table
    assert set(table["kind"]) == {"enc.self", "dec.self", "dec.cross"}
    assert len(table) == 3 * 2 * 4
    total = table[list(CATEGORIES)].sum(axis=1)
    assert torch.allclose(torch.tensor(total.values), torch.ones(len(table), dtype=torch.float64), atol=1e-6)
    for x in audit.per_sentence.values():  # (N, H, 4): every sentence of every head
        assert x.shape[0] == len(audit_pairs)
        assert abs(x.sum(-1) - 1).max() < 1e-6
    for name in (*CATEGORIES, "sink"):
        assert ((table[f"{name}_lo"] <= table[name] + 1e-12) & (table[name] <= table[f"{name}_hi"] + 1e-12)).all()
    assert table.loc[table["kind"] == "dec.self", "eos"].max() == 0  # no </s> among the decoder's inputs
    cross = table[table["kind"] == "dec.cross"]
    assert cross["align_raw"].notna().all() and table.loc[table["kind"] != "dec.cross", "align_raw"].isna().all()
    assert (cross["align_content"] >= cross["align_raw"] - 1e-12).all()  # removing candidates only helps here
    assert hooks_remaining(tiny_translator) == 0


def test_eos_share_is_the_captured_weight_on_eos(tiny_translator, subword_tokenizer, audit_pairs):
    pairs = audit_pairs[:2]
    audit = sink_audit(tiny_translator, subword_tokenizer, pairs, n_bootstrap=50, ablate=False, align=False)
    tok = subword_tokenizer
    src_ids = tok.encode_src([pairs[0][0]])[0]
    tgt_in = tok.encode_tgt([pairs[0][1]])[0][:-1]
    with capture_attention(tiny_translator) as cache:
        tiny_translator(torch.tensor([src_ids]), torch.tensor([tgt_in]))
    w = cache["dec.cross", 1][0]  # (H, T, S)
    expected = w[:, :, src_ids.index(tok.eos_id)].mean(-1).double()  # (H,)
    got = torch.tensor(audit.per_sentence["dec.cross", 1][0, :, CATEGORIES.index("eos")])
    assert torch.allclose(got, expected, atol=1e-6)
    with pytest.warns(DeprecationWarning, match="'cross' is an old site spelling"):  # the key before the site names
        assert audit.per_sentence["cross", 1] is audit.per_sentence["dec.cross", 1]


def test_recurrent_baseline_has_one_head_and_no_ablation(subword_tokenizer, audit_pairs):
    torch.manual_seed(0)
    V = subword_tokenizer.src_vocab_size
    rnn = build_rnn(RNNConfig(d_model=32), V, V).eval()
    audit = sink_audit(rnn, subword_tokenizer, audit_pairs, n_bootstrap=100)
    assert list(audit.table["kind"]) == ["dec.cross"]  # its one attention is dec.0.cross
    assert abs(float(audit.table[list(CATEGORIES)].sum(axis=1).iloc[0]) - 1) < 1e-6
    assert audit.table["align_raw"].notna().all()
    assert "one attention" in audit.ablation["skipped"]


def test_sink_heavy_heads_are_the_ones_ablated(tiny_translator, subword_tokenizer, audit_pairs):
    table = sink_audit(tiny_translator, subword_tokenizer, audit_pairs, n_bootstrap=50, ablate=False).table
    threshold = float(table["sink"].median())  # about half the heads
    audit = sink_audit(tiny_translator, subword_tokenizer, audit_pairs, n_bootstrap=50, sink_threshold=threshold,
                       max_extra=3)
    heavy = table[table["sink"] >= threshold]
    assert audit.ablation["n_heads"] == len(heavy) > 0
    assert audit.table["ablated"].sum() == len(heavy)
    assert {tuple(h) for h in audit.ablation["heads"]} == set(zip(heavy["kind"], heavy["layer"], heavy["head"], strict=True))
    assert (audit.table.loc[audit.table["ablated"], "sink"] >= threshold).all()
    assert {"bleu", "bleu_ablated", "delta"} <= set(audit.ablation)
    assert audit.ablation["delta"] == pytest.approx(audit.ablation["bleu_ablated"] - audit.ablation["bleu"])
    assert hooks_remaining(tiny_translator) == 0


def test_imported_marian_model_is_audited(small_pairs, tmp_path):
    transformers = require_module("transformers", 'pip install -e ".[hf]"')
    spm = require_module("sentencepiece", 'pip install -e ".[hf]"')
    from workbench.bridges.huggingface import from_huggingface

    for side, col in (("source", 0), ("target", 1)):
        text = tmp_path / f"{side}.txt"
        text.write_text("\n".join(p[col] for p in small_pairs[:2000]) + "\n", encoding="utf-8")
        spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(tmp_path / side), vocab_size=300,
                                       model_type="unigram", character_coverage=1.0, bos_id=-1, eos_id=-1,
                                       unk_id=0, minloglevel=2)
        (tmp_path / f"{side}.model").rename(tmp_path / f"{side}.spm")
    pieces = []
    for side in ("source", "target"):
        proc = spm.SentencePieceProcessor(model_file=str(tmp_path / f"{side}.spm"))
        pieces += [proc.id_to_piece(i) for i in range(proc.get_piece_size())]
    vocab = {"</s>": 0, "<unk>": 1}
    for p in pieces:
        vocab.setdefault(p, len(vocab))
    vocab["<pad>"] = len(vocab)
    (tmp_path / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    hf_tok = transformers.MarianTokenizer(source_spm=str(tmp_path / "source.spm"),
                                          target_spm=str(tmp_path / "target.spm"), vocab=str(tmp_path / "vocab.json"))
    torch.manual_seed(0)
    cfg = transformers.MarianConfig(vocab_size=len(hf_tok), d_model=32, encoder_layers=2, decoder_layers=2,
                                    encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                                    decoder_ffn_dim=64, max_position_embeddings=128, pad_token_id=hf_tok.pad_token_id,
                                    eos_token_id=hf_tok.eos_token_id, decoder_start_token_id=hf_tok.pad_token_id,
                                    forced_eos_token_id=hf_tok.eos_token_id, activation_function="swish",
                                    scale_embedding=True, init_std=0.2)
    model, tok = from_huggingface(transformers.MarianMTModel(cfg).eval(), hf_tok)
    audit = sink_audit(model, tok, small_pairs[:12], n_bootstrap=50, sink_threshold=0.3, max_extra=3)
    assert set(audit.table["kind"]) == {"enc.self", "dec.self", "dec.cross"}
    assert abs(audit.table[list(CATEGORIES)].sum(axis=1) - 1).max() < 1e-6
    assert (audit.table.loc[audit.table["kind"] != "dec.self", "eos"] > 0).all()  # Marian's </s> ends every source
    assert "bleu" in audit.ablation


def test_bad_input_is_refused_in_one_line(tiny_translator, subword_tokenizer, audit_pairs):
    with pytest.raises(DataError, match="at least 2"):
        sink_audit(tiny_translator, subword_tokenizer, audit_pairs[:1])
    with pytest.raises(DataError, match="string pairs"):
        sink_audit(tiny_translator, subword_tokenizer, [("a", "b"), ("c",)])
    with pytest.raises(InterventionError, match="sink_threshold"):
        sink_audit(tiny_translator, subword_tokenizer, audit_pairs, sink_threshold=0.0)
