"""The notebooks' model cache (get_translator): what makes a cached model stale."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import workbench
import workbench.checkpoint
from workbench import pipeline
from workbench.errors import ConfigError


@pytest.fixture
def fake_training(monkeypatch):
    """Replace training and loading with stubs that record which run folders were trained."""
    trained: list[Path] = []

    def train_translation(out_dir, **kwargs):
        trained.append(Path(out_dir))
        Path(out_dir).mkdir(parents=True)
        (Path(out_dir) / "last.pt").write_bytes(b"stub")

    monkeypatch.setattr(pipeline, "train_translation", train_translation)
    monkeypatch.setattr(workbench.checkpoint, "load_model", lambda path: ("model", "tokenizer", {}))
    return trained


def test_cached_model_is_reused_only_by_the_same_code_and_version(tmp_path, monkeypatch, fake_training):
    kw = dict(cache_dir=tmp_path, preset_name="tiny", max_steps=50, minutes=None)
    _, _, state = pipeline.get_translator(**kw)
    first = Path(state["run_dir"])
    assert fake_training == [first]
    pipeline.get_translator(**kw)
    assert fake_training == [first]  # same settings, same code: reused
    pipeline.get_translator(**{**kw, "max_steps": 60})
    assert len(fake_training) == 2  # other settings: trained

    # the training code changed since the model was cached (one comment added to train.py): trained again
    edited = tmp_path / "train.py"
    shutil.copy(workbench.train.__file__, edited)
    edited.write_text(edited.read_text() + "\n# changed\n")
    with monkeypatch.context() as m:
        m.setattr(workbench.train, "__file__", str(edited))
        _, _, state = pipeline.get_translator(**kw)
    assert len(fake_training) == 3 and Path(state["run_dir"]) != first

    # another package version: trained again
    monkeypatch.setattr(workbench, "__version__", "99.0")
    _, _, state = pipeline.get_translator(**kw)
    assert len(fake_training) == 4 and Path(state["run_dir"]) != first


def test_fingerprint_covers_the_modules_that_define_a_trained_model():
    assert {"train", "model", "tokenizer", "batching", "attention", "rnn", "data"} <= set(pipeline.TRAINING_CODE)
    assert len(pipeline.training_code_fingerprint()) == 16


def test_get_translator_needs_a_budget(tmp_path, fake_training):
    with pytest.raises(ConfigError, match="max_steps"):
        pipeline.get_translator(cache_dir=tmp_path, minutes=None, max_steps=None)
    assert fake_training == []
