"""Patching figures: values, labels and hover reach the plotly figure; wrong inputs are refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from workbench.inspect.patching_sweeps import PatchingResult
from workbench.viz.figures import FigureInputError
from workbench.viz.patching_figures import interval_figure, patching_heatmap, path_patching_figure


def _result(values, axes, labels, family="enc.resid"):
    values = torch.as_tensor(values, dtype=torch.float32)
    return PatchingResult(values, values * 2, axes, labels, family, "clean->corrupted", 2.0, -1.0)


def test_heatmap_carries_values_tokens_and_hover():
    res = _result([[0.0, 1.0, 0.25], [0.5, -0.2, 0.9]], ("layer", "src_pos"),
                  {"layer": ("embed", "enc 0"), "src_pos": ("▁Ein", "<eos>", "▁Ein")})
    fig = patching_heatmap(res)
    trace = fig.data[0]
    assert np.allclose(np.asarray(trace.z), res.values.numpy())
    assert list(fig.layout.xaxis.ticktext) == ["▁Ein", "&lt;eos&gt;", "▁Ein"]  # repeated tokens keep their columns
    assert list(fig.layout.xaxis.tickvals) == [0, 1, 2]
    assert "logit diff: -0.400" in trace.text[1][1] and "score: -0.200" in trace.text[1][1]
    assert trace.zmid == 0.0


def test_path_figure_flattens_sender_and_receiver_heads():
    values = torch.arange(2 * 3 * 2 * 3, dtype=torch.float32).view(2, 3, 2, 3) / 100
    heads = ("0", "1", "2")
    res = _result(values, ("sender_layer", "sender_head", "receiver_layer", "receiver_head"),
                  {"sender_layer": ("0", "1"), "sender_head": heads, "receiver_layer": ("0", "1"),
                   "receiver_head": heads}, family="path")
    fig = path_patching_figure(res)
    z = np.asarray(fig.data[0].z)
    assert z.shape == (6, 6)
    assert z[4, 5] == pytest.approx(float(values[1, 1, 1, 2]))
    assert list(fig.data[0].y)[4] == "enc 1.1" and list(fig.data[0].x)[5] == "cross 1.2"
    with pytest.raises(FigureInputError, match="4 axes"):
        path_patching_figure(_result([[0.0]], ("layer", "head"), {"layer": ("0",), "head": ("0",)}))
    with pytest.raises(FigureInputError, match="2 axes"):
        patching_heatmap(res)


def test_interval_figure_error_bars():
    fig = interval_figure(["edit", "random"], [0.8, 0.1], [0.7, 0.0], [0.85, 0.3], groups=["finding", "control"])
    assert [t.name for t in fig.data] == ["finding", "control"]
    assert fig.data[0].error_y.array[0] == pytest.approx(0.05)
    assert fig.data[0].error_y.arrayminus[0] == pytest.approx(0.1)
    with pytest.raises(FigureInputError, match="one value per label"):
        interval_figure(["a"], [0.1, 0.2], [0.0], [0.3])
