"""Checkpoints: atomic, weights_only, clear errors, averaging."""

from __future__ import annotations

import errno
import os
import pickle

import pytest
import torch

from workbench import CheckpointError, build_model, preset
from workbench.translation.checkpoint import (
    average_checkpoints,
    average_last,
    load_checkpoint,
    load_model,
    load_state,
    save_checkpoint,
)
from workbench.translation.tokenizer import WordTokenizer


@pytest.fixture
def saved(tmp_path):
    tok = WordTokenizer.train([("a b c", "c b a")])
    torch.manual_seed(0)
    model = build_model(preset("tiny"), tok.src_vocab_size, tok.tgt_vocab_size)
    path = save_checkpoint(tmp_path / "m.pt", model, tok, step=7, extra={"src_lang": "de"})
    return model, tok, path


def test_roundtrip_rebuilds_model_and_tokenizer(saved):
    model, tok, path = saved
    again, tok2, state = load_model(path)
    src, tgt = torch.randint(4, 7, (2, 5)), torch.randint(4, 7, (2, 4))
    model.eval()
    assert torch.equal(model(src, tgt), again(src, tgt))
    assert tok2.itos == tok.itos and state["step"] == 7 and state["extra"]["src_lang"] == "de"


def test_truncated_checkpoint(saved, tmp_path):
    _, _, path = saved
    data = path.read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        load_checkpoint(tmp_path / "cut.pt")


def test_not_ours_and_pickle_payload(tmp_path):
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="not an Attention Workbench checkpoint"):
        load_checkpoint(tmp_path / "other.pt")

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    with open(tmp_path / "evil.pt", "wb") as f:
        pickle.dump({"format": "attention-workbench/1", "x": Evil()}, f)
    torch.save({"format": "attention-workbench/1", "x": Evil()}, tmp_path / "evil2.pt")
    for name in ("evil.pt", "evil2.pt"):
        with pytest.raises(CheckpointError):
            load_checkpoint(tmp_path / name)


def test_other_config_mismatch_is_explained(saved):
    _, _, path = saved
    state = load_checkpoint(path)
    other = build_model(preset("tiny", d_model=48, n_heads=4), 20, 20)
    with pytest.raises(CheckpointError, match="another config or vocabulary"):
        load_state(other, state["model"])


def test_failed_save_leaves_previous_intact(saved, monkeypatch):
    model, tok, path = saved
    before = path.read_bytes()

    def full_disk(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(CheckpointError, match="intact"):
        save_checkpoint(path, model, tok, step=8)
    assert path.read_bytes() == before
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_averaging(saved, tmp_path):
    model, tok, _ = saved
    run = tmp_path / "run"
    for k in range(3):
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(float(k))
        save_checkpoint(run / f"ckpt_step{k * 10:07d}.pt", model, tok, step=k * 10)
    avg = average_checkpoints(sorted(run.glob("ckpt_step*.pt")))
    assert torch.all(avg["generator.weight"] == 1.0)
    out = average_last(run, last=2)
    m, _, state = load_model(out)
    assert torch.all(m.generator.weight == 1.5) and state["extra"]["averaged"] == ["ckpt_step0000010.pt", "ckpt_step0000020.pt"]
    with pytest.raises(CheckpointError, match="no ckpt_step"):
        average_last(tmp_path / "empty")


def _snapshots(model, tok, run, n=4):
    """Save ``n`` snapshots with distinct random weights; return the state dicts kept in memory."""
    kept = []
    for k in range(n):
        torch.manual_seed(100 + k)
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.randn_like(p))
        kept.append({name: t.detach().clone() for name, t in model.state_dict().items()})
        save_checkpoint(run / f"ckpt_step{k * 10:07d}.pt", model, tok, step=k * 10)
    return kept


def test_average_last_reads_each_snapshot_once_and_gives_the_true_mean(saved, tmp_path, monkeypatch):
    model, tok, _ = saved
    run = tmp_path / "run"
    kept = _snapshots(model, tok, run)
    loads = []
    real_load = torch.load

    def counting_load(f, *args, **kwargs):
        loads.append(os.path.basename(f))
        return real_load(f, *args, **kwargs)

    monkeypatch.setattr(torch, "load", counting_load)
    out = average_last(run, last=3)
    assert sorted(loads) == ["ckpt_step0000010.pt", "ckpt_step0000020.pt", "ckpt_step0000030.pt"]
    monkeypatch.setattr(torch, "load", real_load)
    state = load_checkpoint(out)
    for name, value in state["model"].items():
        mean = (kept[1][name].double() + kept[2][name].double() + kept[3][name].double()) / 3
        torch.testing.assert_close(value, mean.to(kept[3][name].dtype), rtol=0, atol=1e-6)
        assert value.dtype == kept[3][name].dtype
    assert state["step"] == 30 and state["optimizer"] is None


def test_every_checkpoint_file_is_fsynced_with_its_folder(saved, tmp_path, monkeypatch):
    """The file's bytes are fsynced before the rename, and the folder after it (so the rename survives a power
    loss): record the inode each fsync saw and compare with the final file and its folder."""
    model, tok, _ = saved
    run = tmp_path / "run"
    _snapshots(model, tok, run, n=2)
    synced = []
    real_fsync = os.fsync

    def spy(fd):
        synced.append(os.fstat(fd).st_ino)
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    for write in (lambda: average_last(run, last=2), lambda: save_checkpoint(run / "one.pt", model, tok)):
        synced.clear()
        out = write()
        assert out.stat().st_ino in synced and run.stat().st_ino in synced
        assert synced.index(out.stat().st_ino) < synced.index(run.stat().st_ino)
    assert [p.name for p in run.iterdir() if p.name.endswith(".tmp")] == []


def test_tokenizer_save_is_atomic_and_fsynced(tmp_path, monkeypatch):
    tok = WordTokenizer.train([("a b c", "c b a")])
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.fstat(fd).st_ino), real_fsync(fd))[1])
    path = tmp_path / "tok.json"
    tok.save(path)
    assert path.stat().st_ino in synced and tmp_path.stat().st_ino in synced
    assert WordTokenizer.load(path).itos == tok.itos
    assert path.stat().st_mode & 0o777 == 0o666 & ~_umask()  # the user's umask, not mkstemp's 0600


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_checkpoints_and_pipeline_choose_the_architecture_through_the_registry(tmp_path, monkeypatch):
    """A new architecture added to workbench/model/registry.py alone is saved under its name, rebuilt as its own class
    by load_model, built by the pipeline and accepted by a RunConfig: nothing else chooses by class or name."""
    from workbench.model import registry
    from workbench.model.config import ModelConfig
    from workbench.model.transformer import Transformer
    from workbench.translation.pipeline import build_translator
    from workbench.translation.run import RunConfig

    class Wide(Transformer):
        pass

    def build_wide(cfg, src_vocab_size, tgt_vocab_size, pad_id=0):
        return Wide(cfg, src_vocab_size, tgt_vocab_size, pad_id)

    real = registry._registry()
    wide = registry.Architecture("wide", ModelConfig, build_wide, Wide, lambda name, **kw: preset(name, **kw))
    monkeypatch.setattr(registry, "_registry", lambda: {"wide": wide, **real})  # first: a Wide is a Transformer too

    tok = WordTokenizer.train([("a b c", "c b a")])
    model = build_translator("wide", "tiny", tok.src_vocab_size, tok.pad_id)
    assert type(model) is Wide
    path = save_checkpoint(tmp_path / "w.pt", model, tok)
    assert load_checkpoint(path)["arch"] == "wide"
    again, _, _ = load_model(path)
    assert type(again) is Wide
    assert RunConfig.from_flat(arch="wide", epochs=1).arch == "wide"


def test_a_checkpoint_with_non_finite_weights_loads_with_a_warning(saved, tmp_path, caplog):
    """The probe's finding: a diverged checkpoint translated to empty lines, exit 0, without a word."""
    import logging

    _, _, path = saved
    state = torch.load(path, weights_only=False)
    name = next(k for k, v in state["model"].items() if torch.is_floating_point(v))
    state["model"][name] = torch.full_like(state["model"][name], float("nan"))
    bad = tmp_path / "nan.pt"
    torch.save(state, bad)
    with caplog.at_level(logging.WARNING, logger="workbench.translation.checkpoint"):
        load_model(bad)
    assert any("non-finite weights" in r.getMessage() and name in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="workbench.translation.checkpoint"):
        load_model(path)
    assert not caplog.records


def test_averaging_refuses_checkpoints_of_other_models_and_an_input_as_output(tmp_path):
    """The probe's finding: a relu and a gelu model were averaged into one labelled gelu, and average_last(out=...)
    could write over one of the checkpoints it read."""
    import workbench as wb
    from workbench.translation.checkpoint import average_checkpoints, average_last, save_checkpoint
    from workbench.translation.tokenizer import WordTokenizer

    tok = WordTokenizer.train([("ein mann", "a man")])
    for step, activation in ((1, "relu"), (2, "gelu")):
        model = wb.build_model(wb.preset("tiny", activation=activation), tok.src_vocab_size, tok.tgt_vocab_size)
        save_checkpoint(tmp_path / f"ckpt_step{step:07d}.pt", model, tok, step=step)
    with pytest.raises(CheckpointError, match="another model configuration"):
        average_checkpoints(sorted(tmp_path.glob("ckpt_step*.pt")))
    first = tmp_path / "ckpt_step0000001.pt"
    before = first.read_bytes()
    with pytest.raises(CheckpointError, match="is one of the checkpoints averaged"):
        average_last(tmp_path, last=2, out=first)
    assert first.read_bytes() == before


def test_a_users_file_named_like_a_snapshot_is_not_one(tmp_path):
    """The probe's finding: a ckpt_stepbest.pt beside the snapshots made step_checkpoints raise IndexError."""
    from workbench.translation.checkpoint import step_checkpoints

    for name in ("ckpt_step0000010.pt", "ckpt_stepbest.pt", "ckpt_step0000002.pt", "ckpt_step2b.pt"):
        (tmp_path / name).write_text("x")
    assert [p.name for p in step_checkpoints(tmp_path)] == ["ckpt_step0000002.pt", "ckpt_step0000010.pt"]


def test_average_last_never_replaces_a_file_it_was_not_asked_to(saved, tmp_path):
    """An explicit ``out`` that exists is replaced only with overwrite=True; a run's own checkpoint names never are
    (an average written over last.pt made the run impossible to resume)."""
    model, tok, _ = saved
    run = tmp_path / "run"
    for k in range(2):
        save_checkpoint(run / f"ckpt_step{k * 10:07d}.pt", model, tok, step=k * 10)
    save_checkpoint(run / "last.pt", model, tok, step=10)
    notes = tmp_path / "notes.txt"
    notes.write_text("my thesis draft")
    last_before = (run / "last.pt").read_bytes()
    with pytest.raises(CheckpointError, match="already exists.*overwrite=True"):
        average_last(run, last=2, out=notes)
    assert notes.read_text() == "my thesis draft"
    for name in ("last.pt", "best.pt", "ckpt_step0000099.pt"):
        with pytest.raises(CheckpointError, match="a run's own checkpoint name"):
            average_last(run, last=2, out=run / name, overwrite=True)
    assert (run / "last.pt").read_bytes() == last_before and not (run / "best.pt").exists()
    for bad in (0, 2.5, "3", True):
        with pytest.raises(CheckpointError, match="whole number"):
            average_last(run, last=bad)
    assert average_last(run, last=2, out=notes, overwrite=True) == notes  # asked: replaced
    assert average_last(run, last=1) == average_last(run, last=2) == run / "averaged.pt"  # the default is replaced
