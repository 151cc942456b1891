"""The Hugging Face (Marian) and CTranslate2 bridges prove equality on random-initialised models, with no download.

Decoding settings that make both sides the same algorithm:
* greedy: ``generate(num_beams=1, do_sample=False, max_new_tokens=L)`` with ``forced_eos_token_id`` (eos forced at
  the last step) against ``greedy_decode(max_len=L)`` (eos forced at the last step too);
* beam: ``generate(num_beams=4, length_penalty=0.0, early_stopping=False, max_new_tokens=L)`` against
  ``beam_search(beam=4, alpha=0.0, max_len=L, keep_finished=True)``: transformers keeps finished hypotheses aside
  while 4 unfinished ones go on, which the workbench's default beam (finished hypotheses hold a beam slot) does not;
  their length penalties differ too (len^a against GNMT's ((5 + len) / 6)^a), so only a = 0 is the same.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
import torch

from tests.conftest import require_module
from workbench.errors import BridgeError

transformers = require_module("transformers", 'pip install -e ".[hf]"')

V, PAD, EOS = 40, 39, 0  # Marian's conventions: eos 0, pad last and the decoder's start token

CONFIGS = {
    # name: MarianConfig fields (and the bias given to final_logits_bias)
    "opus-mt-like": dict(activation_function="swish", scale_embedding=True, share_encoder_decoder_embeddings=True,
                         tie_word_embeddings=True, d_model=32, encoder_layers=2, decoder_layers=2, heads=4, ffn=64),
    "gelu-unscaled": dict(activation_function="gelu", scale_embedding=False, share_encoder_decoder_embeddings=True,
                          tie_word_embeddings=True, d_model=48, encoder_layers=1, decoder_layers=3, heads=6, ffn=96),
    "untied-output": dict(activation_function="relu", scale_embedding=True, share_encoder_decoder_embeddings=True,
                          tie_word_embeddings=False, d_model=32, encoder_layers=3, decoder_layers=1, heads=2, ffn=48),
    "separate-vocabularies": dict(activation_function="swish", scale_embedding=True,
                                  share_encoder_decoder_embeddings=False, tie_word_embeddings=True, d_model=24,
                                  encoder_layers=2, decoder_layers=2, heads=3, ffn=40, decoder_vocab_size=V + 7),
    "silu-wide": dict(activation_function="silu", scale_embedding=True, share_encoder_decoder_embeddings=False,
                      tie_word_embeddings=False, d_model=64, encoder_layers=2, decoder_layers=2, heads=8, ffn=128),
}


def marian(name: str, seed: int = 0, init_std: float = 0.2, eos_bias: float = 1.0):
    spec = dict(CONFIGS[name])
    heads, ffn = spec.pop("heads"), spec.pop("ffn")
    torch.manual_seed(seed)
    cfg = transformers.MarianConfig(
        vocab_size=V, encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=ffn,
        decoder_ffn_dim=ffn, max_position_embeddings=64, pad_token_id=PAD, eos_token_id=EOS,
        decoder_start_token_id=PAD, forced_eos_token_id=EOS, init_std=init_std, **spec,
    )
    hf = transformers.MarianMTModel(cfg).eval()
    with torch.no_grad():  # a non-zero final_logits_bias, so its conversion is tested
        hf.final_logits_bias.normal_(0.0, 1.0)
        hf.final_logits_bias[0, EOS] = eos_bias
    return hf


def batch(seed: int, B: int = 5, S: int = 9) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(1, PAD, (B, S), generator=g)
    src[1, 6:] = PAD  # padded rows
    src[3, 2:] = PAD
    return src


def until_eos(t: torch.Tensor) -> list[list[int]]:
    rows = []
    for r in t.tolist():
        out = []
        for i in r:
            out.append(i)
            if i == EOS:
                break
        rows.append(out)
    return rows


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_logits_agree_with_transformers(name):
    from workbench.bridges.huggingface import from_huggingface

    hf = marian(name)
    model, _ = from_huggingface(hf)
    cfg = model.cfg
    assert cfg.sinusoidal_layout == "halves" and cfg.output_bias
    # transformers decides what is tied (in 5.x tie_word_embeddings=False also unties the shared embeddings):
    # the converted model shares exactly the matrices the Marian model shares
    enc, dec = hf.model.encoder.embed_tokens.weight, hf.model.decoder.embed_tokens.weight
    assert cfg.tie_src_tgt == (enc.data_ptr() == dec.data_ptr())
    assert cfg.tie_output == (hf.lm_head.weight.data_ptr() == dec.data_ptr())
    assert (model.src_embed.tokens.weight is model.tgt_embed.tokens.weight) == cfg.tie_src_tgt
    src = batch(1)
    g = torch.Generator().manual_seed(2)
    tgt = torch.randint(1, model.tgt_vocab_size - 1, (src.shape[0], 7), generator=g)
    tgt[:, 0] = PAD  # the decoder's start token
    with torch.no_grad():
        theirs = hf(input_ids=src, attention_mask=(src != PAD).long(), decoder_input_ids=tgt).logits
        ours = model(src, tgt)
    keep = (src != PAD).any(-1)
    assert theirs.shape == ours.shape
    assert float((theirs - ours)[keep].abs().max()) < 1e-4
    # a wrong layout or a dropped bias would not pass: the check can fail
    with torch.no_grad():
        model.generator.bias.zero_()
        theirs = hf(input_ids=src, attention_mask=(src != PAD).long(), decoder_input_ids=tgt).logits
        assert float((theirs - model(src, tgt))[keep].abs().max()) > 1e-2


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_and_beam_identical_to_generate(name, seed):
    from workbench.bridges.huggingface import from_huggingface
    from workbench.translation.decode import beam_search, greedy_decode

    hf = marian(name, seed=seed)
    model, _ = from_huggingface(hf)
    src, L = batch(10 + seed), 12
    mask = (src != PAD).long()
    with torch.no_grad():
        hf_greedy = hf.generate(input_ids=src, attention_mask=mask, num_beams=1, do_sample=False, max_new_tokens=L)
        hf_beam = hf.generate(input_ids=src, attention_mask=mask, num_beams=4, do_sample=False, max_new_tokens=L,
                              length_penalty=0.0, early_stopping=False)
    ours_greedy = greedy_decode(model, src, bos_id=PAD, eos_id=EOS, max_len=L)
    ours_beam = beam_search(model, src, beam=4, alpha=0.0, bos_id=PAD, eos_id=EOS, max_len=L, keep_finished=True)
    assert until_eos(hf_greedy[:, 1:]) == until_eos(ours_greedy)
    assert until_eos(hf_beam[:, 1:]) == until_eos(ours_beam)


def test_kept_beam_never_loses_a_better_finished_hypothesis():
    """Found on the random models above: the default beam lets unfinished hypotheses push out a finished one that
    later beats them all; the kept variant (transformers') returns it. Both must score what they return."""
    from workbench.bridges.huggingface import from_huggingface
    from workbench.translation.decode import beam_search

    differ = 0
    for seed in range(40):
        model, _ = from_huggingface(marian("opus-mt-like", seed=seed, eos_bias=0.0))
        src = batch(seed, B=8)
        frozen, s_frozen = beam_search(model, src, beam=4, alpha=0.0, bos_id=PAD, eos_id=EOS, max_len=12,
                                       return_scores=True)
        kept, s_kept = beam_search(model, src, beam=4, alpha=0.0, bos_id=PAD, eos_id=EOS, max_len=12,
                                   return_scores=True, keep_finished=True)
        assert bool((s_kept >= s_frozen - 1e-5).all())  # never worse by its own score
        differ += int((s_kept > s_frozen + 1e-5).sum())
    assert differ > 0  # the two variants are different algorithms on these models


def test_export_import_round_trip_random_workbench_models(tmp_path, subword_tokenizer):
    from workbench.bridges.huggingface import from_huggingface, to_huggingface
    from workbench.model.config import ModelConfig
    from workbench.model.transformer import build_model

    tok = subword_tokenizer
    src_ids = tok.encode_src(["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee auf der Wiese."])
    S = max(map(len, src_ids))
    src = torch.tensor([r + [0] * (S - len(r)) for r in src_ids])
    tgt = torch.tensor([r[:6] for r in tok.encode_tgt(["A man rides a bike.", "Two dogs play in the snow."])])
    for i, (act, tie_output, layout) in enumerate([("relu", True, "interleaved"), ("gelu", False, "interleaved"),
                                                   ("swish", True, "halves")]):
        torch.manual_seed(i)
        cfg = ModelConfig(d_model=32, n_heads=4, d_ff=64, n_enc_layers=2, n_dec_layers=2, dropout=0.0, max_len=64,
                          activation=act, tie_output=tie_output, tie_src_tgt=True, sinusoidal_layout=layout)
        model = build_model(cfg, tok.src_vocab_size, tok.tgt_vocab_size).eval()
        with torch.no_grad():  # LayerNorms away from the identity, so a wrong permutation shows
            for p in model.parameters():
                if p.dim() == 1:
                    p.add_(0.3 * torch.randn_like(p))
        folder = to_huggingface(model, tok, tmp_path / f"m{i}")
        hf = transformers.MarianMTModel.from_pretrained(folder).eval()
        with torch.no_grad():
            ours = model(src, tgt)
            theirs = hf(input_ids=src, attention_mask=(src != 0).long(), decoder_input_ids=tgt).logits
            back, _ = from_huggingface(hf)
            again = back(src, tgt)
        assert float((ours - theirs).abs().max()) < 1e-4
        assert float((ours - again).abs().max()) < 1e-4
        hf_tok = transformers.AutoTokenizer.from_pretrained(folder)
        assert hf_tok(["Ein Mann fährt Fahrrad."])["input_ids"] == [src_ids[0]]


def test_export_refuses_what_marian_cannot_hold(subword_tokenizer, tmp_path):
    from workbench.bridges.huggingface import to_huggingface
    from workbench.model.config import ModelConfig
    from workbench.model.transformer import build_model

    V = subword_tokenizer.src_vocab_size
    for field, value in (("norm_first", True), ("positional", "learned"), ("d_head", 4)):
        model = build_model(ModelConfig(d_model=32, n_heads=4, d_ff=64, n_enc_layers=1, n_dec_layers=1, max_len=32,
                                        **{field: value}), V, V)
        with pytest.raises(BridgeError, match=field):
            to_huggingface(model, subword_tokenizer, tmp_path / field)


def test_unsupported_architecture_names_the_supported_ones():
    from workbench.bridges.huggingface import from_huggingface

    cfg = transformers.BartConfig(vocab_size=30, d_model=16, encoder_layers=1, decoder_layers=1,
                                  encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                                  decoder_ffn_dim=32, max_position_embeddings=32)
    with pytest.raises(BridgeError, match="MarianMTModel"):
        from_huggingface(transformers.BartForConditionalGeneration(cfg))


@pytest.mark.parametrize(("field", "value"), [("decoder_attention_heads", 2), ("decoder_ffn_dim", 32),
                                              ("activation_function", "gelu_new")])
def test_unrepresentable_field_is_named(field, value):
    from workbench.bridges.huggingface import from_huggingface

    fields = dict(vocab_size=V, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                  decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=32,
                  pad_token_id=PAD, decoder_start_token_id=PAD)
    cfg = transformers.MarianConfig(**{**fields, field: value})
    with pytest.raises(BridgeError, match=field):
        from_huggingface(transformers.MarianMTModel(cfg))


def test_pickled_weights_with_a_payload_are_refused(tmp_path):
    from workbench.bridges.huggingface import load_marian

    marker = tmp_path / "payload-ran"

    class Payload:
        def __reduce__(self):
            return (Path.touch, (marker,))

    folder = tmp_path / "model"
    marian("opus-mt-like").config.save_pretrained(folder)
    with open(folder / "pytorch_model.bin", "wb") as f:
        pickle.dump({"model.shared.weight": Payload()}, f)
    with pytest.raises(BridgeError, match="refused"):
        load_marian(folder)
    assert not marker.exists()


def test_weights_load_from_safetensors(tmp_path, spm_marian_tokenizer):
    from workbench.bridges.huggingface import load_marian

    hf = marian("opus-mt-like")
    hf.save_pretrained(tmp_path)
    spm_marian_tokenizer.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").is_file() and not (tmp_path / "pytorch_model.bin").exists()
    model, tok, info = load_marian(tmp_path)
    src = batch(3)
    with torch.no_grad():
        diff = (hf(input_ids=src, attention_mask=(src != PAD).long(), decoder_input_ids=torch.full((5, 1), PAD)).logits
                - model(src, torch.full((5, 1), PAD))).abs().max()
    assert float(diff) < 1e-4 and info["source"] == "huggingface"


def test_offline_hub_model_says_so_in_one_line(tmp_path, monkeypatch):
    import workbench as wb
    from workbench.bridges.huggingface import hub_pretrained

    with pytest.raises(BridgeError) as err:
        hub_pretrained("Helsinki-NLP/opus-mt-de-en", cache_dir=tmp_path, local_only=True)
    message = str(err.value)
    assert "\n" not in message and "Helsinki-NLP/opus-mt-de-en" in message and "hf download" in message
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(BridgeError, match="not in the local Hugging Face cache"):
        wb.pretrained("Helsinki-NLP/opus-mt-de-en")


# -- the tokenizer wrapper, with a sentencepiece model trained offline on Multi30k ---------------------------------
@pytest.fixture(scope="module")
def spm_marian_tokenizer(small_pairs, tmp_path_factory):
    spm = require_module("sentencepiece", 'pip install -e ".[hf]"')
    folder = tmp_path_factory.mktemp("spm")
    for side, col in (("source", 0), ("target", 1)):
        text = folder / f"{side}.txt"
        text.write_text("\n".join(p[col] for p in small_pairs[:2000]) + "\n", encoding="utf-8")
        spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(folder / side), vocab_size=300,
                                       model_type="unigram", character_coverage=1.0, bos_id=-1, eos_id=-1,
                                       unk_id=0, minloglevel=2)
        (folder / f"{side}.model").rename(folder / f"{side}.spm")
    pieces = []
    for side in ("source", "target"):
        proc = spm.SentencePieceProcessor(model_file=str(folder / f"{side}.spm"))
        pieces += [proc.id_to_piece(i) for i in range(proc.get_piece_size())]
    vocab = {"</s>": 0, "<unk>": 1}
    for p in pieces:
        vocab.setdefault(p, len(vocab))
    vocab["<pad>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    tok = transformers.MarianTokenizer(source_spm=str(folder / "source.spm"), target_spm=str(folder / "target.spm"),
                                       vocab=str(folder / "vocab.json"))
    tok.vocab_size_for_tests = len(vocab)
    return tok


def test_tokenizer_wrapper_matches_the_marian_tokenizer(spm_marian_tokenizer, small_pairs):
    from workbench.bridges.huggingface import MarianTokenizerAdapter

    hf_tok = spm_marian_tokenizer
    tok = MarianTokenizerAdapter(hf_tok, decoder_start_id=hf_tok.pad_token_id)
    texts = [p[0] for p in small_pairs[:20]]
    targets = [p[1] for p in small_pairs[:20]]
    assert tok.encode_src(texts) == hf_tok(texts)["input_ids"]
    assert all(r[-1] == tok.eos_id for r in tok.encode_src(texts))
    encoded = tok.encode_tgt(targets)
    assert all(r[0] == tok.pad_id == tok.bos_id and r[-1] == tok.eos_id for r in encoded)
    assert tok.decode_tgt([r[1:] for r in encoded]) == [" ".join(t.split()) for t in targets]
    assert len(tok.tokens_src(texts[0])) == len(tok.encode_src([texts[0]])[0])
    assert len(tok.tokens_tgt(targets[0])) == len(encoded[0])
    with pytest.raises(Exception, match="list"):
        tok.encode_src("one string")


def test_translate_with_a_converted_model_matches_generate(spm_marian_tokenizer, small_pairs):
    from workbench.bridges.huggingface import from_huggingface
    from workbench.translation.decode import translate

    hf_tok = spm_marian_tokenizer
    n = len(hf_tok)
    torch.manual_seed(0)
    cfg = transformers.MarianConfig(vocab_size=n, d_model=32, encoder_layers=2, decoder_layers=2,
                                    encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                                    decoder_ffn_dim=64, max_position_embeddings=128, pad_token_id=hf_tok.pad_token_id,
                                    eos_token_id=hf_tok.eos_token_id, decoder_start_token_id=hf_tok.pad_token_id,
                                    forced_eos_token_id=hf_tok.eos_token_id, activation_function="swish",
                                    scale_embedding=True, init_std=0.2)
    hf = transformers.MarianMTModel(cfg).eval()
    model, tok = from_huggingface(hf, hf_tok)
    texts = [p[0] for p in small_pairs[:6]]
    ours = translate(model, tok, texts, beam=1, max_extra=5)
    theirs = []
    for text in texts:  # one at a time: the budget is the source length + 5, as translate's
        enc = hf_tok([text], return_tensors="pt")
        out = hf.generate(**enc, num_beams=1, do_sample=False, max_new_tokens=enc["input_ids"].shape[1] + 5)
        theirs.append(" ".join(hf_tok.batch_decode(out, skip_special_tokens=True)[0].split()))
    assert ours == theirs


# -- the shipped model, exported --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def exported_small(tmp_path_factory):
    from workbench.bridges.huggingface import to_huggingface
    from workbench.translation.shipped import pretrained

    model, tok, _ = pretrained("small-de-en")
    folder = to_huggingface(model, tok, tmp_path_factory.mktemp("small-hf"))
    return model, tok, folder


def test_exported_small_de_en_generate_is_token_identical(exported_small, multi30k_dir):
    from workbench.translation.data import load_multi30k
    from workbench.translation.decode import beam_search, greedy_decode

    model, tok, folder = exported_small
    hf = transformers.MarianMTModel.from_pretrained(folder).eval()
    hf_tok = transformers.AutoTokenizer.from_pretrained(folder)
    sources = [p[0] for p in load_multi30k("test_2016_flickr", "de", "en", data_dir=multi30k_dir, limit=24)]
    enc = hf_tok(sources, return_tensors="pt", padding=True)
    L = 60
    with torch.no_grad():
        greedy = hf.generate(**enc, num_beams=1, do_sample=False, max_new_tokens=L)[:, 1:]
        beam = hf.generate(**enc, num_beams=4, do_sample=False, max_new_tokens=L, length_penalty=0.0,
                           early_stopping=False)[:, 1:]
    src = enc["input_ids"]
    ours_greedy = greedy_decode(model, src, bos_id=tok.bos_id, eos_id=tok.eos_id, max_len=L)
    ours_beam = beam_search(model, src, beam=4, alpha=0.0, bos_id=tok.bos_id, eos_id=tok.eos_id, max_len=L,
                            keep_finished=True)

    def rows(t):
        return [r[: r.index(tok.eos_id) + 1] if tok.eos_id in r else r for r in t.tolist()]

    assert rows(greedy) == rows(ours_greedy)
    assert rows(beam) == rows(ours_beam)
    assert hf_tok.batch_decode(greedy, skip_special_tokens=True)[0].split() == tok.decode_tgt(ours_greedy)[0].split()


def test_cli_export_ctranslate2_translates_as_we_do(tmp_path, multi30k_dir):
    require_module("ctranslate2", 'pip install -e ".[hf]"')
    from workbench.bridges.ctranslate2 import ct2_translate, ct2_translator
    from workbench.tools.cli.main import main
    from workbench.translation.data import load_multi30k
    from workbench.translation.decode import translate
    from workbench.translation.shipped import pretrained

    assert main(["export", "--to", "ctranslate2", "small-de-en", str(tmp_path / "ct2")]) == 0
    assert main(["export", "--to", "huggingface", "small-de-en", str(tmp_path / "hf")]) == 0
    assert main(["export", "--to", "huggingface", "small-de-en", str(tmp_path / "hf")]) != 0  # not empty: refused
    model, tok, _ = pretrained("small-de-en")
    sources = [p[0] for p in load_multi30k("test_2016_flickr", "de", "en", data_dir=multi30k_dir, limit=24)]
    threads = torch.get_num_threads()
    translator = ct2_translator(tmp_path / "ct2", intra_threads=1)
    assert torch.get_num_threads() == threads  # opening it left PyTorch's thread count alone
    assert ct2_translate(translator, tok, sources, beam=1) == translate(model, tok, sources, beam=1)
    # --force writes the conversion's files into a folder the user keeps other things in, and keeps them
    # (CTranslate2's own force deletes the folder first: the probe lost a thesis and a subfolder that way)
    kept = tmp_path / "mine"
    (kept / "sub").mkdir(parents=True)
    (kept / "thesis.txt").write_text("three years of work")
    (kept / "model.bin").write_bytes(b"an older conversion")
    assert main(["export", "--to", "ctranslate2", "small-de-en", str(kept)]) != 0  # not empty: refused
    assert main(["export", "--to", "ctranslate2", "small-de-en", str(kept), "--force"]) == 0
    assert (kept / "thesis.txt").read_text() == "three years of work" and (kept / "sub").is_dir()
    assert (kept / "model.bin").stat().st_size > 1000 and not [p for p in kept.iterdir() if p.name.startswith(".ct2")]
    assert ct2_translate(ct2_translator(kept, intra_threads=1), tok, sources[:4], beam=1) == translate(
        model, tok, sources[:4], beam=1)
    assert main(["export", "--to", "huggingface", "small-de-en", str(tmp_path / "hf8"), "--quantization", "int8"]) != 0


def test_new_model_config_fields_are_validated_and_default_to_the_paper():
    from workbench.errors import ConfigError
    from workbench.model.config import ModelConfig
    from workbench.model.positional import sinusoidal_table

    cfg = ModelConfig()
    assert (cfg.sinusoidal_layout, cfg.output_bias, cfg.activation) == ("interleaved", False, "relu")
    with pytest.raises(ConfigError, match="sinusoidal_layout"):
        ModelConfig(sinusoidal_layout="sines-first")
    with pytest.raises(ConfigError, match="output_bias"):
        ModelConfig(output_bias=1)
    with pytest.raises(ConfigError, match="activation"):
        ModelConfig(activation="tanh")
    for d in (8, 9):  # even and odd widths: the same columns, sines first
        paper, halves = sinusoidal_table(20, d), sinusoidal_table(20, d, layout="halves")
        assert torch.equal(halves, torch.cat([paper[:, 0::2], paper[:, 1::2]], dim=1))
        assert not torch.equal(halves, paper)


def test_the_inspectors_open_a_converted_marian_model():
    """Capture, head ablation, rollout and attribution run on an imported Marian model and change what they should."""
    import workbench as wb
    from workbench.bridges.huggingface import from_huggingface
    from workbench.inspect.attribution import attribute
    from workbench.inspect.flow import attention_rollout
    from workbench.inspect.intervene import ablate_heads

    hf = marian("opus-mt-like")
    model, _ = from_huggingface(hf)
    src = batch(5)[:1, :6]
    tgt = torch.tensor([[PAD, 3, 7, 11]])
    with torch.no_grad():
        plain = model(src, tgt)
        with wb.capture_attention(model) as cache:
            captured = model(src, tgt)
        with ablate_heads(model, [("dec.cross", 1, None)]):
            ablated = model(src, tgt)
    assert torch.equal(plain, captured) and wb.hooks_remaining(model) == 0
    assert cache["dec.cross", 1].shape == (1, 4, 4, 6)
    # the converted cross-attention weights are transformers' own
    hf.set_attn_implementation("eager")  # transformers returns attention weights from its eager path only
    with torch.no_grad():
        theirs = hf(input_ids=src, decoder_input_ids=tgt, output_attentions=True).cross_attentions[1]
    assert float((theirs - cache["dec.cross", 1]).abs().max()) < 1e-5
    assert float((ablated - plain).abs().max()) > 1e-3  # switching a layer's heads off changes the output
    rollout = attention_rollout([cache["enc.self", layer][0] for layer in range(2)])
    assert torch.allclose(rollout.sum(-1), torch.ones(6, dtype=rollout.dtype))
    att = attribute(model, src[0], tgt[0], targets=[3, 7, 11, EOS], method="saliency")
    assert att.scores.shape[-1] == 6 and bool(torch.isfinite(torch.as_tensor(att.scores)).all())
