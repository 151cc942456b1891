"""The ONNX export (workbench.bridges.onnx): the exported encoder and decoder step, run by onnxruntime, decode as the
workbench does: on random-initialised models of several configurations (tokens, logits, cross-attention weights,
switched-off heads) and on the shipped small-de-en (50 test sentences, fp32 token for token, int8 within 0.3 BLEU).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import require_module

import workbench as wb
from workbench.errors import BridgeError

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def shipped():
    require_module("onnxruntime", 'pip install -e ".[dev]" (the [onnx] extra)')
    require_module("onnxscript", 'pip install -e ".[dev]" (the [onnx] extra: torch\'s dynamo exporter)')
    return wb.pretrained("small-de-en")


def _random_model(tokenizer, **kw):
    torch.manual_seed(kw.pop("seed", 0))
    cfg = wb.preset("tiny", **kw)
    return wb.build_model(cfg, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size).eval()


SOURCES = ["Ein Hund rennt durch den Schnee .", "Zwei Männer spielen Fußball auf einer grünen Wiese .",
           "Eine Frau mit einem roten Hut liest ein Buch im Park , während ihr Kind schläft ."]


@pytest.mark.parametrize("kw", [
    dict(d_model=32, n_heads=4, n_enc_layers=2, n_dec_layers=3),
    dict(d_model=48, n_heads=3, n_enc_layers=1, n_dec_layers=2, norm_first=True, seed=1),
    dict(d_model=32, n_heads=2, n_enc_layers=2, n_dec_layers=1, tie_output=False, positional="learned", seed=2),
])
def test_random_models_decode_alike(shipped, tmp_path, kw):
    """Greedy tokens equal, the first step's logits close, and the cross-attention weights the graph returns are
    the ones capture_attention sees in the workbench model, on three configurations (post-LN and pre-LN, tied and
    untied output, sinusoidal and learned positions)."""
    from workbench.bridges.onnx import OnnxTranslator, to_onnx
    from workbench.translation.decode import greedy_decode

    _, tokenizer, _ = shipped
    model = _random_model(tokenizer, **kw)
    to_onnx(model, tokenizer, tmp_path, weights="fp32")
    onnx_model = OnnxTranslator(tmp_path)
    for text in SOURCES:
        src = tokenizer.encode_src([text])[0]
        ids, weights = onnx_model.greedy_ids(src)
        ref = greedy_decode(model, torch.tensor([src]), max_len=len(src) + 50)[0].tolist()
        assert ids == ref[: ref.index(3)] if 3 in ref else ids == ref
        # the step's weights against the workbench's captured cross-attention, teacher-forced on the same output
        tgt = torch.tensor([[2, *ids]])
        with wb.capture_attention(model) as cache:
            model(torch.tensor([src]), tgt)
        for layer in range(model.cfg.n_dec_layers):
            captured = cache["dec.cross", layer][0, :, : weights.shape[0]].numpy()  # (H, steps, S)
            np.testing.assert_allclose(weights[:, layer].transpose(1, 0, 2), captured, atol=2e-5)


def test_heads_switched_off_as_ablate_heads_does(shipped, tmp_path):
    """A gate at 0 is ablate_heads(mode="zero"): the outputs change, and equal the workbench's with that head off."""
    from workbench.bridges.onnx import OnnxTranslator, to_onnx
    from workbench.translation.decode import greedy_decode

    _, tokenizer, _ = shipped
    model = _random_model(tokenizer, d_model=32, n_heads=4, n_enc_layers=2, n_dec_layers=2, seed=3)
    to_onnx(model, tokenizer, tmp_path, weights="fp32")
    onnx_model = OnnxTranslator(tmp_path)
    src = tokenizer.encode_src([SOURCES[2]])[0]
    changed = 0
    for off in ([("dec.cross", 1, 2)], [("enc.self", 0, 1), ("dec.self", 1, 0)], [("dec.cross", 0, None)]):
        expanded = [(k, layer, h) for k, layer, hh in off for h in (range(4) if hh is None else [hh])]
        ids, _ = onnx_model.greedy_ids(src, expanded)
        with wb.ablate_heads(model, off):
            ref = greedy_decode(model, torch.tensor([src]), max_len=len(src) + 50)[0].tolist()
        ref = ref[: ref.index(3)] if 3 in ref else ref
        assert ids == ref, off
        changed += ids != onnx_model.greedy_ids(src)[0]
    assert changed >= 1, "no switched-off head changed the output: the gates are not wired"


def test_shipped_model_translates_as_the_workbench(shipped, tmp_path, multi30k_dir):
    """fp32: the 50 first test_2016_flickr sentences translate token for token as wb.translate (greedy); int8: at
    most 0.3 BLEU below fp32 on the same sentences, in under a third of the bytes."""
    import sacrebleu

    from workbench.bridges.onnx import OnnxTranslator, to_onnx
    from workbench.translation.data import load_multi30k
    from workbench.translation.decode import greedy_decode

    model, tokenizer, card = shipped
    pairs = load_multi30k("test_2016_flickr", "de", "en", data_dir=multi30k_dir, limit=50)
    src, refs = [p[0] for p in pairs], [p[1] for p in pairs]
    reference = wb.translate(model, tokenizer, src, beam=1)
    sizes, bleu = {}, {}
    for weights in ("fp32", "int8"):
        out = tmp_path / weights
        to_onnx(model, tokenizer, out, weights=weights, card=card)
        sizes[weights] = sum(f.stat().st_size for f in out.iterdir())
        onnx_model = OnnxTranslator(out)
        if weights == "fp32":  # token for token: the ids of wb.translate's batch (greedy_decode, padded rows)
            src_ids = tokenizer.encode_src(src)
            batch = torch.zeros(len(src_ids), max(map(len, src_ids)), dtype=torch.long)  # (B, S), pad 0
            for row, ids in enumerate(src_ids):
                batch[row, : len(ids)] = torch.tensor(ids)
            expected = [row[: row.index(3)] if 3 in row else row for row in greedy_decode(model, batch).tolist()]
            assert [onnx_model.greedy_ids(s)[0] for s in src_ids] == expected
        translations = onnx_model.translate(src)
        if weights == "fp32":
            assert translations == reference
        bleu[weights] = sacrebleu.corpus_bleu(translations, [refs]).score
    assert bleu["fp32"] == pytest.approx(sacrebleu.corpus_bleu(reference, [refs]).score)
    assert bleu["int8"] >= bleu["fp32"] - 0.3, bleu
    assert sizes["int8"] < sizes["fp32"] / 3, sizes
    info = json.loads((tmp_path / "int8" / "model.json").read_text())
    assert info["alpha"] == card["decoding"]["alpha"] and info["domain_warning"].startswith("Domain")


def test_export_command_and_bad_format(shipped, tmp_path):
    from workbench.tools.cli.main import main

    assert main(["export", "small-de-en", str(tmp_path / "web"), "--to", "onnx"]) == 0
    assert {p.name for p in (tmp_path / "web").iterdir()} == {"encoder.onnx", "decoder.onnx", "weights.bin",
                                                             "tokenizer.json", "model.json"}
    assert json.loads((tmp_path / "web" / "model.json").read_text())["weights"] == "int8"
    assert main(["export", "small-de-en", str(tmp_path / "other"), "--to", "onnx", "--quantization", "float16"]) == 2
    assert not (tmp_path / "other").exists()
    from workbench.bridges.onnx import to_onnx

    model, tokenizer, _ = shipped
    with pytest.raises(BridgeError, match="use one of fp32, int8"):
        to_onnx(model, tokenizer, tmp_path / "x", weights="fp16")
