"""Nothing lost, nothing silently wrong: owned run folders, caches that know they are complete, hashes that cover
the card, evaluation in fp32 unless asked."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch
from conftest import require_module

from workbench.errors import RunFolderError
from workbench.tools.cli.main import build_parser, main
from workbench.translation import pipeline, run_folder
from workbench.translation.checkpoint import load_checkpoint
from workbench.translation.run import RunConfig


def _corpus(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    words = ["ein", "mann", "hund", "frau", "rennt", "sieht", "den", "ball", "im", "park", "rot", "blau"]
    src = [" ".join(words[(i * 5 + j * 3) % len(words)] for j in range(3 + i % 5)) for i in range(80)]
    for split, rows in (("train", src), ("val", src[:8])):
        (folder / f"{split}.src").write_text("\n".join(rows) + "\n")
        (folder / f"{split}.tgt").write_text("\n".join(" ".join(reversed(s.split())) for s in rows) + "\n")
    return folder


def _own_data(data: Path) -> dict:
    return dict(train_src=str(data / "train.src"), train_tgt=str(data / "train.tgt"), val_src=str(data / "val.src"),
                val_tgt=str(data / "val.tgt"))


def _argv(out: Path, data: Path, *extra: str) -> list[str]:
    return ["train", "--out", str(out), "--preset", "tiny", "--epochs", "1", "--vocab-size", "80", "--max-tokens",
            "200", "--no-eval-bleu", "--device", "cpu", "--precision", "fp32", *[
                x for k, v in _own_data(data).items() for x in ("--" + k.replace("_", "-"), v)], *extra]


def _bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and p.name != run_folder.LOCK_FILE}


def test_overwrite_moves_the_old_run_aside_and_a_new_run_is_refused_without_it(tmp_path, capsys):
    data = _corpus(tmp_path / "data")
    run = tmp_path / "run"
    assert main(_argv(run, data, "--seed", "1")) == 0
    first = _bytes(run)
    assert {"run.json", "last.pt", "best.pt", "history.json", "summary.json", "complete.json"} <= set(first)
    capsys.readouterr()

    # no flag: refused in one line, nothing touched
    assert main(_argv(run, data, "--seed", "2")) == 2
    assert "already holds a run" in capsys.readouterr().err and _bytes(run) == first

    # --overwrite: the old run, every byte of it, lives on beside the new one
    assert main(_argv(run, data, "--seed", "2", "--overwrite")) == 0
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("run.replaced-")]
    assert len(aside) == 1 and _bytes(aside[0]) == first
    new = load_checkpoint(run / "last.pt")
    old = load_checkpoint(aside[0] / "last.pt")
    assert not torch.equal(new["model"]["generator.weight"], old["model"]["generator.weight"])  # another seed
    assert json.loads((run / "run.json").read_text())["settings"]["seed"] == 2


def test_resume_continues_and_a_killed_write_leaves_only_a_temporary_file_that_is_cleared(tmp_path, capsys):
    data = _corpus(tmp_path / "data")
    run = tmp_path / "run"
    assert main(_argv(run, data)) == 0
    (run / ".last.pt.abcd1234.tmp").write_bytes(b"half a checkpoint")  # what SIGKILL inside a write leaves
    assert main(_argv(run, data, "--resume", "--epochs", "2")) == 0
    state = load_checkpoint(run / "last.pt")
    assert state["epoch"] == 2 and not list(run.glob(".*.tmp"))
    complete = json.loads((run / "complete.json").read_text())
    assert complete["step"] == state["step"] and complete["settings"]["epochs"] == 2


@pytest.mark.parametrize("left", [("best.pt", "summary.json"), ("complete.json", "ckpt_step0000002.pt")])
def test_resume_without_last_pt_refuses_to_start_again_over_the_runs_files(tmp_path, capsys, left):
    """The finding: a run whose last.pt was removed was 'resumed' from step 0, writing over its best.pt and records
    (files of finished epochs that a restart cannot write again), with a log line saying no epoch had finished."""
    data = _corpus(tmp_path / "data")
    run = tmp_path / "run"
    assert main(_argv(run, data)) == 0
    for f in run.iterdir():
        if f.name not in (*left, "run.json"):
            f.unlink()
    if "ckpt_step0000002.pt" in left and not (run / "ckpt_step0000002.pt").exists():
        (run / "ckpt_step0000002.pt").write_bytes(b"a numbered snapshot")
    before = _bytes(run)
    assert main(_argv(run, data, "--resume")) != 0
    err = capsys.readouterr().err
    assert "no last.pt to continue from" in err and "--overwrite" in err and ("summary.json" in err or "complete.json" in err)
    assert _bytes(run) == before
    assert main(_argv(run, data)) != 0 and "--resume" not in capsys.readouterr().err.split("already holds a run:")[1]
    assert main(_argv(run, data, "--overwrite")) == 0  # the way out it names: the old run is moved aside, whole
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("run.replaced-")]
    assert len(aside) == 1 and _bytes(aside[0]) == before


def test_a_run_with_nothing_but_its_record_starts_again_on_resume(tmp_path):
    out = tmp_path / "run"
    with run_folder.open_run(out, "new", {"x": 1}):
        pass
    assert run_folder.plan(out, resume=True) == "resume"  # stopped before anything was written: nothing to lose
    (out / "ckpt_step0000003.pt").write_bytes(b"x")  # killed in its first epoch: the restart writes it again
    (out / "best.pt").write_bytes(b"x")  # killed between best.pt and last.pt at its first epoch's end: the same
    assert run_folder.plan(out, resume=True) == "resume"
    (out / "summary.json").write_text("{}")  # a run that had finished
    with pytest.raises(RunFolderError, match="no last.pt"):
        run_folder.plan(out, resume=True)
    assert run_folder.plan(out, resume=True, restart=True) == "resume"  # a cache entry's own partial files


def test_the_lock_refuses_a_second_training_and_goes_with_its_holder(tmp_path):
    out = tmp_path / "run"
    with run_folder.open_run(out, "new", {"x": 1}):
        assert (out / "run.json").exists() and (out / run_folder.LOCK_FILE).exists()
        with pytest.raises(RunFolderError, match=r"another training \(pid \d+\) is writing"):
            run_folder.plan(out, resume=True)
        with pytest.raises(RunFolderError, match="another training"), run_folder.run_lock(out):
            pass
    assert run_folder.plan(out, resume=True) == "resume"  # released with the block (or the process)


def test_a_refused_or_failed_start_changes_nothing(tmp_path):
    """--overwrite with data that cannot be read: the old run stays where it was (the move happens only once the
    data has loaded)."""
    data = _corpus(tmp_path / "data")
    run = tmp_path / "run"
    assert main(_argv(run, data)) == 0
    before = _bytes(run)
    argv = _argv(run, data, "--overwrite")
    argv[argv.index("--train-src") + 1] = str(data / "missing.src")
    assert main(argv) == 2
    assert _bytes(run) == before and not [p for p in tmp_path.iterdir() if ".replaced-" in p.name]


# -- the notebooks' model cache ---------------------------------------------------------------------------------------
def _run(data: Path, **kw) -> RunConfig:
    return RunConfig.from_flat(preset="tiny", vocab_size=80, max_tokens=200, eval_bleu=False, device="cpu",
                               precision="fp32", **_own_data(data), **kw)


def test_an_interrupted_cache_entry_is_resumed_not_reused(tmp_path, caplog):
    """The finding: an entry interrupted at step 4 of 12 was reused as if finished. Now it is resumed (with a log
    line saying so), and the model returned has the steps asked for."""
    data = _corpus(tmp_path / "data")
    asked = _run(data, max_steps=12)
    model, _, state = pipeline.get_translator(asked, cache_dir=tmp_path / "cache")
    folder = Path(state["run_dir"])
    assert state["step"] == 12 and pipeline.finished_as_asked(folder, asked)

    # the same entry, as an interruption at step 4 leaves it: last.pt of step 4, no completion record
    shutil.rmtree(folder)
    pipeline.train_translation(_run(data, max_steps=4), out_dir=folder)
    (folder / "complete.json").unlink()
    assert not pipeline.finished_as_asked(folder, asked)
    with caplog.at_level(logging.INFO, logger="workbench.translation.pipeline"):
        _, _, state = pipeline.get_translator(asked, cache_dir=tmp_path / "cache")
    assert "interrupted at step 4" in caplog.text and "resuming it" in caplog.text
    assert state["step"] == 12 and pipeline.finished_as_asked(folder, asked)

    # interrupted before its first epoch ended: no last.pt, trained again from step 0, with a log line
    for p in folder.iterdir():
        if p.name != "run.json":
            p.unlink()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="workbench.translation.pipeline"):
        again, _, state = pipeline.get_translator(asked, cache_dir=tmp_path / "cache")
    assert "before its first epoch ended" in caplog.text and "training it again from step 0" in caplog.text
    assert state["step"] == 12
    for (name, p), q in zip(model.state_dict().items(), again.state_dict().values(), strict=True):
        assert torch.equal(p, q), name  # trained again from scratch: the very model of the first training


def test_a_completion_record_of_other_settings_or_steps_is_not_reused(tmp_path):
    data = _corpus(tmp_path / "data")
    asked = _run(data, max_steps=6)
    folder = tmp_path / "entry"
    pipeline.train_translation(asked, out_dir=folder)
    assert pipeline.finished_as_asked(folder, asked)
    record = json.loads((folder / "complete.json").read_text())
    (folder / "complete.json").write_text(json.dumps({**record, "step": 5}))
    assert not pipeline.finished_as_asked(folder, asked)
    (folder / "complete.json").write_text(json.dumps({**record, "settings": {**record["settings"], "seed": 7}}))
    assert not pipeline.finished_as_asked(folder, asked)
    (folder / "complete.json").write_text(json.dumps(record))
    assert pipeline.finished_as_asked(folder, asked)


# -- integrity covers the card ------------------------------------------------------------------------------------------
def test_an_edited_card_of_a_shipped_model_fails_in_one_line_and_is_left_as_it_is(tmp_path):
    from workbench.translation import shipped

    root = tmp_path / "pretrained"
    shutil.copytree(shipped.WEIGHTS_DIR / "small-de-en", root / "small-de-en")
    assert shipped.verify_pretrained("small-de-en", root)["name"] == "small-de-en"
    card = root / "small-de-en" / "card.json"
    edited = card.read_text().replace('"beam4": ', '"beam4": 4', 1)  # a better score, typed in
    card.write_text(edited)
    for check in (shipped.verify_pretrained, shipped.read_card, shipped.pretrained):
        with pytest.raises(shipped.PretrainedError, match=r"card.json does not match its recorded SHA-256") as info:
            check("small-de-en", root=root)
        assert "\n" not in str(info.value)
    assert card.read_text() == edited
    (root / "small-de-en" / "SHA256SUMS").unlink()
    with pytest.raises(shipped.PretrainedError, match="SHA256SUMS is missing"):
        shipped.verify_pretrained("small-de-en", root)


def test_shipped_manifests_cover_every_file_and_the_card():
    from workbench.translation import shipped

    for name in shipped.list_pretrained():
        recorded = shipped.verify_manifest(shipped.model_dir(name), required=(*shipped.FILES, "card.json"))
        assert set(recorded) == {*shipped.FILES, "card.json"}


def test_an_edited_file_of_an_exported_folder_is_refused_when_reimported(tmp_path, subword_tokenizer):
    require_module("transformers", 'pip install -e ".[hf]"')
    from workbench import build_model, preset
    from workbench.bridges.huggingface import load_marian, to_huggingface
    from workbench.errors import BridgeError

    tok = subword_tokenizer
    torch.manual_seed(0)
    model = build_model(preset("tiny", tie_src_tgt=True, max_len=64), tok.src_vocab_size, tok.tgt_vocab_size,
                        pad_id=tok.pad_id).eval()
    folder = to_huggingface(model, tok, tmp_path / "hf")
    assert "config.json" in (folder / "SHA256SUMS").read_text()
    back, _, _ = load_marian(folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "dropout": 0.5}))
    with pytest.raises(BridgeError, match=r"config.json does not match its recorded SHA-256"):
        load_marian(folder)


# -- scores that do not depend on the machine's load ---------------------------------------------------------------------
def test_evaluate_and_translate_decode_in_fp32_unless_asked():
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices
    for command in ("evaluate", "translate"):
        args = sub[command].parse_args(["--checkpoint", "x"])
        assert args.precision == "fp32", command
        assert sub[command].parse_args(["--checkpoint", "x", "--precision", "auto"]).precision == "auto"


def test_a_resume_removes_the_snapshots_an_interrupted_run_wrote_after_its_last_epoch(tmp_path, caplog):
    """The probe's finding: the killed run's later snapshots outnumbered the resumed run's, so pruning deleted the
    resumed run's own and `average` averaged the abandoned ones. (The resumed run writes those steps again:
    tests/test_faults.py checks that a resumed run's folder is the uninterrupted run's.)"""
    from workbench.translation.checkpoint import step_checkpoints
    from workbench.translation.run_folder import remove_later_snapshots

    for step in (5, 6, 7, 8, 9, 10, 11, 12):
        (tmp_path / f"ckpt_step{step:07d}.pt").write_bytes(b"snapshot %d" % step)
    (tmp_path / "ckpt_stepbest.pt").write_bytes(b"a user's own file")
    with caplog.at_level("WARNING"):
        remove_later_snapshots(tmp_path, 8)
    assert [p.name for p in step_checkpoints(tmp_path)] == [f"ckpt_step{s:07d}.pt" for s in (5, 6, 7, 8)]
    assert (tmp_path / "ckpt_stepbest.pt").exists() and "removed 4 snapshot(s)" in caplog.text
    remove_later_snapshots(tmp_path, 0)  # no epoch had finished: every snapshot is of the abandoned steps
    assert step_checkpoints(tmp_path) == [] and (tmp_path / "ckpt_stepbest.pt").exists()
