"""Figures of decoding: the beam search's tree, the top-k next tokens of each greedy step, the key/value cache's
growth, and how the length penalty alpha re-ranks the finished hypotheses.

Like :mod:`workbench.viz.figures`, these only draw: the trees, probabilities and counts come from
:mod:`workbench.translation.decode_trace` and :mod:`workbench.lessons.flops`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench.viz.figures import PAGE_WIDTH, FigureInputError, _esc, _to_numpy

__all__ = ["STATUS_COLORS", "alpha_figure", "beam_tree_figure", "kv_cache_figure", "lens_steps_figure", "topk_figure"]

STATUS_COLORS = {"kept": "#2b6cb0", "finished": "#2f855a", "pruned": "#a0aec0", "winner": "#c53030"}


def _tree_rows(trace: Any) -> dict[int, float]:
    """A vertical position for every node: children in the order of their parents, best score first."""
    y: dict[int, float] = {0: 0.0}
    by_step: dict[int, list[Any]] = {}
    for node in trace.nodes[1:]:
        by_step.setdefault(node.step, []).append(node)
    for step in sorted(by_step):
        ordered = sorted(by_step[step], key=lambda n: (y[n.parent], -n.logp))
        for rank, node in enumerate(ordered):
            y[node.id] = float(rank)
    return y


def beam_tree_figure(trace: Any, token_label: Callable[[int], str], ranking: Any | None = None,
                     title: str | None = None, leads: Mapping[int, int] | None = None) -> go.Figure:
    """The beam search as a tree: steps run across, every hypothesis considered is a node labelled with its token.

    Blue nodes entered the beam, green ones finished (eos entered the beam), grey ones were pruned by the top-K
    choice; a finished hypothesis later pushed out of the beam is drawn as a cross. With a ``ranking``
    (:func:`workbench.translation.decode_trace.rerank`) the winner's path is red and the step where the search
    stops for that alpha is a dashed line. Hovering a node shows the whole hypothesis, its summed log-probability
    and, when finished, its length-normalised score.

    Args:
        trace: a :class:`~workbench.translation.decode_trace.BeamTrace`.
        token_label: token id -> text.
        ranking: a :class:`~workbench.translation.decode_trace.Ranking` to draw (winner, stop step).
        title: figure title.
        leads: node id -> the decoder layer from which its word leads under the lens (-1: never), from
            :func:`workbench.inspect.lens_paths.beam_tree_leads`; the hover names it.
    """
    if not getattr(trace, "nodes", None):
        raise FigureInputError("the beam trace has no nodes: trace a sentence with trace_beam first")
    y = _tree_rows(trace)
    winner_path: set[int] = set()
    if ranking is not None:
        node = ranking.winner
        while node >= 0:
            winner_path.add(node)
            node = trace.nodes[node].parent
    fig = go.Figure()
    for status in ("pruned", "kept", "finished"):
        xs: list[float | None] = []
        ys: list[float | None] = []
        for n in trace.nodes[1:]:
            if n.status == status:
                xs += [n.step - 1, n.step, None]
                ys += [y[n.parent], y[n.id], None]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=False,
                                 line=dict(color=STATUS_COLORS[status], width=1 if status == "pruned" else 2,
                                           dash="dot" if status == "pruned" else "solid")))
    if winner_path:
        path = sorted(winner_path, key=lambda i: trace.nodes[i].step)
        fig.add_trace(go.Scatter(x=[trace.nodes[i].step for i in path], y=[y[i] for i in path], mode="lines",
                                 line=dict(color=STATUS_COLORS["winner"], width=4), hoverinfo="skip",
                                 name=f"winner at α = {ranking.alpha:g}"))
    for status in ("pruned", "kept", "finished"):
        nodes = [n for n in trace.nodes if n.status == status]
        if not nodes:
            continue
        hover, symbols = [], []
        for n in nodes:
            text = " ".join(_esc(token_label(t)) for t in trace.hypothesis(n.id)) or "&lt;bos&gt;"
            extra = ""
            if ranking is not None and n.id in ranking.normalised:
                extra = f"<br>log P / lp = {ranking.normalised[n.id]:.3f}"
            left = trace.left_beam_at(n.id) if status == "finished" else None
            if left is not None:
                extra += f"<br>pushed out of the beam at step {left}"
            if leads is not None and n.id in leads:
                lead = leads[n.id]
                extra += (f"<br>lens: leads from decoder layer {lead}" if lead >= 0
                          else "<br>lens: never the top word (a beam's lower-ranked extension)")
            symbols.append("x" if left is not None else "circle")
            hover.append(f"step {n.step}: {text}<br>log P = {n.logp:.3f}<br>{status}{extra}")
        # pruned nodes carry no label (their tokens stack into an unreadable column): hover names them
        labels = [("" if status == "pruned" else _esc(token_label(n.token))) if n.id else "&lt;bos&gt;" for n in nodes]
        fig.add_trace(go.Scatter(
            x=[n.step for n in nodes], y=[y[n.id] for n in nodes], mode="markers+text",
            name=status,
            text=labels, textposition="top center", textfont=dict(size=9, color="#1a202c"),
            marker=dict(size=9 if status != "pruned" else 6, color=STATUS_COLORS[status], symbol=symbols),
            hovertext=hover, hoverinfo="text"))
    if ranking is not None:
        fig.add_vline(x=ranking.stop_step, line=dict(color=STATUS_COLORS["winner"], dash="dash", width=1),
                      annotation_text=f"stops (α = {ranking.alpha:g})", annotation_position="top")
    n_rows = max(y.values()) + 1
    fig.update_layout(title=title, height=int(min(900, max(360, 26 * n_rows + 120))),
                      width=int(min(PAGE_WIDTH, max(600, 90 * trace.steps + 160))), plot_bgcolor="white",
                      legend=dict(orientation="h", y=-0.12))
    fig.update_xaxes(title_text="step (tokens after bos)", dtick=1, showgrid=False)
    fig.update_yaxes(visible=False, autorange="reversed")
    return fig


def lens_steps_figure(steps: Any, token_label: Callable[[int], str], title: str | None = None) -> go.Figure:
    """The decoder lens along one decoding: decoder layers down, generated words across.

    Each cell is the probability the layer's lens gives the word the decoder emitted at that step, and is labelled
    with the lens's own top word there; a ring marks the layer from which the emitted word leads (no ring: it never
    leads). Hovering a cell names the layer's three top words.

    Args:
        steps: a :class:`~workbench.inspect.lens_paths.LensSteps`.
        token_label: token id -> text.
    """
    p = _to_numpy(steps.p_chosen)
    if p.ndim != 2 or p.shape[1] != len(steps.tokens):
        raise FigureInputError(f"p_chosen must be (layers, steps) with {len(steps.tokens)} steps, got {p.shape}")
    L, T = p.shape
    words = [f"{t}: {_esc(token_label(i))}" for t, i in enumerate(steps.tokens)]
    top_ids, top_probs = _to_numpy(steps.top_ids), _to_numpy(steps.top_probs)
    text = [[_esc(token_label(int(top_ids[layer, t, 0]))) for t in range(T)] for layer in range(L)]
    hover = [[f"step {words[t]}, decoder layer {layer}<br>p(emitted word) = {p[layer, t]:.3f}<br>top: "
              + ", ".join(f"{_esc(token_label(int(i)))} {q:.2f}" for i, q in zip(top_ids[layer, t], top_probs[layer, t],
                                                                                  strict=True))
              for t in range(T)] for layer in range(L)]
    fig = go.Figure(go.Heatmap(z=p, x=list(range(T)), y=list(range(L)), zmin=0, zmax=1, colorscale="Blues",
                               text=text, texttemplate="%{text}", textfont=dict(size=9), customdata=hover,
                               hovertemplate="%{customdata}<extra></extra>",
                               colorbar=dict(title=dict(text="p", side="right"), thickness=14)))
    lead_t = [t for t in range(T) if steps.leads[t] >= 0]
    fig.add_trace(go.Scatter(x=lead_t, y=[steps.leads[t] for t in lead_t], mode="markers", name="leads from here",
                             marker=dict(symbol="circle-open", size=22, color=STATUS_COLORS["winner"], line=dict(width=2)),
                             hoverinfo="skip"))
    kind = "tuned lens" if steps.tuned else "logit lens"
    fig.update_layout(title=title or f"{kind}: p(emitted word) at each decoder layer (cell text: the layer's top word)",
                      height=140 + 60 * L, width=int(min(PAGE_WIDTH, max(520, 64 * T + 160))), plot_bgcolor="white",
                      legend=dict(orientation="h", y=-0.35))
    fig.update_xaxes(tickvals=list(range(T)), ticktext=words, tickangle=-45)
    fig.update_yaxes(tickvals=list(range(L)), ticktext=[f"layer {layer}" for layer in range(L)], autorange="reversed")
    return fig


def topk_figure(steps: Sequence[str], top_tokens: Sequence[Sequence[str]], top_probs: Any, cols: int = 4,
                title: str | None = None) -> go.Figure:
    """The k most probable next tokens at each greedy step, one small bar chart per step; the emitted token (the
    most probable) is the dark bar.

    Shapes: top_probs (T, k), top_tokens T lists of k strings, steps T titles.
    """
    probs = _to_numpy(top_probs)
    if probs.ndim != 2 or probs.shape[0] != len(steps) or len(top_tokens) != len(steps):
        raise FigureInputError(f"top_probs must be (T, k) with T = {len(steps)} step titles and token lists, got "
                               f"{probs.shape} and {len(top_tokens)} token lists")
    T, k = probs.shape
    rows = math.ceil(T / cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[_esc(s) for s in steps], horizontal_spacing=0.08,
                        vertical_spacing=min(0.12, 0.5 / max(rows, 1)))
    for t in range(T):
        labels = [_esc(s) for s in top_tokens[t]]
        fig.add_trace(go.Bar(x=probs[t][::-1], y=[f"{j + 1}. {lab}" for j, lab in enumerate(labels)][::-1],
                             orientation="h", showlegend=False,
                             marker_color=["#a0aec0"] * (k - 1) + [STATUS_COLORS["kept"]],
                             hovertemplate="%{y}: p = %{x:.3f}<extra></extra>"),
                      row=t // cols + 1, col=t % cols + 1)
    fig.update_xaxes(range=[0, 1])
    fig.update_layout(title=title, height=170 * rows + 80, width=260 * cols + 80)
    return fig


def kv_cache_figure(steps: Sequence[int], bytes_held: Any, macs_cached: Any, macs_recomputed: Any,
                    title: str | None = None) -> go.Figure:
    """Left: bytes the key/value cache holds after each step. Right: multiply-adds of each step with the cache
    and when the whole prefix is recomputed, on a shared step axis.

    Shapes: every series has one value per step.
    """
    xs = np.asarray(list(steps))
    series = {name: _to_numpy(v).reshape(-1) for name, v in
              (("bytes held", bytes_held), ("with the cache", macs_cached), ("recomputing", macs_recomputed))}
    for name, v in series.items():
        if v.shape[0] != xs.shape[0]:
            raise FigureInputError(f"{name!r} has {v.shape[0]} values for {xs.shape[0]} steps")
    fig = make_subplots(rows=1, cols=2, subplot_titles=("cache size", "multiply-adds per step"))
    fig.add_trace(go.Scatter(x=xs, y=series["bytes held"] / 1024, mode="lines+markers", name="KiB held"), 1, 1)
    for name, color in (("with the cache", STATUS_COLORS["kept"]), ("recomputing", STATUS_COLORS["winner"])):
        fig.add_trace(go.Scatter(x=xs, y=series[name] / 1e6, mode="lines+markers", name=name,
                                 line=dict(color=color)), 1, 2)
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text="KiB", row=1, col=1)
    fig.update_yaxes(title_text="million multiply-adds", row=1, col=2)
    fig.update_layout(title=title, height=380, width=900)
    return fig


def alpha_figure(alphas: Any, normalised: Mapping[str, Any], winners: Sequence[str],
                 title: str | None = None) -> go.Figure:
    """Each finished hypothesis's length-normalised score log P / lp(|Y|) against alpha (one line each), and the
    hypothesis the search returns at each alpha (markers on its line).

    Shapes: alphas (A,); each normalised series (A,); winners A labels, keys of ``normalised``.
    """
    xs = _to_numpy(alphas).reshape(-1)
    if len(winners) != xs.shape[0]:
        raise FigureInputError(f"{len(winners)} winners for {xs.shape[0]} alphas: give one winner per alpha")
    unknown = set(winners) - set(normalised)
    if unknown:
        raise FigureInputError(f"winners {sorted(unknown)} are not among the hypotheses drawn")
    fig = go.Figure()
    for name, values in normalised.items():
        v = _to_numpy(values).reshape(-1)
        fig.add_trace(go.Scatter(x=xs, y=v, mode="lines", name=_esc(name), hovertemplate="α = %{x:.2f}: %{y:.3f}"))
    ys = [float(_to_numpy(normalised[w]).reshape(-1)[i]) for i, w in enumerate(winners)]
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name="returned", marker=dict(color="black", size=7),
                             hovertext=[_esc(w) for w in winners], hoverinfo="text+x"))
    fig.update_layout(title=title, xaxis_title="length penalty α", yaxis_title="log P / ((5 + |Y|) / 6)^α",
                      height=420, width=900, legend=dict(font=dict(size=10)))
    return fig
