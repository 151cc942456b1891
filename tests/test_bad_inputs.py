"""The catalogue of bad inputs and faults: each gives one clear error (or a defined result) and loses nothing."""

from __future__ import annotations

import errno
import gzip
import shutil
import urllib.error
import urllib.request

import pytest
import torch

import workbench as wb
from workbench.translation.checkpoint import load_checkpoint, load_model, load_state, save_checkpoint
from workbench.translation.data import load_multi30k, load_parallel_text
from workbench.translation.decode import beam_search, translate
from workbench.translation.tokenizer import WordTokenizer

TOK = WordTokenizer.train([("ein mann fährt fahrrad", "a man rides a bike")])


def _model(**kw):
    torch.manual_seed(0)
    return wb.build_model(wb.preset("tiny", max_len=16, **kw), TOK.src_vocab_size, TOK.tgt_vocab_size).eval()


def _offline(monkeypatch):
    def refuse(*a, **k):
        raise urllib.error.URLError("offline")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)


def _saved(tmp_path):
    return save_checkpoint(tmp_path / "good.pt", _model(), TOK)


CASES = {}


def case(name, error, match):
    def register(fn):
        CASES[name] = (fn, error, match)
        return fn

    return register


@case("d_model not divisible by n_heads", wb.ConfigError, "divisible by n_heads")
def _c1(tmp_path, mp):
    wb.preset("tiny", d_model=30)


@case("negative dropout", wb.ConfigError, "dropout=-0.1")
def _c2(tmp_path, mp):
    wb.preset("tiny", dropout=-0.1)


@case("unknown positional kind", wb.ConfigError, "positional='rotary'")
def _c3(tmp_path, mp):
    wb.preset("tiny", positional="rotary")


@case("unknown preset", wb.ConfigError, "unknown preset 'medium'")
def _c4(tmp_path, mp):
    wb.preset("medium")


@case("bad training config", wb.ConfigError, "label_smoothing=1.5")
def _c5(tmp_path, mp):
    wb.TrainConfig(label_smoothing=1.5)


@case("a run with no budget at all", wb.ConfigError, "needs a budget.*--epochs N.*--max-steps N.*--max-minutes M")
def _c5b(tmp_path, mp):
    from workbench.translation.run import RunConfig

    RunConfig()  # TrainConfig() has no epoch limit, no step and no time budget: nothing would end the run


@case("fit with no budget at all", wb.ConfigError, "needs a budget")
def _c5c(tmp_path, mp):
    from workbench.translation.train import fit

    fit(_model(), TOK, [("ein mann", "a man")] * 8, [("ein mann", "a man")], wb.TrainConfig(device="cpu"),
        out_dir=tmp_path)


@case("unknown architecture in a run", wb.ConfigError, r"arch='gru'.*\['rnn', 'transformer'\]")
def _c5d(tmp_path, mp):
    from workbench.translation.run import RunConfig

    RunConfig.from_flat(arch="gru", epochs=1)


@case("unknown preset in a run", wb.ConfigError, r"preset='medium'.*\['tiny', 'small', 'base', 'big'\]")
def _c5e(tmp_path, mp):
    from workbench.translation.run import RunConfig

    RunConfig.from_flat(preset="medium", epochs=1)


@case("own training source without its target", wb.ConfigError, "train_src/train_tgt.*give both")
def _c5f(tmp_path, mp):
    from workbench.translation.run import RunConfig

    RunConfig.from_flat(train_src="train.de", epochs=1)


@case("misspelt run setting", wb.ConfigError, r"unknown run settings \['epoch'\]")
def _c5g(tmp_path, mp):
    from workbench.translation.run import RunConfig

    RunConfig.from_flat(epoch=3)


@case("missing data offline, no cache", wb.DataError, "put these files at")
def _c6(tmp_path, mp):
    _offline(mp)
    load_multi30k("val", data_dir=tmp_path / "empty")


@case("checksum mismatch", wb.ChecksumError, "val.de.gz")
def _c7(tmp_path, mp):
    from tests.conftest import REPO

    src = REPO.parent / "shared" / "data" / "multi30k"
    shutil.copy(src / "val.en.gz", tmp_path / "val.en.gz")
    with gzip.open(tmp_path / "val.de.gz", "wt") as f:
        f.write("kaputt\n")
    load_multi30k("val", data_dir=tmp_path, download=False)


@case("empty file", wb.DataError, "is empty")
def _c8(tmp_path, mp):
    (tmp_path / "a.txt").write_text("")
    (tmp_path / "b.txt").write_text("x\n")
    load_parallel_text(tmp_path / "a.txt", tmp_path / "b.txt")


@case("misaligned parallel files", wb.DataError, "has 2 lines but")
def _c9(tmp_path, mp):
    (tmp_path / "a.txt").write_text("eins\nzwei\n")
    (tmp_path / "b.txt").write_text("one\n")
    load_parallel_text(tmp_path / "a.txt", tmp_path / "b.txt")


@case("truncated checkpoint", wb.CheckpointError, "truncated or corrupt")
def _c10(tmp_path, mp):
    data = _saved(tmp_path).read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 3])
    load_checkpoint(tmp_path / "cut.pt")


@case("checkpoint that is not ours", wb.CheckpointError, "not an Attention Workbench checkpoint")
def _c11(tmp_path, mp):
    torch.save({"state_dict": {}}, tmp_path / "other.pt")
    load_checkpoint(tmp_path / "other.pt")


@case("checkpoint with a pickle payload", wb.CheckpointError, "weights_only")
def _c12(tmp_path, mp):
    class Payload:
        def __reduce__(self):
            return (print, ("this must never run",))

    torch.save({"format": "attention-workbench/1", "x": Payload()}, tmp_path / "evil.pt")
    load_checkpoint(tmp_path / "evil.pt")


@case("checkpoint from another config", wb.CheckpointError, "another config or vocabulary")
def _c13(tmp_path, mp):
    state = load_checkpoint(_saved(tmp_path))
    load_state(_model(d_model=48), state["model"])


@case("missing checkpoint", wb.CheckpointError, "does not exist")
def _c14(tmp_path, mp):
    load_model(tmp_path / "nope.pt")


@case("sentence longer than max_len", wb.InputTextError, "more than the model's max_len=16")
def _c15(tmp_path, mp):
    translate(_model(), TOK, [" ".join(["mann"] * 40)])


@case("a string instead of a list of sentences", wb.InputTextError, "wrap it in a list")
def _c16(tmp_path, mp):
    translate(_model(), TOK, "ein mann")


@case("beam size 0", wb.DecodingError, "beam size 0")
def _c17(tmp_path, mp):
    beam_search(_model(), torch.tensor([[4, 5, 3]]), beam=0)


@case("beam larger than the vocabulary", wb.DecodingError, "larger than the target vocabulary")
def _c18(tmp_path, mp):
    beam_search(_model(), torch.tensor([[4, 5, 3]]), beam=1000)


@case("misspelt notebook parameter", wb.NotebookParameterError, "did you mean SMOKE")
def _c19(tmp_path, mp):
    from workbench.tools.notebooks import check_parameters, list_notebooks

    check_parameters(list_notebooks()[0], {"SMOKEE": True})


@case("ill-typed notebook parameter", wb.NotebookParameterError, "SEED")
def _c20(tmp_path, mp):
    from workbench.tools.notebooks import check_parameters, list_notebooks

    check_parameters(list_notebooks()[0], {"SEED": "zero"})


@case("NaN loss during training", wb.TrainingError, "loss became nan")
def _c21(tmp_path, mp):
    from workbench.translation.train import fit

    model = _model()
    with torch.no_grad():
        model.generator.weight.fill_(float("nan"))
    fit(model, TOK, [("ein mann", "a man")] * 8, [("ein mann", "a man")], wb.TrainConfig(epochs=1, eval_bleu=False, device="cpu"),
        out_dir=tmp_path)


@case("out of disk space during a save", wb.CheckpointError, "intact")
def _c22(tmp_path, mp):
    path = _saved(tmp_path)
    before = path.read_bytes()

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    mp.setattr(torch, "save", full)
    try:
        save_checkpoint(path, _model(), TOK)
    finally:
        assert path.read_bytes() == before  # the previous checkpoint is intact


@pytest.mark.parametrize("name", list(CASES))
def test_catalogue(name, tmp_path, monkeypatch):
    fn, error, match = CASES[name]
    with pytest.raises(error, match=match) as info:
        fn(tmp_path, monkeypatch)
    message = str(info.value)
    assert len(message) > 30 and "\n" not in message.strip()  # one clear line


def test_defined_results_for_empty_and_unknown_input():
    model = _model()
    out = translate(model, TOK, ["", "ein mann", "   ", "völlig unbekannte wörter ✓"], beam=2)
    assert out[0] == "" and out[2] == ""  # empty in, empty out, without running the model
    assert isinstance(out[1], str) and isinstance(out[3], str)  # unknown words become <unk>: still a translation
    assert TOK.encode_src(["✓"])[0][0] == TOK.unk_id


def test_nan_loss_keeps_last_good_checkpoint(tmp_path):
    from workbench.translation.train import fit

    model = _model()
    pairs = [("ein mann", "a man")] * 8
    cfg = wb.TrainConfig(epochs=1, eval_bleu=False, device="cpu", warmup_steps=10)
    fit(model, TOK, pairs, pairs[:1], cfg, out_dir=tmp_path)
    good = (tmp_path / "last.pt").read_bytes()
    with torch.no_grad():
        model.generator.weight.fill_(float("nan"))
    with pytest.raises(wb.TrainingError):
        fit(model, TOK, pairs, pairs[:1], wb.TrainConfig(epochs=2, eval_bleu=False, device="cpu"), out_dir=tmp_path)
    assert (tmp_path / "last.pt").read_bytes() == good
