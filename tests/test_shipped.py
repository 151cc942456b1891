"""Shipped models: safetensors + JSON config + tokenizer + card, verified by SHA-256 before loading."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch

import workbench as wb
from workbench.tools.release import export_weights, half_roundtrip, write_card
from workbench.translation.shipped import (
    PretrainedError,
    list_pretrained,
    load_any,
    pretrained,
    sha256_file,
)


def _card(name: str) -> dict:
    scores = {"bleu": 1.0, "chrf": 2.0, "tok_bleu": 1.5, "signature": "sig"}
    return {
        "name": name, "title": "test model", "summary": "", "arch": "transformer", "src_lang": "de", "tgt_lang": "en",
        "parameters": 1, "model_cfg": {}, "vocab_size": 1, "bleu": {}, "scores": {"val": {"greedy": scores}},
        "signature": "sig", "weights_chosen": "last", "training": {}, "reproduce": {"train": "t", "build": "b"},
        "commit": "", "hardware": "", "data": "", "limits": ["short"],
    }


@pytest.fixture()
def tiny_shipped(tmp_path, subword_tokenizer):
    torch.manual_seed(0)
    v = subword_tokenizer.src_vocab_size
    model = wb.build_model(wb.preset("tiny", tie_src_tgt=True), v, v, pad_id=subword_tokenizer.pad_id).eval()
    export_weights(model, subword_tokenizer, tmp_path / "tiny-de-en", "de", "en")
    write_card(tmp_path / "tiny-de-en", _card("tiny-de-en"))
    return tmp_path, model, subword_tokenizer


def test_roundtrip_loads_float32_equal_to_half_rounded_weights(tiny_shipped):
    root, model, tok = tiny_shipped
    loaded, loaded_tok, card = pretrained("tiny-de-en", root=root)
    assert list_pretrained(root) == ["tiny-de-en"]
    assert card["name"] == "tiny-de-en" and set(card["sha256"]) == {"model.safetensors", "config.json", "tokenizer.json", "CARD.md"}
    assert all(p.dtype == torch.float32 for p in loaded.parameters())
    # tied weights stay tied after loading (one matrix for both embeddings and the projection)
    assert loaded.src_embed.tokens.weight is loaded.tgt_embed.tokens.weight
    assert loaded.generator.weight is loaded.tgt_embed.tokens.weight
    src, tgt = torch.randint(4, tok.src_vocab_size, (2, 6)), torch.randint(4, tok.src_vocab_size, (2, 5))
    expected = half_roundtrip(model)(src, tgt)
    assert torch.equal(loaded(src, tgt), expected)
    assert loaded_tok.to_json() == tok.to_json()
    safetensors_bytes = (root / "tiny-de-en" / "model.safetensors").stat().st_size
    n_params = sum(p.numel() for p in model.parameters())
    assert safetensors_bytes < 2 * n_params + 16_384, "weights are not stored in half precision (2 bytes each)"


def test_corrupted_file_is_refused_and_left_untouched(tiny_shipped):
    root, _, _ = tiny_shipped
    weights = root / "tiny-de-en" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-10] ^= 0xFF
    weights.write_bytes(bytes(data))
    before = sha256_file(weights)
    with pytest.raises(PretrainedError, match=r"model\.safetensors does not match its recorded SHA-256"):
        pretrained("tiny-de-en", root=root)
    assert sha256_file(weights) == before and weights.read_bytes() == bytes(data)


def test_missing_file_and_unknown_name_are_clear_errors(tiny_shipped):
    root, _, _ = tiny_shipped
    with pytest.raises(PretrainedError, match=r"no model folder named 'nope' under root=.*holds \['tiny-de-en'\]"):
        pretrained("nope", root=root)
    with pytest.raises(PretrainedError, match=r"elsewhere.: that root is not a folder"):
        pretrained("tiny-de-en", root=root / "elsewhere")
    with pytest.raises(PretrainedError, match=r"holds no model folder.*Hugging Face model: open it with "
                                              r"workbench.pretrained without root"):
        pretrained("Org/name", root=root / "tiny-de-en")
    with pytest.raises(PretrainedError, match=r"no shipped model named 'nope': choose one of \['gru-de-en', "):
        pretrained("nope")  # the shipped models
    (root / "tiny-de-en" / "tokenizer.json").unlink()
    with pytest.raises(PretrainedError, match="tokenizer.json is missing"):
        pretrained("tiny-de-en", root=root)


def test_card_markdown_names_the_recipe(tiny_shipped):
    root, _, _ = tiny_shipped
    text = (root / "tiny-de-en" / "CARD.md").read_text()
    assert "reproduce: `t`" in text and "sacreBLEU" in text and "short" in text
    card = json.loads((root / "tiny-de-en" / "card.json").read_text())
    assert card["sha256"]["CARD.md"] == sha256_file(root / "tiny-de-en" / "CARD.md")


SHIPPED = list_pretrained()


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_model_is_small_verified_and_loads(name):
    folder = Path(wb.shipped.WEIGHTS_DIR) / name
    assert (folder / "model.safetensors").stat().st_size <= 20 * 2**20
    model, tok, card = pretrained(name)
    assert card["parameters"] == sum(p.numel() for p in model.parameters())
    for split in ("val", "test_2016_flickr"):
        for beam in ("greedy", "beam4"):
            s = card["scores"][split][beam]
            assert s["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
            assert 0 < s["bleu"] < 100 and 0 < s["chrf"] < 100


def test_a_built_folder_without_its_card_keeps_its_languages(tmp_path):
    """The probe's finding: a fr-de folder without card.json (an interrupted build) was evaluated as de-en."""
    from workbench.tools.release import export_weights
    from workbench.translation.shipped import load_any

    model, tok, _ = pretrained("small-de-en")
    export_weights(model, tok, tmp_path / "built", "fr", "de")
    assert load_any(tmp_path / "built")[2]["extra"] == {"src_lang": "fr", "tgt_lang": "de"}


@pytest.mark.parametrize("filename", ["model.safetensors", "tokenizer.json"])
def test_corrupted_copy_of_the_shipped_model_is_refused_and_left_untouched(tmp_path, filename):
    source = Path(wb.shipped.WEIGHTS_DIR) / "small-de-en"
    shutil.copytree(source, tmp_path / "small-de-en")
    target = tmp_path / "small-de-en" / filename
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit in the middle of the file
    target.write_bytes(bytes(data))
    with pytest.raises(PretrainedError, match=re.escape(filename) + " does not match its recorded SHA-256") as info:
        pretrained("small-de-en", root=tmp_path)
    # the advice fits a copy: git and pip restore the package's own folder, not this one
    assert "copy the folder" in str(info.value) and "git checkout" not in str(info.value)
    assert target.read_bytes() == bytes(data), "the refused copy was modified"
    assert "git checkout -- workbench/pretrained" in wb.shipped.restore_hint(source)
    # the installed model itself is untouched and still verifies
    assert sha256_file(source / filename) == wb.shipped.read_card("small-de-en")["sha256"][filename]


@pytest.mark.slow
@pytest.mark.parametrize("decoding", ["greedy", "beam4"])
@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_model_reproduces_its_card_bleu_on_test(name, decoding, multi30k_dir):
    """The whole of test_2016_flickr decoded again, greedy and with beam 4 at the card's length penalty: sacreBLEU
    within 0.1 of the card (sacreBLEU's rounding and the CPU's summation order), with the card's signature."""
    from workbench.translation.data import load_multi30k
    from workbench.translation.pipeline import score

    model, tok, card = pretrained(name)
    pairs = load_multi30k("test_2016_flickr", card["src_lang"], card["tgt_lang"], data_dir=multi30k_dir)
    assert len(pairs) == card["scores"]["test_2016_flickr"][decoding]["n_sentences"] == 1000
    beam = {"greedy": 1, "beam4": 4}[decoding]
    got = score(model, tok, pairs, beam=beam, alpha=wb.shipped.card_alpha(card))
    assert abs(got["bleu"] - card["scores"]["test_2016_flickr"][decoding]["bleu"]) <= 0.1
    assert got["signature"] == card["scores"]["test_2016_flickr"][decoding]["signature"]


def test_shipped_names_resolve_in_the_cli_loader(tiny_shipped, monkeypatch):
    root, _, _ = tiny_shipped
    monkeypatch.setattr(wb.shipped, "WEIGHTS_DIR", root)
    model, tok, info = load_any("tiny-de-en")
    assert info["card"]["name"] == "tiny-de-en"
    shutil.rmtree(root / "tiny-de-en")
    with pytest.raises(wb.CheckpointError, match="shipped model name"):
        load_any("tiny-de-en")


def test_the_two_translators_the_notebooks_need_are_shipped():
    assert {"small-de-en", "gru-de-en"} <= set(SHIPPED)
    small, gru = wb.shipped.read_card("small-de-en"), wb.shipped.read_card("gru-de-en")
    # the fair comparison the notebooks draw: same data, same tokenizer kind, same budget and machine
    assert small["training"]["budget"] == gru["training"]["budget"]
    assert small["vocab_size"] == gru["vocab_size"]


def test_length_penalty_is_chosen_on_val_by_beam4_bleu(monkeypatch):
    """The highest val beam-4 score wins (a tie goes to the smaller alpha); only val is decoded for the choice."""
    from workbench.tools import release

    val = [("ein hund", "a dog")]
    by_alpha = {0.6: 30.0, 1.0: 31.5, 1.4: 31.5, 1.8: 29.0, 2.2: 20.0}
    seen = []

    def fake_score(model, tok, pairs, beam, device="cpu", alpha=0.6):
        seen.append((pairs is val, beam, alpha))
        return {"bleu": by_alpha[alpha]}

    monkeypatch.setattr(release, "score", fake_score)
    best, scores = release.choose_length_penalty(None, None, val)
    assert best == 1.0
    assert scores == {"0.6": 30.0, "1": 31.5, "1.4": 31.5, "1.8": 29.0, "2.2": 20.0}
    assert seen == [(True, 4, a) for a in release.LENGTH_PENALTIES]


def test_cards_length_penalty_is_the_default_for_shipped_models(tiny_shipped, monkeypatch):
    from workbench.translation import shipped

    root, _, _ = tiny_shipped
    monkeypatch.setattr(wb.shipped, "WEIGHTS_DIR", root)
    assert shipped.default_alpha(load_any("tiny-de-en")[2]) == 0.6  # a card without a decoding record: GNMT's 0.6
    card = {k: v for k, v in json.loads((root / "tiny-de-en" / "card.json").read_text()).items()
            if k not in ("sha256", "bytes")}
    write_card(root / "tiny-de-en", {**card, "decoding": {"beam": 4, "alpha": 1.4, "val_beam4_bleu_by_alpha": {"1.4": 2.0}}})
    assert shipped.default_alpha(load_any("tiny-de-en")[2]) == 1.4
    assert "alpha = 1.4" in (root / "tiny-de-en" / "CARD.md").read_text()
    assert shipped.default_alpha({"extra": {}}) == 0.6  # a checkpoint file: 0.6


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_cards_record_the_length_penalty_chosen_on_val(name):
    card = wb.shipped.read_card(name)
    by_alpha = card["decoding"]["val_beam4_bleu_by_alpha"]
    assert by_alpha[f"{card['decoding']['alpha']:g}"] == max(by_alpha.values())
    # the card's val beam-4 score is the chosen alpha's decode
    assert card["scores"]["val"]["beam4"]["bleu"] == by_alpha[f"{card['decoding']['alpha']:g}"]


def test_build_chooses_the_weights_on_val_among_averaging_windows(tmp_path, subword_tokenizer, small_pairs,
                                                                  monkeypatch):
    """`pretrained build --average 2 4 9`: the last checkpoint and the averages of the last 2 and 4 snapshots are
    candidates (9 is more than the run kept, so skipped), the one with the best val greedy BLEU ships, rounded to
    float16, and the card records the windows and the build command that used them."""
    from workbench.tools import release
    from workbench.tools.release import build_shipped
    from workbench.translation.checkpoint import load_model, save_checkpoint
    from workbench.translation.shipped import load_folder

    tok = subword_tokenizer
    v = tok.src_vocab_size
    run = tmp_path / "run"
    torch.manual_seed(0)
    model = wb.build_model(wb.preset("tiny", tie_src_tgt=True), v, v, pad_id=tok.pad_id)
    for k in range(5):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.05 * torch.randn_like(p))
        save_checkpoint(run / f"ckpt_step{k * 10:07d}.pt", model, tok, step=k * 10, extra={"src_lang": "de", "tgt_lang": "en"})
    save_checkpoint(run / "last.pt", model, tok, step=40, extra={"src_lang": "de", "tgt_lang": "en"})
    pairs = small_pairs[:3]
    monkeypatch.setattr(release, "load_multi30k", lambda split, src, tgt, data_dir=None: pairs)
    monkeypatch.setattr(release, "LENGTH_PENALTIES", (0.6,))  # the alpha choice has its own test

    card = build_shipped(run, "tiny-de-en", tmp_path / "tiny-de-en", train_command="t", title="tiny",
                         summary="", average=(2, 4, 9))

    assert set(card["val_choice"]) == {"last checkpoint", "average of the last 2 step snapshots",
                                       "average of the last 4 step snapshots"}
    best = max(card["val_choice"], key=lambda k: card["val_choice"][k]["val_greedy_bleu"])
    assert card["weights_chosen"] == best
    assert card["average_windows"] == [2, 4, 9] and card["reproduce"]["build"].endswith("--average 2 4 9")
    chosen = {"last checkpoint": run / "last.pt", "average of the last 2 step snapshots": run / "averaged2.pt",
              "average of the last 4 step snapshots": run / "averaged4.pt"}[best]
    expected, _, _ = load_model(chosen)
    shipped, _ = load_folder(tmp_path / "tiny-de-en")
    got = shipped.state_dict()
    for name, t in half_roundtrip(expected).state_dict().items():
        assert torch.equal(got[name], t), name
    averaged4, _, _ = load_model(run / "averaged4.pt")
    snaps = [load_model(run / f"ckpt_step{k * 10:07d}.pt")[0].state_dict() for k in range(1, 5)]
    w = "generator.weight" if "generator.weight" in snaps[0] else next(iter(snaps[0]))
    assert torch.allclose(averaged4.state_dict()[w], sum(s[w] for s in snaps) / 4, atol=1e-6)


@pytest.mark.parametrize("windows", [(0,), (5, -1), ()])
def test_build_refuses_an_averaging_window_of_no_snapshot(tmp_path, windows):
    from workbench.errors import CheckpointError
    from workbench.tools.release import build_shipped

    with pytest.raises(CheckpointError, match="each averaging window is a whole number"):
        build_shipped(tmp_path / "run", "x", tmp_path / "out", "workbench train ...", "t", "s", average=windows)
    assert not (tmp_path / "out").exists()
