"""The sink audit through the Marian import path, on a trained model: small-de-en written in Marian's layout, loaded
by transformers' ``MarianMTModel`` and converted back must give the audit small-de-en gives (the import path keeps
every share, alignment and ablation figure)."""

from __future__ import annotations

import tempfile

import pytest
from conftest import require_module

from workbench.inspect.sinks import CATEGORIES, sink_audit
from workbench.translation.shipped import load_any


@pytest.fixture(scope="module")
def round_trip():
    transformers = require_module("transformers", 'pip install -e ".[hf]"')
    from workbench.bridges.huggingface import from_huggingface, to_huggingface

    small, tok, _ = load_any("small-de-en")
    with tempfile.TemporaryDirectory() as folder:
        to_huggingface(small, tok, folder)
        hf_model = transformers.MarianMTModel.from_pretrained(folder).eval()
        hf_tok = transformers.AutoTokenizer.from_pretrained(folder)
    marian, marian_tok = from_huggingface(hf_model, hf_tok)
    return (small.eval(), tok), (marian.eval(), marian_tok)


def test_trained_model_through_marian_gives_the_same_audit(round_trip, small_pairs):
    (small, tok), (marian, marian_tok) = round_trip
    pairs = small_pairs[:16]
    a = sink_audit(small, tok, pairs, n_bootstrap=50, max_extra=5, sink_threshold=0.4)
    b = sink_audit(marian, marian_tok, pairs, n_bootstrap=50, max_extra=5, sink_threshold=0.4)
    assert type(marian_tok) is not type(tok)  # the audit really ran through the imported tokenizer
    keys = ["kind", "layer", "head"]
    assert a.table[keys].equals(b.table[keys])
    columns = [*CATEGORIES, "sink", "align_raw", "align_content"]
    diff = (a.table[columns] - b.table[columns]).abs().max().max()
    assert diff < 1e-4, f"the round trip changed the audit by {diff}"
    assert a.ablation["bleu"] == pytest.approx(b.ablation["bleu"], abs=0.05)
    assert a.ablation["heads"] == b.ablation["heads"]
