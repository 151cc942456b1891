"""The lessons' small explorers: sliders over the positional encoding (04), the masks (05) and Table 1 (10), each
redrawing one plotly figure. The inspectors of a trained model are :mod:`workbench.viz.widgets`."""

from __future__ import annotations

from typing import Any

import ipywidgets as W
import numpy as np
import plotly.graph_objects as go
import torch

from workbench.lessons.complexity import KINDS as LAYER_KINDS
from workbench.lessons.complexity import table1
from workbench.lessons.positional import distance_matrix
from workbench.model.masks import attention_mask, causal_mask
from workbench.model.positional import sinusoidal_table
from workbench.viz import figures


def positional_explorer(d_model: int = 64, length: int = 20) -> W.Widget:
    """Sliders for d_model and length, two positions to compare; shows the distance matrix and their distance."""
    dm = W.IntSlider(value=d_model, min=4, max=512, step=4, description="d_model", continuous_update=False)
    ln = W.IntSlider(value=length, min=2, max=100, description="length", continuous_update=False)
    p1 = W.IntSlider(value=0, min=0, max=length - 1, description="position a", continuous_update=False)
    p2 = W.IntSlider(value=1, min=0, max=length - 1, description="position b", continuous_update=False)
    readout = W.HTML()
    fig = go.FigureWidget(figures.distance_matrix_figure(distance_matrix(sinusoidal_table(length, d_model)), annotate=False))

    def refresh(_: Any = None) -> None:
        p1.max = p2.max = ln.value - 1
        dist = distance_matrix(sinusoidal_table(ln.value, dm.value)).numpy()
        with fig.batch_update():
            fig.data[0].z = dist
        readout.value = (f"‖PE({p1.value}) − PE({p2.value})‖ = <b>{dist[p1.value, p2.value]:.3f}</b>; "
                         f"every row has norm √(d_model/2) = {np.sqrt(dm.value / 2):.3f}")

    for w in (dm, ln, p1, p2):
        w.observe(refresh, names="value")
    refresh()
    return W.VBox([W.HBox([dm, ln]), W.HBox([p1, p2]), readout, fig])


def mask_explorer(length: int = 8) -> W.Widget:
    """Padding length and causal switch; shows the combined boolean mask (True = may attend)."""
    real = W.IntSlider(value=length - 2, min=1, max=length, description="real tokens", continuous_update=False)
    causal = W.Checkbox(value=True, description="causal")
    fig = go.FigureWidget(figures.mask_figure(causal_mask(length)))

    def refresh(_: Any = None) -> None:
        keep = torch.arange(length)[None] < real.value
        mask = attention_mask(keep, causal=causal.value, Tq=length)
        with fig.batch_update():
            fig.data[0].z = mask[0, 0].expand(length, length).float().numpy()

    real.observe(refresh, names="value")
    causal.observe(refresh, names="value")
    refresh()
    return W.VBox([W.HBox([real, causal]), fig])


def complexity_explorer(n: int = 64, d: int = 512) -> W.Widget:
    """n, d, k, r sliders; bars of the multiply-adds per layer from Table 1 (log scale)."""
    ns = W.IntSlider(value=n, min=4, max=4096, description="n", continuous_update=False)
    ds = W.IntSlider(value=d, min=16, max=4096, description="d", continuous_update=False)
    ks = W.IntSlider(value=3, min=2, max=15, description="k", continuous_update=False)
    rs = W.IntSlider(value=16, min=2, max=256, description="r", continuous_update=False)
    fig = go.FigureWidget(go.Figure(go.Bar(x=list(LAYER_KINDS), y=[1] * len(LAYER_KINDS))))
    fig.update_yaxes(type="log", title="multiply-adds per layer")

    def refresh(_: Any = None) -> None:
        rows = table1(ns.value, ds.value, ks.value, rs.value)
        with fig.batch_update():
            fig.data[0].y = [row["macs"] for row in rows]
            fig.data[0].text = [row["complexity"] for row in rows]

    for w in (ns, ds, ks, rs):
        w.observe(refresh, names="value")
    refresh()
    return W.VBox([W.HBox([ns, ds]), W.HBox([ks, rs]), fig])
