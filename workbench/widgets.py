"""ipywidgets inspectors built on :mod:`workbench.figures`; figures are plotly ``FigureWidget``s updated in place.

``AttentionInspector(model, tokenizer)`` explores every head of every layer of a translator: type a sentence,
translate it (greedy or beam), pick the attention kind, the layer and one head or all heads, and click a query
token to highlight its row. Small explorers for the notebooks: :func:`positional_explorer`,
:func:`mask_explorer`, :func:`complexity_explorer`. Callbacks only call functions the package already exposes.
"""

from __future__ import annotations

import time
from typing import Any

import ipywidgets as W
import numpy as np
import plotly.graph_objects as go
import torch

from . import figures
from .analysis import Inspection, inspect_translation
from .complexity import KINDS as LAYER_KINDS
from .complexity import table1
from .errors import WorkbenchError
from .masks import attention_mask, causal_mask
from .positional import distance_matrix, sinusoidal_table

KIND_LABELS = {"encoder self-attention": "enc_self", "decoder self-attention": "dec_self", "cross-attention": "cross"}


class AttentionInspector:
    """Interactive attention explorer for a trained encoder-decoder Transformer.

    Attributes:
        widget: the ipywidgets box to display.
        single: FigureWidget with one head's heatmap. ``grid``: FigureWidget with every head of the layer.
        last_update_ms: server-side time of the last figure update (for the < 150 ms target).
    """

    def __init__(self, model: torch.nn.Module, tokenizer: Any, sentence: str = "Ein Mann fährt auf einem Fahrrad.",
                 beam: int = 1) -> None:
        self.model, self.tokenizer = model.eval(), tokenizer
        self.n_heads = model.cfg.n_heads
        self.n_layers = {"enc_self": model.cfg.n_enc_layers, "dec_self": model.cfg.n_dec_layers, "cross": model.cfg.n_dec_layers}
        self.inspection: Inspection | None = None
        self.highlight: int | None = None
        self.last_update_ms = 0.0

        self.text = W.Text(value=sentence, description="source", layout=W.Layout(width="60%"), continuous_update=False)
        self.button = W.Button(description="translate", button_style="primary")
        self.search = W.ToggleButtons(options=[("greedy", 1), ("beam 4", 4)], value=beam if beam in (1, 4) else 1, description="decoding")
        self.kind = W.Dropdown(options=list(KIND_LABELS.items()), value="cross", description="attention")
        self.layer = W.IntSlider(value=0, min=0, max=self.n_layers["cross"] - 1, description="layer", continuous_update=False)
        self.head = W.Dropdown(options=[("all heads", -1)] + [(f"head {h}", h) for h in range(self.n_heads)], value=0, description="head")
        self.output = W.HTML()
        self.status = W.HTML()
        self.single = go.FigureWidget(figures.attention_heatmap(np.zeros((1, 1)), [""], [""]))
        self.grid = go.FigureWidget(figures.head_grid(np.zeros((1, self.n_heads, 1, 1)), [""], [""]))
        self.figure_box = W.Box([self.single])
        self.single.data[0].on_click(self._on_click)
        self._drawn = {"single": False, "grid": False}  # placeholders until the first real figure

        self.button.on_click(lambda _: self.translate())
        self.text.observe(lambda _: self.translate(), names="value")
        self.search.observe(lambda _: self.translate(), names="value")
        self.kind.observe(self._on_kind, names="value")
        self.layer.observe(lambda _: self.update(), names="value")
        self.head.observe(lambda _: self.update(), names="value")
        self.widget = W.VBox([
            W.HBox([self.text, self.button]), self.search, self.output,
            W.HBox([self.kind, self.layer, self.head]), self.figure_box, self.status,
        ])
        self.translate()

    # -- actions ------------------------------------------------------------------------------------------------
    def translate(self) -> None:
        try:
            self.inspection = inspect_translation(self.model, self.tokenizer, self.text.value, beam=self.search.value)
        except WorkbenchError as exc:
            self.output.value = f"<b style='color:#b00'>{exc}</b>"
            return
        self.output.value = f"<b>translation:</b> {self.inspection.translation}"
        self.highlight = None
        self.update()

    def _on_kind(self, _: Any) -> None:
        kind = self.kind.value
        self.layer.max = self.n_layers[kind] - 1
        self.update()

    def _on_click(self, trace: Any, points: Any, _state: Any) -> None:
        if points.ys:
            self.highlight = int(points.ys[0])
            self._draw_highlight()

    def _draw_highlight(self) -> None:
        if self.highlight is None:
            self.single.layout.shapes = ()
            return
        n_keys = len(self.single.data[0].x)
        self.single.layout.shapes = ({
            "type": "rect", "x0": -0.5, "x1": n_keys - 0.5, "y0": self.highlight - 0.5, "y1": self.highlight + 0.5,
            "line": {"color": "#e4572e", "width": 3},
        },)

    def update(self) -> None:
        """Redraw the figures for the current kind / layer / head, in place."""
        if self.inspection is None:
            return
        t0 = time.perf_counter()
        kind, layer, head = self.kind.value, self.layer.value, self.head.value
        weights = self.inspection.weights(kind, layer).numpy()  # (H, Tq, Tk)
        q, k = self.inspection.axes(kind)
        if head >= 0:
            ref = figures.attention_heatmap(weights[head], q, k, title=f"{self.kind.label}, layer {layer}, head {head}")
            if not self._drawn["single"]:
                self._replace_placeholder("single", go.FigureWidget(ref))
            with self.single.batch_update():
                src = ref.data[0]
                trace = self.single.data[0]
                trace.z, trace.x, trace.y, trace.customdata = src.z, src.x, src.y, src.customdata
                self.single.layout.title = ref.layout.title
                self.single.layout.xaxis.update(tickvals=ref.layout.xaxis.tickvals, ticktext=ref.layout.xaxis.ticktext)
                self.single.layout.yaxis.update(tickvals=ref.layout.yaxis.tickvals, ticktext=ref.layout.yaxis.ticktext)
                self.single.layout.width, self.single.layout.height = ref.layout.width, ref.layout.height
                self._draw_highlight()
            self.figure_box.children = [self.single]
        else:
            hover = figures._hover(q, k)
            if not self._drawn["grid"]:
                title = f"{self.kind.label}, layer {layer}, all heads"
                self._replace_placeholder("grid", go.FigureWidget(figures.head_grid(weights[None], q, k, title=title)))
            with self.grid.batch_update():
                for h, trace in enumerate(self.grid.data):
                    trace.z, trace.customdata = weights[h], hover
                self.grid.layout.title = f"{self.kind.label}, layer {layer}, all heads"
            self.figure_box.children = [self.grid]
        self.last_update_ms = (time.perf_counter() - t0) * 1000
        self.status.value = f"<small>{len(q)} queries × {len(k)} keys · updated in {self.last_update_ms:.0f} ms</small>"

    def _replace_placeholder(self, which: str, fig: go.FigureWidget) -> None:
        """Swap the empty placeholder figure for one built from the first real figure.

        In-place updates reach the browser as messages, but the widget state that nbclient/papermill save with a
        notebook (and that static renderers such as the book read) keeps the figure a ``FigureWidget`` was
        *constructed* with. Building it from the first drawn figure makes that saved state show the inspector's
        first view instead of an empty 1×1 heatmap; later updates stay in place.
        """
        old = getattr(self, which)
        setattr(self, which, fig)
        if which == "single":
            fig.data[0].on_click(self._on_click)
        self._drawn[which] = True
        if old in self.figure_box.children:
            self.figure_box.children = [fig]
        old.close()

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


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
