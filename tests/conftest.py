"""Shared fixtures. Tests read Multi30k from the local mirror beside the checkout (never from the network)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("WORKBENCH_MULTI30K", str(REPO.parent / "shared" / "data" / "multi30k"))


@pytest.fixture(scope="session")
def multi30k_dir() -> Path:
    path = Path(os.environ["WORKBENCH_MULTI30K"])
    if not (path / "val.de.gz").exists():
        pytest.skip(f"Multi30k mirror not found at {path}")
    return path


@pytest.fixture(scope="session")
def small_pairs(multi30k_dir):
    from workbench.data import load_multi30k

    return load_multi30k("train", "de", "en", data_dir=multi30k_dir, limit=3000)


@pytest.fixture(scope="session")
def subword_tokenizer(small_pairs):
    from workbench.tokenizer import SubwordTokenizer

    return SubwordTokenizer.train(small_pairs, vocab_size=2000)
