"""Plotly figures. Every function takes tensors or arrays and returns a ``go.Figure``; nothing is computed here.

Figures work offline: call :func:`setup_offline_renderer` once in a notebook (plotly.js is then embedded in the
output instead of loaded from a CDN), and :func:`to_html` writes standalone files with plotly.js inside.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

COLORSCALE = "Blues"
HEAD_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
               "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd")


def setup_offline_renderer() -> str:
    """Make notebook figures carry plotly.js themselves (no CDN): the ``notebook`` renderer embeds it."""
    pio.renderers.default = "notebook"
    return pio.renderers.default


def _np(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().float().cpu().numpy()
    return np.asarray(x)


def _labels(tokens: Sequence[str] | None, n: int) -> list[str]:
    return [str(t) for t in tokens] if tokens is not None else [str(i) for i in range(n)]


def _tick_step(n: int, max_labels: int) -> int:
    return max(1, math.ceil(n / max_labels))


def _axis(tokens: list[str], max_labels: int = 60) -> dict[str, Any]:
    """Integer positions with token tick labels: duplicates stay distinct cells; long inputs show every k-th."""
    step = _tick_step(len(tokens), max_labels)
    idx = list(range(0, len(tokens), step))
    return {"tickmode": "array", "tickvals": idx, "ticktext": [tokens[i] for i in idx]}


def _hover(q: list[str], k: list[str]) -> np.ndarray:
    return np.array([[f"query: {qt} ({i})<br>key: {kt} ({j})" for j, kt in enumerate(k)] for i, qt in enumerate(q)])


def _size(n_rows: int, n_cols: int, cell: int = 22, min_px: int = 320, max_px: int = 2400) -> tuple[int, int]:
    return (min(max(min_px, n_cols * cell + 160), max_px), min(max(min_px, n_rows * cell + 140), max_px))


def attention_heatmap(
    weights: Any,
    query_tokens: Sequence[str] | None = None,
    key_tokens: Sequence[str] | None = None,
    title: str | None = None,
    max_tokens: int = 60,
    zmax: float | None = 1.0,
) -> go.Figure:
    """One head's attention as a heatmap: keys across, queries down; hover shows both tokens and the weight.

    Shapes:
        weights (Tq, Tk)
    """
    w = _np(weights)
    q, k = _labels(query_tokens, w.shape[0]), _labels(key_tokens, w.shape[1])
    fig = go.Figure(
        go.Heatmap(
            z=w, x=list(range(len(k))), y=list(range(len(q))), colorscale=COLORSCALE, zmin=0, zmax=zmax,
            customdata=_hover(q, k), hovertemplate="%{customdata}<br>weight: %{z:.3f}<extra></extra>",
            colorbar={"title": "weight"},
        )
    )
    width, height = _size(len(q), len(k))
    fig.update_layout(title=title, width=width, height=height, margin={"l": 100, "r": 20, "t": 50, "b": 100})
    fig.update_xaxes(side="bottom", tickangle=-60, title="key", **_axis(k, max_tokens))
    fig.update_yaxes(autorange="reversed", title="query", **_axis(q, max_tokens))
    return fig


def head_grid(
    weights: Any,
    query_tokens: Sequence[str] | None = None,
    key_tokens: Sequence[str] | None = None,
    layer_labels: Sequence[str] | None = None,
    title: str | None = None,
    cell_px: int = 170,
) -> go.Figure:
    """Every head of every layer: rows = layers, columns = heads, one shared colour scale.

    Shapes:
        weights (L, H, Tq, Tk) or (H, Tq, Tk)
    """
    w = _np(weights)
    if w.ndim == 3:
        w = w[None]
    L, H, Tq, Tk = w.shape
    q, k = _labels(query_tokens, Tq), _labels(key_tokens, Tk)
    rows = list(layer_labels) if layer_labels is not None else [f"layer {i}" for i in range(L)]
    fig = make_subplots(
        rows=L, cols=H, subplot_titles=[f"{rows[i]} · head {h}" for i in range(L) for h in range(H)],
        horizontal_spacing=0.02, vertical_spacing=0.06 if L > 1 else 0.1,
    )
    hover = _hover(q, k)
    for i in range(L):
        for h in range(H):
            fig.add_trace(
                go.Heatmap(
                    z=w[i, h], colorscale=COLORSCALE, zmin=0, zmax=1, showscale=(i == 0 and h == 0),
                    customdata=hover, hovertemplate=f"{rows[i]}, head {h}<br>%{{customdata}}<br>weight: %{{z:.3f}}<extra></extra>",
                ),
                row=i + 1, col=h + 1,
            )
    fig.update_xaxes(showticklabels=False)
    fig.update_yaxes(showticklabels=False, autorange="reversed")
    fig.update_layout(title=title, width=max(400, H * cell_px + 80), height=max(300, L * cell_px + 100),
                      margin={"l": 20, "r": 20, "t": 70, "b": 20})
    fig.update_annotations(font_size=10)
    return fig


def head_lines(
    weights: Any,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str],
    head: int | None = None,
    threshold: float = 0.02,
    title: str | None = None,
) -> go.Figure:
    """A bertviz-like view in pure plotly (works offline): keys on the left, queries on the right, one line per
    (query, key) pair whose weight exceeds ``threshold``, opacity and width growing with the weight.

    Shapes:
        weights (Tq, Tk) or (H, Tq, Tk); ``head`` picks one head of a stack (None draws every head).
    """
    w = _np(weights)
    if w.ndim == 2:
        w = w[None]
    heads = [head] if head is not None else list(range(w.shape[0]))
    Tq, Tk = w.shape[1], w.shape[2]
    fig = go.Figure()
    for h in heads:
        color = HEAD_COLORS[h % len(HEAD_COLORS)]
        xs, ys = [], []
        for i in range(Tq):
            for j in range(Tk):
                a = float(w[h, i, j])
                if a < threshold:
                    continue
                fig.add_trace(go.Scatter(
                    x=[0, 1], y=[j, i], mode="lines", line={"color": color, "width": 1 + 5 * a}, opacity=min(1.0, 0.15 + a),
                    hoverinfo="text", text=f"head {h}: {query_tokens[i]} → {key_tokens[j]}: {a:.3f}", showlegend=False,
                ))
                xs.append(a)
                ys.append(i)
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", line={"color": color}, name=f"head {h}"))
    fig.add_trace(go.Scatter(x=[0] * Tk, y=list(range(Tk)), mode="text", text=list(key_tokens), textposition="middle left",
                             hovertext=[f"key {j}: {t}" for j, t in enumerate(key_tokens)], hoverinfo="text", showlegend=False))
    fig.add_trace(go.Scatter(x=[1] * Tq, y=list(range(Tq)), mode="text", text=list(query_tokens), textposition="middle right",
                             hovertext=[f"query {i}: {t}" for i, t in enumerate(query_tokens)], hoverinfo="text", showlegend=False))
    n = max(Tq, Tk)
    fig.update_xaxes(visible=False, range=[-0.6, 1.6])
    fig.update_yaxes(visible=False, autorange="reversed")
    fig.update_layout(title=title or "attention (keys left, queries right)", height=max(300, 22 * n + 120), width=520,
                      plot_bgcolor="white", margin={"l": 10, "r": 10, "t": 50, "b": 10})
    return fig


def positional_heatmap(table: Any, title: str = "sinusoidal positional encoding") -> go.Figure:
    """Shapes: table (T, D): positions down, dimensions across."""
    t = _np(table)
    fig = go.Figure(go.Heatmap(z=t, colorscale="RdBu", zmid=0, hovertemplate="position %{y}<br>dim %{x}<br>%{z:.3f}<extra></extra>"))
    fig.update_layout(title=title, xaxis_title="dimension i", yaxis_title="position p", height=420)
    fig.update_yaxes(autorange="reversed")
    return fig


def distance_matrix_figure(dist: Any, annotate: bool | None = None, title: str = "L2 distance between positions") -> go.Figure:
    """The position-by-position distance table; cells are annotated with their value for small tables.

    Shapes:
        dist (T, T)
    """
    d = _np(dist)
    T = d.shape[0]
    annotate = T <= 12 if annotate is None else annotate
    fig = go.Figure(go.Heatmap(
        z=d, colorscale="Viridis", text=np.round(d, 2) if annotate else None,
        texttemplate="%{text}" if annotate else None,
        hovertemplate="position %{y} vs %{x}<br>distance %{z:.3f}<extra></extra>",
    ))
    fig.update_layout(title=title, xaxis_title="position", yaxis_title="position", width=max(420, 40 * T + 160) if annotate else 520,
                      height=max(380, 40 * T + 120) if annotate else 480)
    fig.update_yaxes(autorange="reversed")
    return fig


def mask_figure(mask: Any, query_tokens: Sequence[str] | None = None, key_tokens: Sequence[str] | None = None,
                title: str | None = None) -> go.Figure:
    """A boolean mask as a matrix: filled = may attend. Takes (Tq, Tk) or any leading dims (first item shown)."""
    m = _np(mask).astype(float)
    while m.ndim > 2:
        m = m[0]
    q, k = _labels(query_tokens, m.shape[0]), _labels(key_tokens, m.shape[1])
    fig = go.Figure(go.Heatmap(
        z=m, x=list(range(len(k))), y=list(range(len(q))), zmin=0, zmax=1,
        colorscale=[[0, "#f2f2f2"], [1, "#2b6cb0"]], showscale=False,
        customdata=_hover(q, k), hovertemplate="%{customdata}<br>may attend: %{z}<extra></extra>", xgap=1, ygap=1,
    ))
    width, height = _size(len(q), len(k), cell=26)
    fig.update_layout(title=title, width=width, height=height)
    fig.update_xaxes(title="key", tickangle=-60, **_axis(k))
    fig.update_yaxes(title="query", autorange="reversed", **_axis(q))
    return fig


def masks_side_by_side(masks: Mapping[str, Any], tokens: Sequence[str] | None = None) -> go.Figure:
    """Several masks of the same size next to each other (e.g. padding, causal, combined)."""
    names = list(masks)
    fig = make_subplots(rows=1, cols=len(names), subplot_titles=names, horizontal_spacing=0.05)
    for c, name in enumerate(names, start=1):
        m = _np(masks[name]).astype(float)
        while m.ndim > 2:
            m = m[0]
        fig.add_trace(go.Heatmap(z=m, zmin=0, zmax=1, colorscale=[[0, "#f2f2f2"], [1, "#2b6cb0"]], showscale=False,
                                 xgap=1, ygap=1, hovertemplate="query %{y}, key %{x}: %{z}<extra></extra>"), row=1, col=c)
        if tokens is not None:
            fig.update_xaxes(row=1, col=c, **_axis(list(tokens)))
            fig.update_yaxes(row=1, col=c, **_axis(list(tokens)))
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(width=330 * len(names), height=380)
    return fig


def training_curves(history: Any, title: str = "training") -> go.Figure:
    """Loss curves (and validation BLEU on a second axis) per epoch from a History or a dict."""
    h = dataclasses.asdict(history) if dataclasses.is_dataclass(history) else dict(history)
    epochs = list(range(1, len(h.get("train_loss", [])) + 1))
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Scatter(x=epochs, y=h.get("train_loss", []), name="train loss (smoothed labels)", mode="lines+markers"))
    if h.get("val_loss"):
        fig.add_trace(go.Scatter(x=epochs, y=h["val_loss"], name="validation loss", mode="lines+markers"))
    if h.get("val_bleu"):
        fig.add_trace(go.Scatter(x=epochs[: len(h["val_bleu"])], y=h["val_bleu"], name="validation BLEU", mode="lines+markers",
                                 line={"dash": "dot"}), secondary_y=True)
        fig.update_yaxes(title_text="BLEU", secondary_y=True)
    fig.update_layout(title=title, xaxis_title="epoch", height=400)
    fig.update_yaxes(title_text="loss per token", secondary_y=False)
    return fig


def loglog_figure(
    x: Sequence[float],
    series: Mapping[str, Sequence[float]],
    fits: Mapping[str, tuple[float, float]] | None = None,
    xlabel: str = "n",
    ylabel: str = "time (s)",
    title: str | None = None,
) -> go.Figure:
    """Measurements on log-log axes, with fitted power laws y = exp(b) x^slope drawn dashed."""
    fig = go.Figure()
    xs = np.asarray(x, dtype=float)
    for i, (name, ys) in enumerate(series.items()):
        color = HEAD_COLORS[i % len(HEAD_COLORS)]
        label = name
        if fits and name in fits:
            slope, intercept = fits[name]
            label = f"{name} (slope {slope:.2f})"
            fig.add_trace(go.Scatter(x=xs, y=np.exp(intercept) * xs**slope, mode="lines", line={"dash": "dash", "color": color},
                                     showlegend=False, hoverinfo="skip"))
        fig.add_trace(go.Scatter(x=xs, y=list(ys), mode="markers+lines", name=label, line={"color": color}))
    fig.update_xaxes(type="log", title=xlabel)
    fig.update_yaxes(type="log", title=ylabel)
    fig.update_layout(title=title, height=420)
    return fig


def line_figure(x: Sequence[Any], series: Mapping[str, Sequence[float]], xlabel: str = "", ylabel: str = "",
                title: str | None = None) -> go.Figure:
    fig = go.Figure([go.Scatter(x=list(x), y=list(y), mode="lines+markers", name=n) for n, y in series.items()])
    fig.update_layout(title=title, xaxis_title=xlabel, yaxis_title=ylabel, height=400)
    return fig


def bar_figure(labels: Sequence[str], values: Sequence[float], title: str | None = None, ylabel: str = "") -> go.Figure:
    fig = go.Figure(go.Bar(x=list(labels), y=list(values), text=[f"{v:.3g}" for v in values], textposition="outside"))
    fig.update_layout(title=title, yaxis_title=ylabel, height=400)
    return fig


def head_stat_figure(values: Any, row_labels: Sequence[str], title: str, colorscale: str = "Viridis") -> go.Figure:
    """A (rows, heads) table of per-head statistics (entropy, confidence, importance) as a heatmap."""
    v = _np(values)
    fig = go.Figure(go.Heatmap(z=v, y=list(row_labels), x=[f"head {h}" for h in range(v.shape[1])], colorscale=colorscale,
                               text=np.round(v, 2), texttemplate="%{text}", hovertemplate="%{y}, %{x}: %{z:.3f}<extra></extra>"))
    fig.update_layout(title=title, height=max(300, 28 * v.shape[0] + 120))
    fig.update_yaxes(autorange="reversed")
    return fig


def to_html(fig: go.Figure, path: str | Path) -> Path:
    """Standalone HTML with plotly.js embedded (opens offline)."""
    path = Path(path)
    fig.write_html(path, include_plotlyjs=True, full_html=True)
    return path


def to_image(fig: go.Figure, path: str | Path, format: str | None = None, scale: float = 2.0) -> Path:
    """PNG/SVG/PDF export through kaleido (needs the ``export`` extra and a Chromium/Chrome on the machine)."""
    path = Path(path)
    try:
        import kaleido  # noqa: F401
    except ImportError as exc:
        raise RuntimeError("image export needs kaleido: pip install 'attention-workbench[export]'") from exc
    try:
        fig.write_image(path, format=format or path.suffix.lstrip("."), scale=scale)
    except Exception as exc:  # kaleido reports a missing browser in several ways
        raise RuntimeError(
            f"could not export {path.name} ({type(exc).__name__}: {str(exc)[:200]}): kaleido needs Chrome/Chromium; "
            "install one (e.g. apt-get install chromium) or export HTML with to_html instead"
        ) from exc
    return path
