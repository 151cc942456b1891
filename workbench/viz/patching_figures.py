"""Figures of activation patching: layer x position heatmaps, layer x head grids, path-patching grids, intervals.

Arrays in, plotly ``go.Figure`` out, as in :mod:`workbench.viz.figures`. Patching scores are normalised so that 0 is
the corrupted run and 1 the clean one; the colour scale is diverging and centred on 0 (red: towards the clean
answer, blue: away from it), so a cell that does nothing is white.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from workbench.viz.figures import FigureInputError

__all__ = ["PATCHING_COLORSCALE", "interval_figure", "path_patching_figure", "patching_heatmap"]

PATCHING_COLORSCALE = "RdBu_r"


def _labels(result: Any, axis: str) -> list[str]:
    return [html.escape(str(t)) for t in result.labels[axis]]


def _check(result: Any, ndim: int, what: str) -> np.ndarray:
    values = np.asarray(result.values, dtype=float)
    if values.ndim != ndim:
        raise FigureInputError(f"{what} needs a result with {ndim} axes, got axes {tuple(result.axes)}: use "
                               f"{'patching_heatmap' if values.ndim == 2 else 'path_patching_figure'} instead")
    return values


def patching_heatmap(result: Any, title: str | None = None, zmax: float | None = None) -> go.Figure:
    """A layer x position (or layer x head) :class:`~workbench.inspect.patching_sweeps.PatchingResult` as a heatmap.

    Positions run across with their tokens as tick text (integer positions, so repeated tokens keep their own
    column); layers run down, the first at the top. Hover shows the layer, the position or head, the normalised
    score and the raw logit difference.

    Shapes:
        result.values: (L, P)
    """
    values = _check(result, 2, "patching_heatmap")
    rows, cols = result.axes
    ylab, xlab = _labels(result, rows), _labels(result, cols)
    raw = np.asarray(result.raw, dtype=float)
    hover = np.array([[f"{rows}: {ylab[i]}<br>{cols}: {xlab[j]} ({j})<br>score: {values[i, j]:.3f}"
                       f"<br>logit diff: {raw[i, j]:.3f}" for j in range(values.shape[1])]
                      for i in range(values.shape[0])])
    bound = zmax if zmax is not None else max(1.0, float(np.nanmax(np.abs(values))) if values.size else 1.0)
    fig = go.Figure(go.Heatmap(z=values, x=list(range(len(xlab))), y=list(range(len(ylab))), zmid=0.0,
                               zmin=-bound, zmax=bound, colorscale=PATCHING_COLORSCALE, text=hover,
                               hovertemplate="%{text}<extra></extra>", colorbar={"title": "score"}))
    fig.update_xaxes(tickmode="array", tickvals=list(range(len(xlab))), ticktext=xlab, title=cols, side="top")
    fig.update_yaxes(tickmode="array", tickvals=list(range(len(ylab))), ticktext=ylab, title=rows,
                     autorange="reversed")
    default = f"{result.family}: {result.direction} (0 = corrupted, 1 = clean)"
    fig.update_layout(title=title if title is not None else default, height=140 + 36 * len(ylab),
                      width=max(420, 180 + 34 * len(xlab)), margin={"t": 110})
    return fig


def path_patching_figure(result: Any, title: str | None = None) -> go.Figure:
    """Path patching's (sender layer, sender head, receiver layer, receiver head) scores as one grid.

    Rows are encoder heads ``l.h`` (senders), columns cross-attention heads ``l.h`` (receivers).

    Shapes:
        result.values: (Ls, Hs, Lr, Hr) -> shown as (Ls * Hs, Lr * Hr)
    """
    values = _check(result, 4, "path_patching_figure")
    ls, hs, lr, hr = values.shape
    grid = values.reshape(ls * hs, lr * hr)
    senders = [f"enc {i}.{h}" for i in result.labels["sender_layer"] for h in result.labels["sender_head"]]
    receivers = [f"cross {i}.{h}" for i in result.labels["receiver_layer"] for h in result.labels["receiver_head"]]
    bound = max(1e-6, float(np.nanmax(np.abs(grid))))
    fig = go.Figure(go.Heatmap(z=grid, x=receivers, y=senders, zmid=0.0, zmin=-bound, zmax=bound,
                               colorscale=PATCHING_COLORSCALE, colorbar={"title": "score"},
                               hovertemplate="sender %{y}<br>receiver %{x}<br>score %{z:.4f}<extra></extra>"))
    fig.update_yaxes(autorange="reversed", title="sender (encoder self-attention head)")
    fig.update_xaxes(title="receiver (cross-attention head, via its keys and values)")
    fig.update_layout(title=title if title is not None else f"path patching: {result.direction}",
                      height=200 + 14 * len(senders), width=260 + 14 * len(receivers))
    return fig


def interval_figure(labels: Sequence[str], means: Sequence[float], lows: Sequence[float], highs: Sequence[float],
                    groups: Sequence[str] | None = None, title: str | None = None,
                    ylabel: str = "normalised score") -> go.Figure:
    """Means with their confidence intervals, one marker per label, coloured by group (e.g. finding vs control).

    Shapes:
        means, lows, highs: (N,) with lows <= means <= highs
    """
    n = len(labels)
    arrays = [np.asarray(x, dtype=float) for x in (means, lows, highs)]
    if any(a.shape != (n,) for a in arrays):
        raise FigureInputError(f"means, lows and highs need one value per label ({n}), got shapes "
                               f"{[a.shape for a in arrays]}")
    m, lo, hi = arrays
    groups = list(groups) if groups is not None else ["" for _ in range(n)]
    fig = go.Figure()
    for group in dict.fromkeys(groups):
        idx = [i for i in range(n) if groups[i] == group]
        fig.add_trace(go.Scatter(
            x=[html.escape(str(labels[i])) for i in idx], y=m[idx], mode="markers", name=html.escape(group),
            error_y={"type": "data", "symmetric": False, "array": hi[idx] - m[idx], "arrayminus": m[idx] - lo[idx]},
            hovertemplate="%{x}: %{y:.3f}<extra></extra>"))
    fig.add_hline(y=0.0, line_dash="dot", line_color="grey")
    fig.update_layout(title=title, yaxis_title=ylabel, height=420, width=max(520, 60 * n + 200))
    fig.update_xaxes(type="category")
    return fig
