"""The notebooks' model cache (get_translator): what makes a cached model stale."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import workbench
import workbench.translation.checkpoint
from workbench.errors import ConfigError
from workbench.translation import pipeline
from workbench.translation.run import RunConfig


@pytest.fixture
def fake_training(monkeypatch):
    """Replace training and loading with stubs that record which run folders were trained."""
    trained: list[Path] = []

    def train_translation(run, out_dir):
        trained.append(Path(out_dir))
        Path(out_dir).mkdir(parents=True)
        (Path(out_dir) / "run.json").write_text("{}")
        (Path(out_dir) / "last.pt").write_bytes(b"stub")
        (Path(out_dir) / "complete.json").write_text(json.dumps(
            {"settings": run.to_flat(), "step": run.train.max_steps, "stopped_reason": "max steps"}, default=str))

    monkeypatch.setattr(pipeline, "train_translation", train_translation)
    monkeypatch.setattr(workbench.translation.checkpoint, "load_model", lambda path: ("model", "tokenizer", {}))
    return trained


def test_cached_model_is_reused_only_by_the_same_code_and_version(tmp_path, monkeypatch, fake_training):
    kw = dict(cache_dir=tmp_path, run=RunConfig.from_flat(preset="tiny", max_steps=50))
    _, _, state = pipeline.get_translator(**kw)
    first = Path(state["run_dir"])
    assert fake_training == [first]
    pipeline.get_translator(**kw)
    assert fake_training == [first]  # same settings, same code: reused
    pipeline.get_translator(**{**kw, "run": RunConfig.from_flat(preset="tiny", max_steps=60)})
    assert len(fake_training) == 2  # other settings: trained

    # the training code changed since the model was cached (one comment added to train.py): trained again
    edited = tmp_path / "train.py"
    shutil.copy(workbench.translation.train.__file__, edited)
    edited.write_text(edited.read_text() + "\n# changed\n")
    with monkeypatch.context() as m:
        m.setattr(workbench.translation.train, "__file__", str(edited))
        _, _, state = pipeline.get_translator(**kw)
    assert len(fake_training) == 3 and Path(state["run_dir"]) != first

    # another package version: trained again
    monkeypatch.setattr(workbench._version, "__version__", "99.0")
    _, _, state = pipeline.get_translator(**kw)
    assert len(fake_training) == 4 and Path(state["run_dir"]) != first


def test_fingerprint_covers_the_modules_that_define_a_trained_model():
    assert {"translation.train", "model.transformer", "translation.tokenizer", "translation.batching",
            "model.attention", "model.rnn", "translation.data"} <= set(pipeline.TRAINING_CODE)
    assert len(pipeline.training_code_fingerprint()) == 16


def test_get_translator_needs_a_run_with_a_budget(tmp_path, fake_training):
    with pytest.raises(ConfigError, match="max_steps"):
        pipeline.get_translator(RunConfig.from_flat(preset="tiny"), cache_dir=tmp_path)
    with pytest.raises(ConfigError, match="RunConfig"):
        pipeline.get_translator(cache_dir=tmp_path)
    assert fake_training == []


def test_the_cache_ignores_where_the_data_lies(tmp_path, fake_training):
    pipeline.get_translator(RunConfig.from_flat(preset="tiny", max_steps=5, data_dir="/a"), cache_dir=tmp_path)
    pipeline.get_translator(RunConfig.from_flat(preset="tiny", max_steps=5, data_dir="/b"), cache_dir=tmp_path)
    assert len(fake_training) == 1


@pytest.mark.parametrize("arch", ["transformer", "rnn"])
def test_run_dropout_overrides_the_presets(tmp_path, arch):
    """``workbench train --dropout P`` trains (and saves) the preset's model with P_drop = P, for both architectures."""
    from workbench.translation.checkpoint import load_model

    lines = {"src": ["ein hund rennt .", "eine katze schläft .", "zwei männer gehen ."] * 4,
             "tgt": ["a dog runs .", "a cat sleeps .", "two men walk ."] * 4}
    files = {}
    for side, text in lines.items():
        for split in ("train", "val"):
            files[f"{split}_{side}"] = str(tmp_path / f"{split}.{side}")
            Path(files[f"{split}_{side}"]).write_text("\n".join(text) + "\n")
    run = RunConfig.from_flat(arch=arch, preset="tiny", vocab_size=60, dropout=0.3, max_steps=1, eval_bleu=False,
                              **files)
    summary = pipeline.train_translation(run, out_dir=tmp_path / "run")
    assert summary["dropout"] == 0.3
    model, _, _ = load_model(tmp_path / "run" / "last.pt")
    assert model.cfg.dropout == 0.3  # the tiny preset's own is 0.0
    with pytest.raises(ConfigError, match="dropout"):
        RunConfig.from_flat(preset="tiny", dropout=1.5, max_steps=1, **files)
