"""The patching inspector: the heatmap is the sweep, a click patches one cell and shows the patched translation."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from workbench.errors import PatchingError


@pytest.fixture(scope="module")
def shipped():
    import workbench as wb

    model, tok, _ = wb.pretrained("small-de-en")
    return model, tok


def test_click_shows_the_patched_translation(shipped):
    from workbench.viz.patching_widgets import PatchingInspector

    model, tok = shipped
    # a validation sentence whose possessive alone decides the pronoun (a pair lesson 14 builds)
    clean = "Ein großer brauner Hund hält sein Gesicht in den Rasensprenger."
    insp = PatchingInspector(model, tok, clean, clean.replace("sein", "ihr"))
    assert insp.good.lstrip("▁") == "his" and insp.bad.lstrip("▁") == "her"
    assert np.allclose(np.asarray(insp.figure.data[0].z), insp.result.values.numpy())
    edits = (insp.clean_src != insp.corrupt_src)[0].nonzero().flatten().tolist()
    assert len(edits) == 1, insp.src_tokens
    pos = edits[0]
    # the source embedding differs only there: patching it gives the clean sentence, hence the clean translation
    insp._on_click(None, SimpleNamespace(xs=[pos], ys=[0]), None)
    assert insp.patched_text == insp.clean_text
    assert "his" in insp.output.value
    # an unedited position of the embedding changes nothing: the corrupted translation
    assert insp.select(0, 0) == insp.corrupt_text
    insp.family_menu.value = "dec.memory"
    assert insp.result.family == "dec.memory" and np.asarray(insp.figure.data[0].z).shape == (3, len(insp.src_tokens))
    with torch.no_grad():
        assert isinstance(insp.select(2, pos), str)
    from workbench.inspect.capture import hooks_remaining

    assert hooks_remaining(model) == 0


def test_inspector_refuses_pairs_it_cannot_patch(shipped):
    from workbench.viz.patching_widgets import PatchingInspector

    model, tok = shipped
    with pytest.raises(PatchingError, match="translate the same"):
        PatchingInspector(model, tok, "Ein Hund läuft.", "Ein Hund läuft.")
    with pytest.raises(PatchingError, match="equal token length"):
        PatchingInspector(model, tok, "Ein Hund läuft.", "Ein großer schwarzer Hund läuft schnell.")
