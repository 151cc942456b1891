"""The catalogue of bad inputs and faults: each gives one clear error (or a defined result) and loses nothing."""

from __future__ import annotations

import errno
import gzip
import hashlib
import io
import os
import re
import shutil
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch

import workbench as wb
from workbench.tools.cli.main import main
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


@case("BLEU on no validation sentences", wb.ConfigError, "bleu_max_sentences=0")
def _c5e(tmp_path, mp):
    wb.TrainConfig(bleu_max_sentences=0)


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


@case("own training files without validation files", wb.ConfigError, "val_src/val_tgt.*need validation files")
def _c5g(tmp_path, mp):
    from workbench.translation.run import RunConfig

    RunConfig.from_flat(train_src="train.de", train_tgt="train.en", epochs=1)


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


@case("a dict of sentences", wb.InputTextError, r"not a dict \(its keys would be translated\)")
def _c16b(tmp_path, mp):
    translate(_model(), TOK, {"ein mann": "a man"})


@case("a set of sentences", wb.InputTextError, "a set has no order")
def _c16c(tmp_path, mp):
    translate(_model(), TOK, {"ein mann", "eine frau"})


@case("beam size 0", wb.DecodingError, "beam size 0")
def _c17(tmp_path, mp):
    beam_search(_model(), torch.tensor([[4, 5, 3]]), beam=0)


@case("translate with batch_size -1 (every translation came back empty)", wb.DecodingError,
      r"batch_size=-1 is invalid: use a whole number of sentences")
def _c_batch(tmp_path, mp):
    wb.translate(_model(), TOK, ["ein mann"], beam=1, batch_size=-1)


@case("a 0/1 float mask (the fused path read it as scores to add)", wb.MaskError,
      r"mask has dtype torch.float32: masks are boolean, True = may attend")
def _c_float_mask(tmp_path, mp):
    model = _model()
    src = torch.tensor([[4, 5, 3, 0]])
    model.encode(src, src_mask=model.src_mask(src).float())


@case("a shipped model on a CUDA device this machine lacks", wb.ConfigError, r"device 'cuda:0' asked for but CUDA is not available")
def _c_cuda(tmp_path, mp):
    mp.setattr(torch.cuda, "is_available", lambda: False)
    wb.pretrained("small-de-en", device="cuda:0")


@case("a shipped model on torch's meta device", wb.ConfigError, r"device 'meta' cannot run the workbench")
def _c_meta(tmp_path, mp):
    wb.pretrained("small-de-en", device="meta")


@case("integrated gradients with 0 steps", wb.AttributionError, r"n_steps=0: integrated gradients needs 1 or more steps")
def _c_ig_steps(tmp_path, mp):
    model = _model()
    wb.attribute(model, [4, 5, 3], [2, 4], n_steps=0)


@case("a stored tokenizer whose version is a string", wb.CheckpointError, r"has version '2', not a whole number")
def _c_tok_version(tmp_path, mp):
    import json

    from workbench.translation.tokenizer import tokenizer_from_json

    tokenizer_from_json(json.dumps({"kind": "word", "version": "2", "itos": ["<pad>", "<unk>", "<bos>", "<eos>"]}))


@case("a tokenizer loaded from a folder", wb.CheckpointError, r"is a folder: give the tokenizer's file")
def _c_tok_folder(tmp_path, mp):
    from workbench.translation.tokenizer import SubwordTokenizer

    SubwordTokenizer.load(tmp_path)


@case("a checkpoint loaded from a folder", wb.CheckpointError, r"is a folder: give a checkpoint file in it")
def _c_ckpt_folder(tmp_path, mp):
    from workbench.translation.checkpoint import load_model

    load_model(tmp_path)


@case("a damaged tuned lens", wb.CheckpointError, r"is not a readable tuned lens .*truncated or damaged")
def _c_lens(tmp_path, mp):
    from workbench.inspect.lens import LENS_FILE, TunedLens

    (tmp_path / LENS_FILE).write_bytes(b"not safetensors" * 4)
    TunedLens.load(tmp_path)


@case("a BPE vocabulary of 10^9 entries", wb.ConfigError, r"vocab_size=1000000000 is larger than any BPE vocabulary needs")
def _c_vocab(tmp_path, mp):
    from workbench.translation.tokenizer import SubwordTokenizer

    SubwordTokenizer.train([("ein Mann", "a man")] * 20, vocab_size=10**9)


@case("beam larger than the vocabulary", wb.DecodingError, "larger than the target vocabulary")
def _c18(tmp_path, mp):
    beam_search(_model(), torch.tensor([[4, 5, 3]]), beam=1000)


@case("misspelt notebook parameter", wb.NotebookParameterError, "did you mean SMOKE")
def _c19(tmp_path, mp):
    from workbench.tools.book.notebooks import check_parameters, list_notebooks

    check_parameters(list_notebooks()[0], {"SMOKEE": True})


@case("ill-typed notebook parameter", wb.NotebookParameterError, "SEED")
def _c20(tmp_path, mp):
    from workbench.tools.book.notebooks import check_parameters, list_notebooks

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


# -- the command line: every user error is one line on stderr, exit status 2, and no file lost ---------------------
# Each case builds its situation in its own folder (a copy of one tiny finished run where it needs one), runs
# `workbench ...` in this process (faults such as a full disk are simulated by monkeypatching the write), and checks:
# exit status 2, exactly one line on stderr (what a terminal shows: progress bars redraw with \r and are cleared),
# that line matches the expected message, no traceback, and every file that was there before is there after with the
# same bytes (except those the case names, such as a run's completion record when the run is resumed).

def _corpus(folder: Path, bad_line: bytes | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    words = ["ein", "mann", "hund", "frau", "rennt", "sieht", "den", "ball", "im", "park"]
    src = [" ".join(words[(i * 7 + j) % len(words)] for j in range(3 + i % 4)) for i in range(60)]
    (folder / "train.src").write_text("\n".join(src) + "\n")
    (folder / "train.tgt").write_text("\n".join(" ".join(reversed(s.split())) for s in src) + "\n")
    (folder / "val.src").write_text("\n".join(src[:6]) + "\n")
    (folder / "val.tgt").write_text("\n".join(" ".join(reversed(s.split())) for s in src[:6]) + "\n")
    if bad_line is not None:
        (folder / "latin1.src").write_bytes(b"ein mann\n" + bad_line + b"\n")
        (folder / "latin1.tgt").write_text("a man\nthe dog\n")
    return folder


def _train_argv(out: Path, data: Path, *extra: str) -> list[str]:
    return ["train", "--out", str(out), "--preset", "tiny", "--epochs", "1", "--vocab-size", "80", "--max-tokens", "200",
            "--no-eval-bleu", "--device", "cpu", "--precision", "fp32", "--train-src", str(data / "train.src"),
            "--train-tgt", str(data / "train.tgt"), "--val-src", str(data / "val.src"), "--val-tgt",
            str(data / "val.tgt"), *extra]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """One tiny finished run (1 epoch) on a synthetic corpus: its folder and the corpus folder."""
    root = tmp_path_factory.mktemp("cli-run")
    data = _corpus(root / "data", bad_line="der b\xe4r".encode("latin-1"))
    assert main(_train_argv(root / "run", data)) == 0
    return root / "run", data


CLI_CASES: dict = {}


def cli_case(name, match, may_change=()):
    def register(fn):
        CLI_CASES[name] = (fn, match, may_change)
        return fn

    return register


def _copy_run(finished_run, tmp_path) -> tuple[Path, Path]:
    run, data = finished_run
    shutil.copytree(run, tmp_path / "run")
    return tmp_path / "run", data


def _stdin(mp, data: bytes) -> None:
    mp.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


@cli_case("train --out on a finished run, no flag", r"already holds a run: pass --resume .* --overwrite .*aside")
def _k01(tmp_path, mp, fr):
    run, data = _copy_run(fr, tmp_path)
    return _train_argv(run, data)


@cli_case("train --out . inside a finished run", r"already holds a run: pass --resume")
def _k01b(tmp_path, mp, fr):
    run, data = _copy_run(fr, tmp_path)
    mp.chdir(run)
    return _train_argv(Path("."), data)


@cli_case("train --resume on an empty folder", r"--resume: .* holds no run to resume .*drop --resume")
def _k02(tmp_path, mp, fr):
    (tmp_path / "empty").mkdir()
    return _train_argv(tmp_path / "empty", _corpus(tmp_path / "data"), "--resume")


@cli_case("train --resume on a mistyped folder", r"--resume: .*/rnu holds no run to resume")
def _k03(tmp_path, mp, fr):
    run, data = _copy_run(fr, tmp_path)
    return _train_argv(tmp_path / "rnu", data, "--resume")


@cli_case("train --resume --overwrite", r"--resume and --overwrite exclude each other")
def _k04(tmp_path, mp, fr):
    run, data = _copy_run(fr, tmp_path)
    return _train_argv(run, data, "--resume", "--overwrite")


@cli_case("train --out that is a file", r"--out .*notes.txt is a file, not a folder")
def _k05(tmp_path, mp, fr):
    (tmp_path / "notes.txt").write_text("my notes")
    return _train_argv(tmp_path / "notes.txt", _corpus(tmp_path / "data"))


@cli_case("train --out under a file", r"notes.txt is a file, not a folder")
def _k06(tmp_path, mp, fr):
    (tmp_path / "notes.txt").write_text("my notes")
    return _train_argv(tmp_path / "notes.txt" / "run", _corpus(tmp_path / "data"))


@cli_case("train --out that cannot be written", r"--out .*: cannot write into .*choose a folder you can write to")
def _k07(tmp_path, mp, fr):
    import tempfile

    def refuse(*a, **k):
        raise PermissionError(errno.EACCES, "Permission denied")

    mp.setattr(tempfile, "mkdtemp", refuse)  # what a read-only folder answers (root may write anywhere here)
    return _train_argv(tmp_path / "ro" / "run", _corpus(tmp_path / "data"))


@cli_case("train into a run another training is writing", r"another training \(pid 4242\) is writing .*wait for it",
          may_change=("run/train.lock",))
def _k08(tmp_path, mp, fr):
    import fcntl

    run, data = _copy_run(fr, tmp_path)
    holder = open(run / "train.lock", "a+")  # another open file: flock conflicts with it as with another process
    fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
    holder.seek(0)
    holder.truncate()
    holder.write("4242\n")
    holder.flush()
    mp.setattr(sys, "_workbench_test_lock", holder, raising=False)  # held until the case ends
    return _train_argv(run, data, "--resume", "--epochs", "2")


@cli_case("train --overwrite into a run another training is writing", r"another training \(pid \d+\) is writing",
          may_change=("run/train.lock",))
def _k09(tmp_path, mp, fr):
    argv = _k08(tmp_path, mp, fr)
    return [a for a in argv if a != "--resume"] + ["--overwrite"]


@cli_case("train --data-dir that does not exist", r"--data-dir .*/multi3ok does not exist: give the folder")
def _k10(tmp_path, mp, fr):
    return ["train", "--out", str(tmp_path / "run"), "--preset", "tiny", "--epochs", "1", "--data-dir",
            str(tmp_path / "multi3ok")]


@cli_case("train --vocab-size 10^9 (the tokenizer library aborted the process)", r"invalid vocab_size=1000000000: use a vocabulary size from 1 to 1,000,000")
def _k10b(tmp_path, mp, fr):
    return ["train", "--out", str(tmp_path / "run"), "--preset", "tiny", "--epochs", "1", "--vocab-size", "1000000000"]


@cli_case("evaluate --data-dir that does not exist", r"--data-dir .*/nope does not exist")
def _k11(tmp_path, mp, fr):
    run, _ = _copy_run(fr, tmp_path)
    return ["evaluate", "--checkpoint", str(run / "last.pt"), "--data-dir", str(tmp_path / "nope")]


@cli_case("train --train-src that does not exist", r"train.sr does not exist or is not a file")
def _k12(tmp_path, mp, fr):
    data = _corpus(tmp_path / "data")
    argv = _train_argv(tmp_path / "run", data)
    argv[argv.index("--train-src") + 1] = str(data / "train.sr")
    return argv


@cli_case("train --train-src in Latin-1", r"cannot read .*latin1.src as UTF-8 text")
def _k13(tmp_path, mp, fr):
    data = _corpus(tmp_path / "data", bad_line="der b\xe4r".encode("latin-1"))
    argv = _train_argv(tmp_path / "run", data)
    argv[argv.index("--train-src") + 1] = str(data / "latin1.src")
    argv[argv.index("--train-tgt") + 1] = str(data / "latin1.tgt")
    return argv


@cli_case("train --resume with another architecture", r"--resume: the run in .* was started with arch 'transformer' "
                                                       r"\(asked: 'rnn'\)")
def _k14(tmp_path, mp, fr):
    run, data = _copy_run(fr, tmp_path)
    return _train_argv(run, data, "--resume", "--epochs", "2", "--arch", "rnn")


@cli_case("train --resume with another model size", r"--resume: the run in .* was started with preset 'tiny' "
                                                     r"\(asked: 'small'\)")
def _k15(tmp_path, mp, fr):
    run, data = _copy_run(fr, tmp_path)
    argv = _train_argv(run, data, "--resume", "--epochs", "2")
    argv[argv.index("--preset") + 1] = "small"
    return argv


@cli_case("disk full while saving a checkpoint", r"could not save checkpoint .*No space left on device.*intact",
          may_change=("run/complete.json", "run/train.lock"))
def _k16(tmp_path, mp, fr):
    run, data = _copy_run(fr, tmp_path)

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    mp.setattr(torch, "save", full)
    return _train_argv(run, data, "--resume", "--epochs", "2")


@cli_case("disk full while writing history.json", r"could not write .*history.json \(No space left on device\).*intact",
          may_change=("run/complete.json", "run/train.lock", "run/ckpt_step*.pt", "run/best.pt"))
def _k17(tmp_path, mp, fr):
    from workbench.translation import run_folder

    run, data = _copy_run(fr, tmp_path)

    def full(path, text, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    mp.setattr(run_folder, "atomic_write_text", full)
    return _train_argv(run, data, "--resume", "--epochs", "2")


@cli_case("translate: Latin-1 text on stdin", r"line 2 of the input is not valid utf-8 \(byte 0xe4 at column 6\): "
                                              r"pass --encoding")
def _k18(tmp_path, mp, fr):
    run, _ = _copy_run(fr, tmp_path)
    _stdin(mp, b"ein mann\nder b\xe4r\n")
    return ["translate", "--checkpoint", str(run)]


@cli_case("translate --encoding that does not exist", r"--encoding latin-9x: unknown encoding")
def _k19(tmp_path, mp, fr):
    run, _ = _copy_run(fr, tmp_path)
    _stdin(mp, b"ein mann\n")
    return ["translate", "--checkpoint", str(run), "--encoding", "latin-9x"]


@cli_case("translate: an argument that is not UTF-8", r"sentence argument 2 is not valid UTF-8")
def _k20(tmp_path, mp, fr):
    run, _ = _copy_run(fr, tmp_path)
    return ["translate", "--checkpoint", str(run), "ein mann", os.fsdecode(b"der b\xe4r")]


@cli_case("translate on torch's meta device", r"device 'meta' cannot run the workbench: use 'auto', 'cpu'")
def _k20b(tmp_path, mp, fr):
    run, _ = _copy_run(fr, tmp_path)
    return ["translate", "--checkpoint", str(run), "--device", "meta", "ein mann"]


@cli_case("translate --checkpoint that does not exist", r"checkpoint .*/lats.pt does not exist")
def _k21(tmp_path, mp, fr):
    run, _ = _copy_run(fr, tmp_path)
    return ["translate", "--checkpoint", str(run / "lats.pt"), "ein mann"]


@cli_case("translate --checkpoint that is truncated", r"cut.pt is not a readable checkpoint .*truncated or corrupt")
def _k22(tmp_path, mp, fr):
    run, _ = _copy_run(fr, tmp_path)
    (tmp_path / "cut.pt").write_bytes((run / "last.pt").read_bytes()[:5000])
    return ["translate", "--checkpoint", str(tmp_path / "cut.pt"), "ein mann"]


@cli_case("translate --checkpoint of a folder without checkpoints", r"no checkpoint in .*expected averaged.pt")
def _k23(tmp_path, mp, fr):
    (tmp_path / "empty").mkdir()
    return ["translate", "--checkpoint", str(tmp_path / "empty"), "ein mann"]


def _edited_shipped(tmp_path, mp) -> Path:
    from workbench.translation import shipped

    root = tmp_path / "pretrained"
    shutil.copytree(shipped.WEIGHTS_DIR / "small-de-en", root / "small-de-en")
    card = root / "small-de-en" / "card.json"
    card.write_text(card.read_text().replace('"alpha": ', '"alpha": 1', 1))  # a changed length penalty
    mp.setattr(shipped, "WEIGHTS_DIR", root)
    return card


@cli_case("translate with a shipped model whose card was edited", r"card.json does not match its recorded SHA-256")
def _k24(tmp_path, mp, fr):
    _edited_shipped(tmp_path, mp)
    return ["translate", "--checkpoint", "small-de-en", "ein mann"]


@cli_case("pretrained list with an edited card", r"card.json does not match its recorded SHA-256")
def _k25(tmp_path, mp, fr):
    _edited_shipped(tmp_path, mp)
    return ["pretrained", "list"]


@cli_case("average a folder without snapshots", r"no ckpt_stepNNNNNNN.pt files in .*train with --out")
def _k26(tmp_path, mp, fr):
    (tmp_path / "empty").mkdir()
    return ["average", str(tmp_path / "empty")]


@cli_case("average --out under a file", r"--out: the folder .*notes.txt is a file, not a folder")
def _k27(tmp_path, mp, fr):
    run, _ = _copy_run(fr, tmp_path)
    (tmp_path / "notes.txt").write_text("my notes")
    return ["average", str(run), "--last", "1", "--out", str(tmp_path / "notes.txt" / "averaged.pt")]


@cli_case("disk full while averaging", r"could not write .*averaged.pt .*No space left on device.*intact")
def _k28(tmp_path, mp, fr):
    run, _ = _copy_run(fr, tmp_path)

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    mp.setattr(torch, "save", full)
    return ["average", str(run), "--last", "1"]


@cli_case("export into a file", r"OUT_DIR .*notes.txt is a file, not a folder")
def _k29(tmp_path, mp, fr):
    run, _ = _copy_run(fr, tmp_path)
    (tmp_path / "notes.txt").write_text("my notes")
    return ["export", str(run), str(tmp_path / "notes.txt"), "--to", "huggingface"]


@cli_case("evaluate a checkpoint that is not ours", r"is not an Attention Workbench checkpoint")
def _k30(tmp_path, mp, fr):
    torch.save({"state_dict": {}}, tmp_path / "other.pt")
    return ["evaluate", "--checkpoint", str(tmp_path / "other.pt"), "--limit", "2"]


@cli_case("translate a sentence longer than the model's max_len", r"more than the model's max_len=128")
def _k31(tmp_path, mp, fr):
    run, _ = _copy_run(fr, tmp_path)
    return ["translate", "--checkpoint", str(run), " ".join(["mann"] * 200)]


@cli_case("average --out onto a file of the user's", r"--out .*train.de already exists: .*--force")
def _k32(tmp_path, mp, fr):
    run, _ = _copy_run(fr, tmp_path)
    (tmp_path / "train.de").write_text("meine Daten\n")
    return ["average", str(run), "--last", "1", "--out", str(tmp_path / "train.de")]


@cli_case("resume a run whose last.pt is gone", r"--resume: .* no last.pt to continue from.*summary.json.*--overwrite")
def _k33(tmp_path, mp, fr):
    run, data = _copy_run(fr, tmp_path)
    (run / "last.pt").unlink()
    return ["train", "--preset", "tiny", "--out", str(run), "--resume", "--max-steps", "1", "--data-dir", str(data)]


@cli_case("train into an empty --out", r"--out is empty")
def _k34(tmp_path, mp, fr):
    return ["train", "--preset", "tiny", "--out", "", "--max-steps", "1"]


@cli_case("grade with no memory allowed", r"--memory-gb 0.0: give a positive number")
def _k35(tmp_path, mp, fr):
    (tmp_path / "class" / "alice").mkdir(parents=True)
    return ["notebooks", "grade", str(tmp_path / "class"), "--checks-only", "--memory-gb", "0", "--out",
            str(tmp_path / "gradebook")]


@cli_case("grade into a file", r"--out .*gradebook.txt is a file: the gradebook is a folder")
def _k35b(tmp_path, mp, fr):
    (tmp_path / "class" / "alice").mkdir(parents=True)
    (tmp_path / "gradebook.txt").write_text("last term's marks\n")
    return ["notebooks", "grade", str(tmp_path / "class"), "--checks-only", "--out", str(tmp_path / "gradebook.txt")]


@cli_case("run the notebooks of a folder that is not there", r"notebook folder .*nope does not exist")
def _k36(tmp_path, mp, fr):
    return ["notebooks", "run", "--dir", str(tmp_path / "nope"), "--only", "02"]


def _files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_cli_catalogue_has_at_least_25_cases():
    assert len(CLI_CASES) >= 25


@pytest.mark.parametrize("name", list(CLI_CASES))
def test_cli_catalogue(name, tmp_path, monkeypatch, capsys, finished_run):
    import fnmatch

    fn, match, may_change = CLI_CASES[name]
    work = tmp_path / "case"
    work.mkdir()
    argv = fn(work, monkeypatch, finished_run)
    before = _files(work)
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    shown = [line.rsplit("\r", 1)[-1] for line in err.split("\n")]  # what a terminal shows after \r redraws
    shown = [line for line in shown if line.strip()]
    assert code == 2, f"{name}: exit {code}, stderr {err!r}"
    assert len(shown) == 1, f"{name}: stderr has {len(shown)} lines: {shown}"
    assert "Traceback" not in err and shown[0].startswith(f"workbench {argv[0]}: error: ")
    assert re.search(match, shown[0]), f"{name}: {shown[0]!r} does not match {match!r}"
    after = _files(work)
    for path, digest in before.items():
        if any(fnmatch.fnmatch(path, pattern) for pattern in may_change):
            continue
        assert after.get(path) == digest, f"{name}: {path} was {'changed' if path in after else 'lost'}"
    assert not [p for p in after if p.endswith(".tmp")], f"{name}: a temporary file was left: {sorted(after)}"


@pytest.mark.parametrize("src", [torch.rand(1, 3), torch.tensor([5, 6, 3]), torch.tensor([[[5, 6]]]), [[5, 6, 3]]])
def test_model_refuses_ids_it_cannot_read_in_one_line(src):
    from workbench.errors import InputTextError

    model = wb.build_model(wb.preset("tiny", d_model=32, n_heads=4), 40, 40).eval()
    with pytest.raises(InputTextError, match=r"token ids must be a \(batch, length\) tensor of integers"):
        model(src, torch.tensor([[2, 5]]))
    with pytest.raises(InputTextError, match="token ids must be"):
        model(torch.tensor([[5, 6, 3]]), src)


@pytest.mark.parametrize("field", ["d_model", "n_heads", "d_ff", "n_enc_layers", "max_len", "d_head", "d_v"])
def test_a_bool_is_not_a_size(field):
    from workbench.errors import ConfigError

    with pytest.raises(ConfigError, match=f"invalid {field}=True: use a (positive integer|whole number)"):
        wb.preset("tiny", **{field: True})


@pytest.mark.parametrize(("make", "match"), [
    (lambda: wb.TrainConfig(epochs=1.5), r"invalid epochs=1.5: use a whole number or None"),
    (lambda: wb.TrainConfig(keep_checkpoints=2.5), r"invalid keep_checkpoints=2.5: use a whole number"),
    (lambda: wb.TrainConfig(max_steps=2.5), r"invalid max_steps=2.5"),
    (lambda: wb.TrainConfig(weight_decay=float("nan")), r"invalid weight_decay=nan: use a finite number"),
    (lambda: wb.TrainConfig(weight_decay=-1.0), r"invalid weight_decay=-1.0"),
    (lambda: wb.TrainConfig(compile="no"), r"invalid compile='no': use True or False"),
    (lambda: wb.ModelConfig(norm_first="no"), r"invalid norm_first='no': use True or False"),
    (lambda: wb.ModelConfig(layer_norm_eps="x"), r"invalid layer_norm_eps='x'"),
    (lambda: wb.RNNConfig(attention="no"), r"invalid attention='no': use True or False"),
    (lambda: wb.RunConfig(limit=True), r"invalid limit=True"),
])
def test_a_config_value_of_the_wrong_type_is_refused_at_once(make, match):
    """The probe's finding: such values failed later (an epoch in, leaving no last.pt) or silently meant something
    else (the string "no" is true: a pre-LN model)."""
    with pytest.raises(wb.ConfigError, match=match):
        make()


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"beam": True}, "beam size True is invalid"),
    ({"max_extra": -5}, "max_extra=-5 is invalid"),
    ({"max_extra": 2.5}, "max_extra=2.5 is invalid"),
    ({"alpha": float("nan")}, "alpha=nan is invalid"),
    ({"alpha": -1.0}, "alpha=-1.0 is invalid"),
])
def test_translate_refuses_bad_search_settings(kwargs, match):
    model, tok, _ = wb.pretrained("small-de-en")
    with pytest.raises(wb.DecodingError, match=match):
        translate(model, tok, ["Ein Hund läuft."], **kwargs)


def test_translate_refuses_what_is_not_text_or_swapped_arguments():
    from workbench.errors import InputTextError

    model, tok, _ = wb.pretrained("small-de-en")
    with pytest.raises(InputTextError, match=r"sentence 2 \(index 1\) is a NoneType, not a string"):
        translate(model, tok, ["Ein Hund.", None])
    with pytest.raises(InputTextError, match="pass the model first, then its tokenizer"):
        translate(tok, model, ["Ein Hund."])
    assert translate(model, tok, ["", "   "]) == ["", ""]  # empty text stays allowed


# -- ids, output budgets, invisible text, reused captures, empty sources -------------------------------------------
@pytest.mark.parametrize("side", ["src", "tgt"])
@pytest.mark.parametrize("bad", [-1, 10_000])
def test_token_ids_outside_the_vocabulary_are_named(side, bad):
    """An id the embedding has no row for (another tokenizer's, a negative one) is named in one line."""
    m = _model()
    src, tgt = torch.tensor([[4, 5, 3]]), torch.tensor([[2, 4, 5]])
    if side == "src":
        src[0, 1] = bad
    else:
        tgt[0, 1] = bad
    vocab = TOK.src_vocab_size if side == "src" else TOK.tgt_vocab_size
    with pytest.raises(wb.errors.InputTextError, match=rf"token id\(s\) {bad} outside this vocabulary of {vocab}"):
        m(src, tgt)


@pytest.mark.parametrize("shape", [(2, 0), (0, 3)])
def test_empty_id_tensors_are_refused(shape):
    m = _model()
    empty = torch.zeros(shape, dtype=torch.long)
    with pytest.raises(wb.errors.InputTextError, match="hold no token"):
        m.encode(empty)
    with pytest.raises(wb.errors.InputTextError, match="hold no token"):
        m(torch.tensor([[4, 3]]), torch.zeros((1, 0), dtype=torch.long))


@pytest.mark.parametrize("max_len", [0, -3, 2.5, True, "10"])
def test_an_invalid_fixed_output_budget_is_refused(max_len):
    from workbench.translation.decode import greedy_decode

    m, src = _model(), torch.tensor([[4, 5, 3]])
    for decode in (greedy_decode, lambda *a, **k: beam_search(*a, beam=2, **k)):
        with pytest.raises(wb.errors.DecodingError, match="max_len="):
            decode(m, src, max_len=max_len)
    assert greedy_decode(m, src, max_len=1).shape == (1, 1)  # one token (eos) is a budget


@pytest.mark.parametrize("text", ["\u200b", "\u200b\u200c\ufeff", " \u2060 \u00ad "])
def test_a_sentence_of_invisible_characters_is_empty(text):
    """Zero-width spaces, joiners, a byte-order mark: nothing to translate, as for whitespace."""
    from workbench.translation.tokenizer import SubwordTokenizer

    tok = SubwordTokenizer.train([("ein Mann fährt Fahrrad", "a man rides a bike")] * 20, vocab_size=60)
    m = wb.build_model(wb.preset("tiny", max_len=16), tok.src_vocab_size, tok.tgt_vocab_size).eval()
    assert translate(m, tok, [text, "ein Mann"])[0] == ""
    assert tok.normalize(text, "src") == "" and tok.tokens_src(text) == ["<eos>"]
    # inside a sentence they are dropped, not encoded as unknown tokens
    assert tok.encode_src(["ein\u200b Mann\ufeff"]) == tok.encode_src(["ein Mann"])
    assert TOK.encode_src(["ein\u200b mann"]) == TOK.encode_src(["ein mann"])


def test_a_capture_object_can_be_entered_again():
    from workbench.inspect.capture import capture_attention, hooks_remaining

    m = _model()
    src, tgt = torch.tensor([[4, 5, 3]]), torch.tensor([[2, 4, 5]])
    capture = capture_attention(m, kinds="dec.cross")
    with torch.no_grad(), capture as first:
        m(src, tgt)
    with torch.no_grad(), capture as second:
        m(src[:, :2], tgt)
    assert second is not first and hooks_remaining(m) == 0
    assert first["dec.cross", 0].shape[-1] == 3 and second["dec.cross", 0].shape[-1] == 2


def test_decoder_rollout_of_a_source_that_is_all_padding():
    """A sentence whose every source position is padding attends to no source: its rows draw wholly on the target
    (they used to lose half their mass at every decoder layer)."""
    from workbench.inspect.capture import capture_attention
    from workbench.inspect.flow import rollout_from_cache

    m = _model()
    src = torch.tensor([[4, 5, 3], [m.pad_id] * 3])
    with torch.no_grad(), capture_attention(m) as cache:
        m(src, torch.tensor([[2, 4, 5], [2, 5, 4]]))
    for row in (0, 1):
        r = rollout_from_cache(cache, row)
        assert torch.allclose(r.source.sum(-1) + r.target.sum(-1), torch.ones(3, dtype=torch.float64), atol=1e-6)
    assert float(rollout_from_cache(cache, 1).source_share().abs().max()) == 0.0
    assert float(rollout_from_cache(cache, 0).source_share().min()) > 0.5


def test_a_sentence_too_long_is_named_by_its_line_and_its_index():
    """The command line reads one sentence a line (line 1 first), the API takes a list (index 0 first): the message
    gives both, so neither reader is off by one."""
    m = _model()  # max_len 16
    with pytest.raises(wb.errors.InputTextError, match=r"sentence 3 \(index 2\) is \d+ subword tokens long"):
        translate(m, TOK, ["ein mann", "", " ".join(["mann"] * 40)])


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32", "latin-1"])
def test_translate_reads_stdin_in_any_encoding_as_utf8(monkeypatch, capsys, encoding):
    """Standard input is decoded whole, then split into lines: in UTF-16 a line break is two bytes."""
    text = "Ein Hund läuft .\r\nZwei Männer .\n"
    _stdin(monkeypatch, text.encode("utf-8"))
    assert main(["translate", "--checkpoint", "small-de-en"]) == 0
    want = capsys.readouterr().out
    _stdin(monkeypatch, text.encode(encoding))
    assert main(["translate", "--checkpoint", "small-de-en", "--encoding", encoding]) == 0
    got = capsys.readouterr().out
    assert got == want and len(got.splitlines()) == 2


@pytest.mark.parametrize("content", [b"just some notes\nnot a model\n", bytes(range(256)) * 4, b"\x80\x02}q\x00."])
def test_a_file_that_is_no_checkpoint_is_named_as_such(tmp_path, capsys, content):
    bad = tmp_path / "notes.pt"
    bad.write_bytes(content)
    with pytest.raises(wb.CheckpointError, match=r"notes.pt is not (a readable|an Attention Workbench) checkpoint"):
        load_model(bad)
    assert main(["translate", "--checkpoint", str(bad), "ein mann"]) == 2
    assert "notes.pt is not" in capsys.readouterr().err


def test_a_checkpoint_without_its_tokenizer_cannot_translate_and_says_so(tmp_path, capsys):
    path = save_checkpoint(tmp_path / "bare.pt", _model(), None)
    assert main(["translate", "--checkpoint", str(path), "ein mann"]) == 2
    assert "holds no tokenizer" in capsys.readouterr().err


def test_translate_opens_a_built_model_folder(tmp_path, capsys):
    """What `workbench pretrained build --out DIR` writes (config.json, model.safetensors, tokenizer.json) is a
    --checkpoint too."""
    from workbench.translation.shipped import model_dir

    shutil.copytree(model_dir("small-de-en"), tmp_path / "built")
    assert main(["translate", "--checkpoint", "small-de-en", "Ein Hund läuft ."]) == 0
    want = capsys.readouterr().out
    assert main(["translate", "--checkpoint", str(tmp_path / "built"), "Ein Hund läuft ."]) == 0
    assert capsys.readouterr().out == want and want.strip()


@pytest.mark.parametrize("seed", ["99999999999999999999", "-1"])
def test_a_seed_out_of_range_is_one_line(tmp_path, capsys, seed):
    assert main(["train", "--out", str(tmp_path / "r"), "--preset", "tiny", "--max-steps", "1", "--seed", seed]) == 2
    assert "invalid seed=" in capsys.readouterr().err and not (tmp_path / "r").exists()


def test_python_api_inputs_that_ended_in_library_errors():
    """From an outside probe: each of these raised a raw TypeError, AttributeError, AssertionError or broadcasting
    RuntimeError; each is now one line that says what to pass."""
    from torch import nn

    from workbench.inspect.capture import capture_attention
    from workbench.translation.checkpoint import average_checkpoints

    m = _model()
    with pytest.raises(wb.errors.InputTextError, match="src holds 2 sentences and tgt 3"):
        m(torch.tensor([[4, 5, 3]] * 2), torch.tensor([[2, 4]] * 3))
    assert m(torch.tensor([[4, 5, 3]]), torch.tensor([[2, 4]] * 3)).shape[0] == 3  # a batch of 1 broadcasts
    for not_a_model in (None, nn.Linear(3, 3)):
        with pytest.raises(wb.errors.InterventionError, match="capture_attention needs a workbench model"):
            with capture_attention(not_a_model):
                pass
    for name in (None, 123, ""):
        with pytest.raises(wb.CheckpointError, match="give a model's name as a string"):
            wb.pretrained(name)
    with pytest.raises(wb.errors.InputTextError, match=r"sentence 2 \(index 1\) holds '\\udce4' at column 5"):
        translate(m, TOK, ["ein mann", "ein \udce4 mann"])
    with pytest.raises(wb.CheckpointError, match="takes a list of checkpoint files"):
        average_checkpoints("run/ckpt_step0000010.pt")
    if not torch.cuda.is_available():
        with pytest.raises(wb.errors.ConfigError, match="CUDA is not available"):
            translate(m, TOK, ["ein mann"], device="cuda")
