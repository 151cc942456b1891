"""Plotly figures for the workbench: every function takes tensors or arrays and returns a ``go.Figure``.

Nothing is computed here beyond layout: attention weights, masks, distances, losses and fits come from the
modules that own them (``capture``, ``masks``, ``positional``, ``train``, ``complexity``); this module only draws.
Tables that notebooks show beside their figures come from :func:`markdown_table`.

Conventions shared by the attention views:

* keys run across (x), queries run down (y), the first query at the top;
* axes use integer positions with the tokens as tick text, so a repeated token ("the ... the") keeps its own
  row/column instead of being merged by a categorical axis;
* hovering a cell shows ``query: TOKEN (i)``, ``key: TOKEN (j)`` and ``weight: 0.123``;
* tokens are HTML-escaped for plotly, so ``<eos>`` is shown instead of being swallowed as an unknown tag;
* long inputs (more than ``max_tokens`` tokens) keep a fixed cell size, so the figure grows with the input and
  scrolls in the notebook output, and only every k-th tick label is written (hover still names every token).

Offline use: call :func:`setup_offline_renderer` once at the top of a notebook so figure outputs carry
plotly.js instead of loading it from a CDN; :func:`to_html` writes standalone pages with plotly.js inside, and
:func:`to_image` exports PNG/SVG through kaleido (which needs a Chrome or Chromium on the machine).
"""

from __future__ import annotations

import dataclasses
import html
import importlib.metadata
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

from workbench.errors import WorkbenchError

__all__ = [
    "COLORSCALE",
    "HEAD_COLORS",
    "OFFLINE_RENDERER",
    "FigureInputError",
    "ImageExportError",
    "attention_heatmap",
    "bar_figure",
    "distance_matrix_figure",
    "head_grid",
    "head_lines",
    "head_stat_figure",
    "line_figure",
    "loglog_figure",
    "markdown_table",
    "mask_figure",
    "masks_side_by_side",
    "positional_heatmap",
    "setup_offline_renderer",
    "to_html",
    "to_image",
    "fit_title",
    "training_curves",
]

COLORSCALE = "Blues"  # attention weights in [0, 1]: white = 0
MASK_COLORS = [[0.0, "#eeeeee"], [0.5, "#eeeeee"], [0.5, "#2b6cb0"], [1.0, "#2b6cb0"]]  # blocked / may attend
HEAD_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
               "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd")
# "plotly_mimetype" renders natively in JupyterLab (the jupyterlab-plotly extension bundles plotly.js);
# "notebook" adds a text/html output with plotly.js embedded once per notebook, which is what classic
# Notebook, nbconvert HTML exports and papermill outputs show. Neither touches a CDN.
OFFLINE_RENDERER = "plotly_mimetype+notebook"

DEFAULT_MAX_TOKENS = 60  # above this, tick labels are decimated
MIN_CELL_PX, MAX_CELL_PX, TARGET_PLOT_PX = 14, 36, 540  # heatmap cell size: fixed 14 px for long inputs
IMAGE_FORMATS = ("png", "svg", "pdf", "jpeg", "jpg", "webp")


class FigureInputError(WorkbenchError, ValueError):
    """Arrays or labels that cannot be drawn as asked (wrong rank, token count not matching the weights...)."""


class ImageExportError(WorkbenchError, RuntimeError):
    """Static image export is unavailable: kaleido or a Chrome/Chromium browser is missing or failed."""


# -- setup --------------------------------------------------------------------------------------------------------
def setup_offline_renderer() -> str:
    """Make notebook figures render without a CDN; safe to call any number of times.

    Sets ``plotly.io.renderers.default`` to :data:`OFFLINE_RENDERER` (``"plotly_mimetype+notebook"``):
    JupyterLab draws the plotly mimetype with its bundled extension, and the ``notebook`` part adds an HTML
    output whose plotly.js is embedded in the notebook (not the ``notebook_connected`` CDN script), so
    nbconvert/papermill HTML reports also work offline. The renderer is set only when it differs, because
    re-setting it would embed plotly.js (about 4.5 MB) into the notebook a second time.

    Returns:
        The default renderer string now in effect.
    """
    if pio.renderers.default != OFFLINE_RENDERER:
        pio.renderers.default = OFFLINE_RENDERER
    return pio.renderers.default


PAGE_WIDTH = 700  # pixels: the widest a figure fits the book's column (sphinx-book-theme, 1300 px window)
TITLE_CHAR_PX = 8.5  # average width of a title character at plotly's default 17 px title font


def fit_title(fig: go.Figure) -> go.Figure:
    """Wrap a figure's title onto as many lines as its width needs (at spaces, with ``<br>``) and grow the top margin
    and the height to match, so a long title (a whole translation) is never cut at the figure's edge. Returns the
    figure."""
    title = fig.layout.title.text
    width = fig.layout.width
    if not title or not width or "<br>" in title:
        return fig
    per_line = max(20, int((width - 40) / TITLE_CHAR_PX))
    lines, line = [], ""
    for word in title.split(" "):
        if line and len(line) + 1 + len(word) > per_line:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    lines.append(line)
    if len(lines) == 1:
        return fig
    extra = 22 * (len(lines) - 1)
    top = fig.layout.margin.t if fig.layout.margin.t is not None else 80
    fig.update_layout(title={"text": "<br>".join(lines)}, margin={"t": top + extra})
    if fig.layout.height:
        fig.update_layout(height=fig.layout.height + extra)
    return fig


# -- private helpers ----------------------------------------------------------------------------------------------
def _to_numpy(x: Any) -> np.ndarray:
    """Tensor (any device/dtype, with or without grad) or array-like -> numpy array; bf16/fp16 become float32."""
    if hasattr(x, "detach"):  # torch.Tensor without importing torch here
        x = x.detach().cpu()
        if x.is_floating_point():
            x = x.float()
        x = x.numpy()
    return np.asarray(x)


def _ndim_check(a: np.ndarray, allowed: tuple[int, ...], name: str, shape_doc: str) -> None:
    if a.ndim not in allowed:
        raise FigureInputError(
            f"{name} has shape {tuple(a.shape)} but {shape_doc} is expected; "
            "index the batch first (e.g. cache['dec.cross', 0][0] for the first sentence)"
        )


def _esc(token: Any) -> str:
    """Escape a token for plotly text (plotly reads a subset of HTML: '<eos>' would vanish as a tag)."""
    return html.escape(str(token), quote=False)


def _labels(tokens: Sequence[Any] | None, n: int, name: str) -> list[str]:
    """Escaped token labels, or positions when no tokens are given; the count must match the array."""
    if tokens is None:
        return [str(i) for i in range(n)]
    tokens = list(tokens)
    if len(tokens) != n:
        raise FigureInputError(
            f"{name} has {len(tokens)} tokens but the array has {n} positions on that axis; "
            f"pass exactly {n} tokens (or None to label positions)"
        )
    return [_esc(t) for t in tokens]


def _hover(query_labels: Sequence[str], key_labels: Sequence[str]) -> np.ndarray:
    """(Tq, Tk) hover strings naming the query and key tokens with their positions (labels already escaped)."""
    return np.array([[f"query: {q} ({i})<br>key: {k} ({j})" for j, k in enumerate(key_labels)]
                     for i, q in enumerate(query_labels)], dtype=object)


HOVER_TEMPLATE = "%{customdata}<br>weight: %{z:.3f}<extra></extra>"


def _tick_step(n: int, max_labels: int) -> int:
    return max(1, math.ceil(n / max(1, max_labels)))


def _token_axis(labels: Sequence[str], max_labels: int) -> dict[str, Any]:
    """Integer positions with token tick text; more than ``max_labels`` tokens -> only every k-th label."""
    step = _tick_step(len(labels), max_labels)
    idx = list(range(0, len(labels), step))
    return {"tickmode": "array", "tickvals": idx, "ticktext": [labels[i] for i in idx]}


def _cell_px(n: int) -> int:
    """Cell size: large for short inputs, a fixed readable minimum for long ones (the figure then grows)."""
    return int(min(MAX_CELL_PX, max(MIN_CELL_PX, TARGET_PLOT_PX // max(1, n))))


def _label_px(labels: Sequence[str], font_px: float = 6.5, lo: int = 40, hi: int = 220) -> int:
    longest = max((len(html.unescape(s)) for s in labels), default=1)
    return int(min(hi, max(lo, 24 + font_px * longest)))


def _first_item(a: np.ndarray, ndim: int) -> np.ndarray:
    while a.ndim > ndim:
        a = a[0]
    return a


def _mask_2d(mask: Any, n_queries: int | None) -> np.ndarray:
    """Boolean mask -> (Tq, Tk) 0/1 ints: leading dims take the first item; (Tk,) or (1, Tk) rows broadcast."""
    m = _first_item(_to_numpy(mask), 2)
    if m.ndim == 1:
        m = m[None]
    if m.ndim != 2:
        raise FigureInputError(f"mask has shape {m.shape}; pass a (Tq, Tk) or (B, ..., Tq, Tk) boolean mask")
    if m.shape[0] == 1 and n_queries is not None and n_queries > 1:
        m = np.broadcast_to(m, (n_queries, m.shape[1]))  # a padding row applies to every query
    return m.astype(bool).astype(np.int8)


def _history_dict(history: Any) -> dict[str, Any]:
    if isinstance(history, Mapping):
        return dict(history)
    if dataclasses.is_dataclass(history) and not isinstance(history, type):
        return dataclasses.asdict(history)
    names = ("train_loss", "val_loss", "val_bleu", "lr")
    return {n: getattr(history, n) for n in names if hasattr(history, n)}


def _series(y: Any, n: int, name: str) -> np.ndarray:
    arr = _to_numpy(y).astype(float).reshape(-1)
    if arr.shape[0] != n:
        raise FigureInputError(f"series {name!r} has {arr.shape[0]} values but x has {n}; give one value per x")
    return arr


def _query_key_heatmap(z: np.ndarray, q: list[str], k: list[str], title: str | None, max_tokens: int | None,
                       right: int, min_plot_px: int = 0, **trace: Any) -> tuple[go.Figure, int]:
    """A figure of one (Tq, Tk) heatmap with square cells, the tokens on its axes (keys across, queries down, first
    query on top) and each cell's hover naming its two tokens; ``trace`` styles the ``Heatmap``. ``right`` is the
    margin for the colour bar, ``min_plot_px`` the least height of the plot area. Returns (figure, cell pixels)."""
    max_tokens = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
    Tq, Tk = z.shape
    fig = go.Figure(go.Heatmap(z=z, x=list(range(Tk)), y=list(range(Tq)), customdata=_hover(q, k), **trace))
    cell = _cell_px(max(Tq, Tk))
    left, bottom = _label_px(q), _label_px(k)
    top = 60 if title else 30
    fig.update_layout(title=title, width=max(320, left + right + cell * Tk),
                      height=max(260, top + bottom + max(cell * Tq, min_plot_px)), autosize=False,
                      margin={"l": left, "r": right, "t": top, "b": bottom}, plot_bgcolor="white")
    fig.update_xaxes(title_text="key", tickangle=-60, showgrid=False, **_token_axis(k, max_tokens))
    fig.update_yaxes(title_text="query", autorange="reversed", showgrid=False, **_token_axis(q, max_tokens))
    return fit_title(fig), cell


# -- attention ----------------------------------------------------------------------------------------------------
def attention_heatmap(weights: Any, query_tokens: Sequence[str] | None = None,
                      key_tokens: Sequence[str] | None = None, title: str | None = None,
                      max_tokens: int | None = None, zmax: float = 1.0) -> go.Figure:
    """One head's attention as a heatmap: keys across, queries down (first query on top).

    Cells are square. Up to ``max_tokens`` tokens per axis every token labels its row/column; beyond that the
    cell stays at a fixed readable size (the figure grows in proportion to the length, and scrolls in the
    notebook) and only every k-th tick is labelled, while the hover still names each token.

    Args:
        weights: attention weights of one head, rows summing to 1 (or 0 for fully masked queries).
        query_tokens: Tq labels (None: positions). Repeated tokens stay distinct rows.
        key_tokens: Tk labels (None: positions).
        title: figure title.
        max_tokens: most tick labels per axis (default 60).
        zmax: top of the colour scale (weights are drawn on [0, zmax]; 1 by default).

    Returns:
        A figure with one ``Heatmap`` trace whose ``z`` is the weights and whose ``customdata`` holds the hover
        text; ``x``/``y`` are integer positions.

    Shapes:
        weights: (Tq, Tk)
    """
    w = _to_numpy(weights)
    _ndim_check(w, (2,), "weights", "one head's (Tq, Tk) weights")
    Tq, Tk = w.shape
    q, k = _labels(query_tokens, Tq, "query_tokens"), _labels(key_tokens, Tk, "key_tokens")
    fig, cell = _query_key_heatmap(
        w, q, k, title, max_tokens, right=100, min_plot_px=2 * MIN_CELL_PX, colorscale=COLORSCALE, zmin=0.0,
        zmax=zmax, hovertemplate=HOVER_TEMPLATE, colorbar={"title": {"text": "weight", "side": "right"}, "thickness": 14})
    tick_font = {"size": 11 if cell >= 16 else 10}
    fig.update_xaxes(side="bottom", tickfont=tick_font)
    fig.update_yaxes(tickfont=tick_font)
    return fit_title(fig)


def head_grid(
    weights: Any,
    query_tokens: Sequence[str] | None = None,
    key_tokens: Sequence[str] | None = None,
    layer_labels: Sequence[str] | None = None,
    title: str | None = None,
    cell_px: int = 170,
    zmax: float = 1.0,
    max_tick_labels: int = 12,
    max_width: int | None = None,
) -> go.Figure:
    """Every head of every layer as small heatmaps: rows = layers, columns = heads, one shared colour scale.

    With ``max_width`` (pixels, e.g. :data:`PAGE_WIDTH`, the book's column) a layer whose heads do not fit one row
    wraps onto several rows of equal length, so the figure is never wider than ``max_width``.

    Tokens label the outer axes (left column, bottom row), at most ``max_tick_labels`` per axis; every cell
    hovers with its layer, head, tokens and weight. Traces are in row-major order: trace ``l * H + h`` is
    layer ``l``, head ``h``.

    Args:
        weights: per-head weights for several layers, or for one layer.
        query_tokens, key_tokens: Tq and Tk labels (None: positions).
        layer_labels: L row names (default "layer 0", ...; a single unnamed layer is left unnamed).
        title: figure title.
        cell_px: size of one subplot in pixels.
        zmax: top of the shared colour scale.
        max_tick_labels: most tick labels on an outer axis.
        max_width: the widest the figure may be (None: one row of all heads per layer, however wide).

    Shapes:
        weights: (L, H, Tq, Tk) or (H, Tq, Tk)
    """
    w = _to_numpy(weights)
    _ndim_check(w, (3, 4), "weights", "(L, H, Tq, Tk) or (H, Tq, Tk)")
    if w.ndim == 3:
        w = w[None]  # (1, H, Tq, Tk)
    L, H, Tq, Tk = w.shape
    q, k = _labels(query_tokens, Tq, "query_tokens"), _labels(key_tokens, Tk, "key_tokens")
    if layer_labels is None:
        rows = [f"layer {i}" for i in range(L)] if L > 1 else [""]
    else:
        rows = [_esc(s) for s in layer_labels]
        if len(rows) != L:
            raise FigureInputError(f"layer_labels has {len(rows)} names for {L} layers; give one per layer")
    names = [f"{rows[i]} · head {h}" if rows[i] else f"head {h}" for i in range(L) for h in range(H)]
    left, bottom = _label_px(q, 5.5, 30, 160), _label_px(k, 5.5, 30, 160)
    cols = H
    if max_width is not None and left + 90 + H * cell_px > max_width:
        fit = max(1, (max_width - left - 90) // cell_px)
        cols = math.ceil(H / math.ceil(H / fit))  # rows of equal length: 8 heads in 4 + 4, not 5 + 3
    per_layer = math.ceil(H / cols)  # rows of subplots per layer
    n_rows = L * per_layer
    fig = make_subplots(
        rows=n_rows, cols=cols, subplot_titles=names, shared_xaxes=True, shared_yaxes=True,
        horizontal_spacing=min(0.02, 0.5 / max(1, cols - 1)), vertical_spacing=min(0.06, 0.5 / max(1, n_rows - 1)),
    )
    hover = _hover(q, k)
    for i in range(L):
        for h in range(H):
            fig.add_trace(go.Heatmap(
                z=w[i, h], x=list(range(Tk)), y=list(range(Tq)), coloraxis="coloraxis", customdata=hover,
                hovertemplate=f"{names[i * H + h]}<br>{HOVER_TEMPLATE}",
            ), row=i * per_layer + h // cols + 1, col=h % cols + 1)
    fig.update_layout(
        title=title, coloraxis={"colorscale": COLORSCALE, "cmin": 0.0, "cmax": zmax,
                                "colorbar": {"title": {"text": "weight", "side": "right"}, "thickness": 14}},
        width=left + 90 + cols * cell_px, height=(70 if title else 45) + bottom + n_rows * cell_px, autosize=False,
        margin={"l": left, "r": 90, "t": 70 if title else 45, "b": bottom}, plot_bgcolor="white",
    )
    fig.update_xaxes(tickangle=-60, tickfont={"size": 9}, showgrid=False, **_token_axis(k, max_tick_labels))
    fig.update_yaxes(autorange="reversed", tickfont={"size": 9}, showgrid=False, **_token_axis(q, max_tick_labels))
    fig.update_annotations(font_size=10)
    return fit_title(fig)


def head_lines(
    weights: Any,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str],
    head: int | Sequence[int] | None = None,
    threshold: float = 0.02,
    title: str | None = None,
    levels: int = 10,
) -> go.Figure:
    """A bertviz-style "lines between tokens" view in pure plotly (works offline, unlike bertviz's CDN scripts).

    Queries sit in the left column and keys in the right column (bertviz's layout); each (query, key) pair
    whose weight is at least ``threshold`` is joined by a line in its head's colour, with width and opacity
    growing with the weight. Weights are binned into ``levels`` steps so a whole head needs only a few traces
    (one per level); a line's hover gives the exact weight. Clicking a head in the legend hides its lines.

    Args:
        weights: one head, or a stack of heads of one layer.
        query_tokens: Tq labels (left column). key_tokens: Tk labels (right column).
        head: which head(s) of a stack to draw; None draws every head, overlaid.
        threshold: smallest weight drawn.
        title: figure title.
        levels: number of width/opacity steps.

    Returns:
        For each head a legend-only trace (``x=[None]``) and its line traces (``mode="lines"``, all in legend
        group ``"head h"``; each (query, key) pair is one segment with its hover text), then two marker+text
        traces: the query column and the key column.

    Shapes:
        weights: (Tq, Tk) or (H, Tq, Tk)
    """
    w = _to_numpy(weights).astype(float)
    _ndim_check(w, (2, 3), "weights", "(Tq, Tk) or (H, Tq, Tk)")
    if w.ndim == 2:
        w = w[None]  # (1, Tq, Tk)
    H, Tq, Tk = w.shape
    q, k = _labels(query_tokens, Tq, "query_tokens"), _labels(key_tokens, Tk, "key_tokens")
    heads = list(range(H)) if head is None else ([int(head)] if isinstance(head, (int, np.integer)) else [int(h) for h in head])
    for h in heads:
        if not -H <= h < H:
            raise FigureInputError(f"head={h} but the weights hold {H} head(s); pick a head in 0..{H - 1}")
    heads = [h % H for h in heads]
    edges = np.linspace(threshold, 1.0, levels + 1)
    fig = go.Figure()
    for h in heads:
        color = HEAD_COLORS[h % len(HEAD_COLORS)]
        qi, kj = np.nonzero(w[h] >= threshold)
        vals = w[h][qi, kj]
        bins = np.clip(np.searchsorted(edges, vals, side="right") - 1, 0, levels - 1)
        fig.add_trace(go.Scatter(  # legend entry only: a mid-weight line in the head's colour
            x=[None], y=[None], mode="lines", line={"color": color, "width": 3}, name=f"head {h}",
            legendgroup=f"head {h}", showlegend=True,
        ))
        for b in range(levels):
            sel = np.nonzero(bins == b)[0]
            if sel.size == 0:
                continue
            level = (b + 1) / levels
            xs: list[float | None] = []
            ys: list[float | None] = []
            texts: list[str | None] = []
            for s in sel:
                i, j, a = int(qi[s]), int(kj[s]), float(vals[s])
                label = f"head {h}<br>query: {q[i]} ({i})<br>key: {k[j]} ({j})<br>weight: {a:.3f}"
                xs += [0.0, 0.5, 1.0, None]
                ys += [i, (i + j) / 2, j, None]
                texts += [label, label, label, None]
            fig.add_trace(go.Scatter(
                x=xs, y=ys, mode="lines", line={"color": color, "width": 0.5 + 5.5 * level},
                opacity=0.15 + 0.85 * level, text=texts, hoverinfo="text", name=f"head {h}",
                legendgroup=f"head {h}", showlegend=False,
            ))
    fig.add_trace(go.Scatter(
        x=[0.0] * Tq, y=list(range(Tq)), mode="markers+text", text=q, textposition="middle left",
        marker={"size": 7, "color": "#444"}, hovertext=[f"query {i}: {t}" for i, t in enumerate(q)],
        hoverinfo="text", showlegend=False, name="queries",
    ))
    fig.add_trace(go.Scatter(
        x=[1.0] * Tk, y=list(range(Tk)), mode="markers+text", text=k, textposition="middle right",
        marker={"size": 7, "color": "#444"}, hovertext=[f"key {j}: {t}" for j, t in enumerate(k)],
        hoverinfo="text", showlegend=False, name="keys",
    ))
    pad = _label_px(q + k, 6.5, 40, 200) / 400  # room for the token text, in x units of a 400 px column
    fig.update_xaxes(visible=False, range=[-0.1 - pad, 1.1 + pad], fixedrange=True)
    fig.update_yaxes(visible=False, range=[max(Tq, Tk) - 0.4, -0.6])  # first token on top
    fig.update_layout(
        title=title or "attention: queries (left) → keys (right)", plot_bgcolor="white", autosize=False,
        width=600, height=max(300, 24 * max(Tq, Tk) + 130), hovermode="closest",
        margin={"l": 10, "r": 10, "t": 90, "b": 10},
        legend={"orientation": "h", "x": 0, "y": 1.0, "yanchor": "bottom", "itemclick": "toggle"},
    )
    return fit_title(fig)


def head_stat_figure(values: Any, row_labels: Sequence[str], title: str | None = None,
                     colorscale: str = "Viridis") -> go.Figure:
    """A table of per-head statistics (entropy, confidence, importance) as an annotated heatmap.

    Shapes:
        values: (rows, H), e.g. one row per layer
    """
    v = _to_numpy(values).astype(float)
    _ndim_check(v, (2,), "values", "(rows, H)")
    rows = _labels(row_labels, v.shape[0], "row_labels")
    fig = go.Figure(go.Heatmap(
        z=v, x=list(range(v.shape[1])), y=list(range(v.shape[0])), colorscale=colorscale,
        texttemplate="%{z:.2f}", customdata=np.array([[r] * v.shape[1] for r in rows], dtype=object),
        hovertemplate="%{customdata}, head %{x}: %{z:.3f}<extra></extra>",
    ))
    fig.update_layout(title=title, height=max(300, 32 * v.shape[0] + 140), width=max(420, 56 * v.shape[1] + 260))
    fig.update_xaxes(title_text="head", tickmode="array", tickvals=list(range(v.shape[1])))
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=list(range(v.shape[0])), ticktext=rows)
    return fit_title(fig)


# -- positions and masks ------------------------------------------------------------------------------------------
def positional_heatmap(table: Any, title: str | None = "positional encoding") -> go.Figure:
    """A positional-encoding table: positions down, embedding dimensions across, diverging colours around 0.

    Shapes:
        table: (T, D)
    """
    t = _to_numpy(table).astype(float)
    _ndim_check(t, (2,), "table", "a (T, D) table")
    T, D = t.shape
    fig = go.Figure(go.Heatmap(
        z=t, x=list(range(D)), y=list(range(T)), colorscale="RdBu", zmid=0.0,
        hovertemplate="position %{y}<br>dimension %{x}<br>value %{z:.3f}<extra></extra>",
        colorbar={"thickness": 14},
    ))
    fig.update_layout(title=title, height=min(900, max(320, 6 * T + 140)), width=720)
    fig.update_xaxes(title_text="dimension i")
    fig.update_yaxes(title_text="position p", autorange="reversed")
    return fit_title(fig)


def distance_matrix_figure(dist: Any, annotate: bool | None = None,
                           title: str | None = "L2 distance between positions") -> go.Figure:
    """The position-by-position distance table; small tables (T <= 12) print each value in its cell.

    Args:
        dist: pairwise distances (e.g. ``positional.distance_matrix(table)``).
        annotate: write values in the cells; None -> only when T <= 12.
        title: figure title.

    Shapes:
        dist: (T, T)
    """
    d = _to_numpy(dist).astype(float)
    _ndim_check(d, (2,), "dist", "a (T, T) matrix")
    T = d.shape[0]
    annotate = T <= 12 if annotate is None else annotate
    cell = 44 if annotate else _cell_px(T)
    fig = go.Figure(go.Heatmap(
        z=d, x=list(range(d.shape[1])), y=list(range(T)), colorscale="Viridis",
        texttemplate="%{z:.2f}" if annotate else None, textfont={"size": 10},
        hovertemplate="position %{y} vs %{x}<br>distance %{z:.3f}<extra></extra>", colorbar={"thickness": 14},
    ))
    fig.update_layout(title=title, width=max(380, cell * d.shape[1] + 170), height=max(340, cell * T + 130),
                      autosize=False, margin={"l": 60, "r": 100, "t": 70, "b": 50})
    axis = {"tickmode": "array", "tickvals": list(range(0, T, _tick_step(T, DEFAULT_MAX_TOKENS)))}
    fig.update_xaxes(side="top", **axis)  # read like a table: column numbers on top
    fig.update_yaxes(title_text="position", autorange="reversed", **axis)
    return fit_title(fig)


def mask_figure(mask: Any, query_tokens: Sequence[str] | None = None, key_tokens: Sequence[str] | None = None,
                title: str | None = None, max_tokens: int | None = None) -> go.Figure:
    """A boolean attention mask as a grid: blue = may attend (True, the SDPA convention), grey = blocked.

    Leading dimensions are indexed at 0 (the first item of a batch); a (1, Tk) or (Tk,) padding row is repeated
    for every query when ``query_tokens`` says how many there are.

    Returns:
        A figure with one ``Heatmap`` whose ``z`` is the mask as 0/1.

    Shapes:
        mask: (Tq, Tk), (Tk,) or (B, ..., Tq, Tk)
    """
    m = _mask_2d(mask, None if query_tokens is None else len(list(query_tokens)))
    Tq, Tk = m.shape
    q, k = _labels(query_tokens, Tq, "query_tokens"), _labels(key_tokens, Tk, "key_tokens")
    fig, _ = _query_key_heatmap(
        m, q, k, title, max_tokens, right=130, zmin=0, zmax=1, colorscale=MASK_COLORS, xgap=1, ygap=1,
        hovertemplate="%{customdata}<br>may attend: %{z}<extra></extra>",
        colorbar={"tickmode": "array", "tickvals": [0.25, 0.75], "ticktext": ["blocked", "may attend"],
                  "thickness": 14, "len": 0.4})
    return fit_title(fig)


def masks_side_by_side(masks: Mapping[str, Any], query_tokens: Sequence[str] | None = None,
                       key_tokens: Sequence[str] | None = None, title: str | None = None,
                       cell_px: int | None = None) -> go.Figure:
    """Several masks next to each other (e.g. padding, causal, combined), one subplot each, same colours.

    Each mask is reduced as in :func:`mask_figure`; ``query_tokens``/``key_tokens`` label every subplot.

    Shapes:
        masks: name -> (Tq, Tk), (Tk,) or (B, ..., Tq, Tk) boolean
    """
    if not masks:
        raise FigureInputError("masks is empty; pass a dict such as {'causal': causal_mask(5)}")
    names = list(masks)
    n_q = None if query_tokens is None else len(list(query_tokens))
    arrays = [_mask_2d(masks[n], n_q) for n in names]
    Tq = max(a.shape[0] for a in arrays)
    Tk = max(a.shape[1] for a in arrays)
    cell = cell_px or _cell_px(max(Tq, Tk))
    fig = make_subplots(rows=1, cols=len(names), subplot_titles=[_esc(n) for n in names],
                        horizontal_spacing=min(0.08, 0.5 / max(1, len(names) - 1)))
    for c, (name, m) in enumerate(zip(names, arrays, strict=True), start=1):
        q = _labels(query_tokens if query_tokens is not None and len(list(query_tokens)) == m.shape[0] else None,
                    m.shape[0], "query_tokens")
        k = _labels(key_tokens if key_tokens is not None and len(list(key_tokens)) == m.shape[1] else None,
                    m.shape[1], "key_tokens")
        fig.add_trace(go.Heatmap(
            z=m, x=list(range(m.shape[1])), y=list(range(m.shape[0])), zmin=0, zmax=1, colorscale=MASK_COLORS,
            showscale=False, xgap=1, ygap=1, customdata=_hover(q, k), name=_esc(name),
            hovertemplate=f"{_esc(name)}<br>%{{customdata}}<br>may attend: %{{z}}<extra></extra>",
        ), row=1, col=c)
        fig.update_xaxes(row=1, col=c, tickangle=-60, showgrid=False, **_token_axis(k, DEFAULT_MAX_TOKENS))
        fig.update_yaxes(row=1, col=c, autorange="reversed", showgrid=False, **_token_axis(q, DEFAULT_MAX_TOKENS))
    label_q = _label_px(_labels(query_tokens, n_q, "query_tokens") if n_q else ["0"])
    label_k = _label_px(_labels(key_tokens, Tk, "key_tokens") if key_tokens is not None and len(list(key_tokens)) == Tk
                        else ["0"])
    fig.update_layout(title=title, width=label_q + 40 + len(names) * (cell * Tk + 40),
                      height=max(260, (70 if title else 50) + label_k + cell * Tq), autosize=False,
                      margin={"l": label_q, "r": 20, "t": 70 if title else 50, "b": label_k}, plot_bgcolor="white")
    return fit_title(fig)


# -- training and measurements ------------------------------------------------------------------------------------
def training_curves(history: Any, title: str | None = "training") -> go.Figure:
    """Per-epoch curves of a run: losses on the left, validation BLEU and learning rate on the right.

    Args:
        history: a ``train.History``, any dataclass, dict or object with lists ``train_loss`` and ``val_loss``
            (one value per epoch) and optionally ``val_bleu`` and ``lr``. Missing or empty lists are skipped.
        title: figure title.

    Returns:
        One trace per non-empty series. With BLEU or learning rate, a second subplot holds them (learning rate
        on its own y-axis when both are present); otherwise one plot.
    """
    h = _history_dict(history)
    train, val = list(h.get("train_loss") or []), list(h.get("val_loss") or [])
    bleu, lr = list(h.get("val_bleu") or []), list(h.get("lr") or [])
    if not train and not val:
        raise FigureInputError(
            f"history has no train_loss or val_loss values (keys: {sorted(h)}); pass the History returned by fit()"
        )
    right = bool(bleu or lr)
    fig = make_subplots(rows=1, cols=2 if right else 1, specs=[[{}, {"secondary_y": True}]] if right else [[{}]],
                        subplot_titles=["loss per target token", "validation"] if right else None,
                        horizontal_spacing=0.14)

    def epochs(values: list[Any]) -> list[int]:
        return list(range(1, len(values) + 1))

    if train:
        fig.add_trace(go.Scatter(x=epochs(train), y=train, mode="lines+markers", name="train loss (label-smoothed)"),
                      row=1, col=1)
    if val:
        fig.add_trace(go.Scatter(x=epochs(val), y=val, mode="lines+markers", name="validation loss"), row=1, col=1)
    if bleu:
        fig.add_trace(go.Scatter(x=epochs(bleu), y=bleu, mode="lines+markers", name="validation BLEU"),
                      row=1, col=2, secondary_y=False)
        fig.update_yaxes(title_text="BLEU", row=1, col=2, secondary_y=False)
    if lr:
        fig.add_trace(go.Scatter(x=epochs(lr), y=lr, mode="lines", name="learning rate", line={"dash": "dot"}),
                      row=1, col=2, secondary_y=bool(bleu))
        fig.update_yaxes(title_text="learning rate", tickformat=".1e", showgrid=not bleu, row=1, col=2,
                         secondary_y=bool(bleu))
    fig.update_yaxes(title_text="loss", row=1, col=1)
    fig.update_xaxes(title_text="epoch", dtick=1 if max(len(train), len(val), len(bleu), len(lr)) <= 20 else None)
    fig.update_layout(title=title, height=400, width=980 if right else 620, legend={"orientation": "h", "y": -0.25})
    return fit_title(fig)


def loglog_figure(
    x: Any,
    series: Mapping[str, Any],
    fits: Mapping[str, tuple[float, float]] | None = None,
    xlabel: str = "n",
    ylabel: str = "time (s)",
    title: str | None = None,
) -> go.Figure:
    """Measurements on log-log axes, each with its fitted power law drawn dashed and its slope in the legend.

    Args:
        x: shared x values (e.g. sequence lengths).
        series: name -> y values, one per x.
        fits: name -> (slope, intercept) of ``log y = slope * log x + intercept`` with natural logs, as
            returned by ``complexity.fit_loglog_slope``; the line ``exp(intercept) * x**slope`` is drawn dashed.
        xlabel, ylabel, title: labels.

    Returns:
        For each series its measurement trace (named "name (slope 2.00)" when fitted) followed, when fitted,
        by the dashed fit trace.
    """
    xs = _to_numpy(x).astype(float).reshape(-1)
    fits = dict(fits or {})
    unknown = sorted(set(fits) - set(series))
    if unknown:
        raise FigureInputError(f"fits for {unknown} have no series of that name; series are {list(series)}")
    fig = go.Figure()
    for i, (name, y) in enumerate(series.items()):
        ys = _series(y, xs.shape[0], name)
        color = HEAD_COLORS[i % len(HEAD_COLORS)]
        label = _esc(name)
        if name in fits:
            slope, intercept = fits[name]
            label = f"{label} (slope {slope:.2f})"
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers+lines", name=label, legendgroup=label,
                                 line={"color": color}))
        if name in fits:
            fig.add_trace(go.Scatter(
                x=xs, y=np.exp(intercept) * xs**slope, mode="lines", name=f"{_esc(name)} fit: x^{slope:.2f}",
                legendgroup=label, showlegend=False, line={"dash": "dash", "color": color, "width": 1.5},
            ))
    fig.update_xaxes(type="log", title_text=xlabel)
    fig.update_yaxes(type="log", title_text=ylabel)
    fig.update_layout(title=title, height=420, width=700)
    return fit_title(fig)


def line_figure(
    x: Any,
    series: Mapping[str, Any],
    xlabel: str = "",
    ylabel: str = "",
    title: str | None = None,
    log_x: bool = False,
    log_y: bool = False,
) -> go.Figure:
    """A few named lines over a shared x (e.g. BLEU against source length, BLEU as heads are pruned)."""
    xs = _to_numpy(x).reshape(-1)
    fig = go.Figure([go.Scatter(x=xs, y=_series(y, xs.shape[0], name), mode="lines+markers", name=_esc(name))
                     for name, y in series.items()])
    fig.update_xaxes(title_text=xlabel, type="log" if log_x else None)
    fig.update_yaxes(title_text=ylabel, type="log" if log_y else None)
    fig.update_layout(title=title, height=400, width=700, showlegend=True)
    return fit_title(fig)


def bar_figure(labels: Sequence[Any], values: Any, title: str | None = None, ylabel: str = "",
               xlabel: str = "") -> go.Figure:
    """One bar per label, its value printed above it."""
    names = [_esc(s) for s in labels]
    vals = _series(values, len(names), "values")
    fig = go.Figure(go.Bar(x=names, y=vals, text=[f"{v:.3g}" for v in vals], textposition="outside",
                           hovertemplate="%{x}: %{y:.4g}<extra></extra>"))
    fig.update_layout(title=title, xaxis_title=xlabel, yaxis_title=ylabel, height=400,
                      width=max(420, 60 * len(names) + 200))
    fig.update_xaxes(type="category")  # numeric-looking labels ("8", "16") stay bars of their own
    return fit_title(fig)


# -- tables -------------------------------------------------------------------------------------------------------
def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """A Markdown table of dict rows (floats with 4 significant digits), for ``IPython.display.Markdown``."""
    columns = list(columns or (rows[0].keys() if rows else []))

    def fmt(v: Any) -> str:  # a "|" or a line break inside a cell would break the table's row
        text = f"{v:.4g}" if isinstance(v, float) else str(v)
        return text.replace("|", "\\|").replace("\r\n", "<br>").replace("\n", "<br>")

    lines = ["| " + " | ".join(fmt(c) for c in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


# -- export -------------------------------------------------------------------------------------------------------
def to_html(fig: go.Figure, path: str | Path) -> Path:
    """Write a standalone HTML page with plotly.js embedded (about 4.5 MB), which opens with no network.

    Returns:
        The path written (parent folders are created).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.write_html(path, include_plotlyjs=True, full_html=True, include_mathjax=False)
    return path


def _kaleido_version() -> str | None:
    try:
        return importlib.metadata.version("kaleido")
    except importlib.metadata.PackageNotFoundError:
        return None


def to_image(fig: go.Figure, path: str | Path, format: str | None = None, scale: float = 2.0) -> Path:
    """Export a static image through kaleido (PNG, SVG, PDF, JPEG or WebP).

    kaleido >= 1 drives a Chrome/Chromium already on the machine: it looks on ``PATH`` (``chromium``,
    ``google-chrome``...), at the usual install paths (``/usr/bin/chromium``) and honours the ``BROWSER_PATH``
    environment variable. Install one with ``apt-get install chromium`` or ``plotly_get_chrome``.

    Args:
        fig: the figure.
        path: output file; its suffix gives the format unless ``format`` is set.
        format: "png", "svg", "pdf", "jpeg" or "webp".
        scale: pixel density multiplier for raster formats.

    Returns:
        The path written.

    Raises:
        ImageExportError: kaleido is missing or too old, or no browser could be started; the message says
            what to install. Use :func:`to_html` for an export that needs neither.
    """
    path = Path(path)
    fmt = (format or path.suffix.lstrip(".")).lower()
    if fmt not in IMAGE_FORMATS:
        raise FigureInputError(f"image format {fmt!r} (from {path.name!r}) is not one of {IMAGE_FORMATS}; "
                               "use a .png or .svg path or pass format='png'")
    version = _kaleido_version()
    if version is None or int(version.split(".")[0]) < 1:
        found = "not installed" if version is None else f"version {version} is installed"
        raise ImageExportError(
            f"image export needs kaleido >= 1 ({found}): pip install 'kaleido>=1' "
            "(or pip install 'attention-workbench[export]'), plus a Chrome/Chromium browser; "
            "to_html(fig, path) works without either"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fig.write_image(path, format=fmt, scale=scale)
    except Exception as exc:  # kaleido/choreographer report a missing or broken browser with several types
        raise ImageExportError(
            f"kaleido could not export {path.name} ({type(exc).__name__}: {str(exc).strip()[:300]}); it needs "
            "Chrome or Chromium: install one (apt-get install chromium, or run plotly_get_chrome), or point "
            "BROWSER_PATH at an existing chrome/chromium binary; to_html(fig, path) works without a browser"
        ) from exc
    return path


# -- information flow, attribution and interventions ---------------------------------------------------------------
def rollout_heatmap(
    rollout: Any,
    query_tokens: Sequence[str] | None = None,
    key_tokens: Sequence[str] | None = None,
    title: str | None = "attention rollout",
    max_tokens: int | None = None,
) -> go.Figure:
    """An attention rollout or flow matrix (:mod:`workbench.inspect.flow`): top positions down, input tokens across.

    Drawn like :func:`attention_heatmap` (same axes, hover and sizing), with the colour scale running from 0 to
    the largest entry, since rolled-out shares spread out and would look blank on [0, 1].

    Shapes:
        rollout: (Tq, Tk), e.g. (S, S) through the encoder or (T, S) from output tokens to the source
    """
    r = _to_numpy(rollout).astype(float)
    _ndim_check(r, (2,), "rollout", "a (Tq, Tk) rollout or flow matrix")
    top = float(np.nanmax(r)) if r.size else 1.0
    fig = attention_heatmap(r, query_tokens, key_tokens, title=title, max_tokens=max_tokens, zmax=top if top > 0 else 1.0)
    fig.update_traces(hovertemplate="%{customdata}<br>share: %{z:.3f}<extra></extra>", colorbar_title_text="share")
    return fit_title(fig)


def row_shares(values: Any) -> np.ndarray:
    """|values| with every row rescaled to sum to 1 (all-zero rows stay zero): what
    :func:`attention_vs_attribution` draws. Shapes: (T, S) -> (T, S)."""
    mag = np.abs(_to_numpy(values).astype(float))
    total = mag.sum(-1, keepdims=True)
    return mag / np.where(total > 0, total, 1.0)


def attention_vs_attribution(
    panels: Mapping[str, Any],
    query_tokens: Sequence[str] | None = None,
    key_tokens: Sequence[str] | None = None,
    title: str | None = None,
    cell_px: int | None = None,
    max_tick_labels: int = 40,
) -> go.Figure:
    """Source-side views of one sentence side by side: attention summaries and attributions, one panel each.

    Every panel is shown as |value| with each row rescaled to sum to 1 (attention rows already do), so a
    signed attribution and an attention distribution share one colour scale; the hover shows the raw value too.
    Panels are traces in the order given.

    Args:
        panels: name -> (T, S) values, e.g. ``{"cross-attention (mean)": ..., "integrated gradients": ...}``.
        query_tokens: T output tokens (rows); key_tokens: S source tokens (columns).

    Shapes:
        each panel: (T, S)
    """
    if not panels:
        raise FigureInputError("no panels to draw: pass {name: (T, S) array}")
    arrays = {name: _to_numpy(v).astype(float) for name, v in panels.items()}
    shapes = {a.shape for a in arrays.values()}
    for name, a in arrays.items():
        _ndim_check(a, (2,), f"panel {name!r}", "a (T, S) array")
    if len(shapes) != 1:
        raise FigureInputError(f"panels have different shapes {sorted(shapes)}: give every panel the same (T, S)")
    T, S = next(iter(shapes))
    q, k = _labels(query_tokens, T, "query_tokens"), _labels(key_tokens, S, "key_tokens")
    names = [_esc(n) for n in arrays]
    fig = make_subplots(rows=1, cols=len(arrays), subplot_titles=names, shared_yaxes=True,
                        horizontal_spacing=min(0.04, 0.4 / max(1, len(arrays) - 1)))
    hover = _hover(q, k)
    top = 0.0
    for col, (name, a) in enumerate(arrays.items(), start=1):
        norm = row_shares(a)
        top = max(top, float(norm.max()) if norm.size else 0.0)
        text = np.array([[f"{hover[i, j]}<br>value: {a[i, j]:.4g}" for j in range(S)] for i in range(T)], dtype=object)
        fig.add_trace(go.Heatmap(z=norm, x=list(range(S)), y=list(range(T)), coloraxis="coloraxis", customdata=text,
                                 hovertemplate=f"{_esc(name)}<br>%{{customdata}}<br>share of row: %{{z:.3f}}<extra></extra>"),
                      row=1, col=col)
    cell = cell_px or _cell_px(max(T, S * len(arrays)))
    left, bottom = _label_px(q), _label_px(k)
    fig.update_layout(
        title=title, coloraxis={"colorscale": COLORSCALE, "cmin": 0.0, "cmax": top if top > 0 else 1.0,
                                "colorbar": {"title": {"text": "|value|, row share", "side": "right"}, "thickness": 14}},
        width=left + 110 + len(arrays) * (cell * S + 30), height=(70 if title else 50) + bottom + max(cell * T, 2 * MIN_CELL_PX),
        autosize=False, margin={"l": left, "r": 110, "t": 70 if title else 50, "b": bottom}, plot_bgcolor="white",
    )
    fig.update_xaxes(tickangle=-60, tickfont={"size": 10}, showgrid=False, **_token_axis(k, max_tick_labels))
    fig.update_yaxes(autorange="reversed", tickfont={"size": 10}, showgrid=False, **_token_axis(q, max_tick_labels))
    fig.update_annotations(font_size=11)
    return fit_title(fig)


def token_bars(tokens: Sequence[str], values: Any, title: str | None = None, ylabel: str = "Δ log p") -> go.Figure:
    """One bar per token position (repeated tokens keep their own bar), negative bars red and positive blue.

    Used for the change in each output token's log-probability when heads are switched off.

    Shapes:
        values: (T,) one per token
    """
    labels = _labels(tokens, len(tokens), "tokens")
    vals = _series(values, len(labels), "values")
    colours = ["#d62728" if v < 0 else "#1f77b4" for v in vals]
    fig = go.Figure(go.Bar(x=list(range(len(labels))), y=vals, marker_color=colours, customdata=labels,
                           hovertemplate="%{customdata} (%{x}): %{y:.4g}<extra></extra>", showlegend=False))
    for name, colour in (("positive", "#1f77b4"), ("negative", "#d62728")):  # the legend names the two colours
        fig.add_trace(go.Bar(x=[None], y=[None], marker_color=colour, name=f"{name} {_esc(ylabel)}", hoverinfo="skip"))
    fig.update_layout(title=title, yaxis_title=ylabel, height=320, width=max(420, 28 * len(labels) + 160),
                      margin={"b": _label_px(labels)}, plot_bgcolor="white", showlegend=True,
                      legend={"orientation": "h", "x": 0, "y": 1.0, "yanchor": "bottom"})
    fig.update_xaxes(tickangle=-60, **_token_axis(labels, DEFAULT_MAX_TOKENS))
    fig.update_yaxes(zeroline=True, zerolinecolor="#888")
    return fit_title(fig)


def grouped_bar_figure(categories: Sequence[Any], series: Mapping[str, Any], errors: Mapping[str, Any] | None = None,
                       title: str | None = None, ylabel: str = "", xlabel: str = "") -> go.Figure:
    """Bars grouped by category, one colour per series, with optional ± error bars (e.g. standard errors).

    Used for agreement scores: categories are attribution methods, series are attention summaries and baselines.

    Args:
        categories: C group labels along x.
        series: name -> C values (NaN leaves a gap).
        errors: name -> C half-widths of the error bars, for any of the series.

    Shapes:
        each series and error: (C,)
    """
    cats = [_esc(c) for c in categories]
    if not series:
        raise FigureInputError("no series to draw: pass {name: one value per category}")
    unknown = sorted(set(errors or {}) - set(series))
    if unknown:
        raise FigureInputError(f"errors for {unknown}, which are not series: the series are {list(series)}")
    fig = go.Figure()
    for name, values in series.items():
        vals = _series(values, len(cats), name)
        err = None
        if errors and name in errors:
            err = {"type": "data", "array": _series(errors[name], len(cats), f"errors of {name}"), "visible": True}
        fig.add_trace(go.Bar(x=cats, y=vals, name=_esc(name), error_y=err,
                             hovertemplate=f"{_esc(name)}<br>%{{x}}: %{{y:.3f}}<extra></extra>"))
    fig.update_layout(title=title, barmode="group", xaxis_title=xlabel, yaxis_title=ylabel, height=420,
                      width=max(480, 40 * len(cats) * len(series) + 260), showlegend=True)  # each colour named
    fig.update_xaxes(type="category")
    return fit_title(fig)


__all__ += ["attention_vs_attribution", "grouped_bar_figure", "rollout_heatmap", "row_shares", "token_bars"]
