"""ipywidgets for decoding: a length-penalty slider that re-ranks a traced beam's finished hypotheses, and the
decoder lens along a decoding, one step at a time.

The ranking comes from :func:`workbench.translation.decode_trace.rerank` (the same stop test and ranking as
:func:`~workbench.translation.decode.beam_search`), the lens from :func:`workbench.inspect.lens_paths.lens_steps`;
the widgets only draw them.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import Any

import ipywidgets as W
import numpy as np
import plotly.graph_objects as go

from workbench.translation.decode_trace import BeamTrace, Ranking, rerank
from workbench.viz.decoding_figures import STATUS_COLORS, lens_steps_figure

__all__ = ["LengthPenaltyExplorer", "LensStepView"]


class LengthPenaltyExplorer:
    """A slider for alpha; bars of every finished hypothesis's ``log P / lp(|Y|)``, the returned one in red.

    Attributes:
        widget: the box to display. ``slider``: the alpha slider. ``figure``: the FigureWidget updated in place.
        ranking: the :class:`~workbench.translation.decode_trace.Ranking` at the slider's alpha.
    """

    def __init__(self, trace: BeamTrace, detokenize: Callable[[list[int]], str], alpha: float = 0.6,
                 alpha_max: float = 3.0) -> None:
        self.trace = trace
        self.finished = trace.finished()
        if not self.finished:
            raise ValueError("the traced beam finished no hypothesis (the budget ended it first): nothing to re-rank")
        self.labels = [detokenize([t for t in trace.hypothesis(i) if t != trace.eos_id]) for i in self.finished]
        self.slider = W.FloatSlider(value=alpha, min=0.0, max=alpha_max, step=0.1, description="α",
                                    continuous_update=True, readout_format=".1f")
        self.readout = W.HTML()
        self.figure = go.FigureWidget(go.Figure(go.Bar(
            y=[f"{k + 1}. {html.escape(s)}" for k, s in enumerate(self.labels)], x=np.zeros(len(self.labels)),
            orientation="h", hovertemplate="%{y}<br>log P / lp = %{x:.3f}<extra></extra>")))
        self.figure.update_layout(height=90 + 28 * len(self.labels), width=900, margin=dict(l=420),
                                  xaxis_title="log P / ((5 + |Y|) / 6)^α  (higher is better)")
        self.figure.update_yaxes(autorange="reversed")
        self.slider.observe(lambda _: self.update(), names="value")
        self.widget = W.VBox([self.slider, self.readout, self.figure])
        self.ranking: Ranking | None = None
        self.update()

    def update(self) -> None:
        """Re-rank at the slider's alpha and redraw in place."""
        self.ranking = r = rerank(self.trace, self.slider.value)
        values = [r.normalised[i] for i in self.finished]
        colors = [STATUS_COLORS["winner"] if i == r.winner else
                  (STATUS_COLORS["finished"] if i in r.beam else STATUS_COLORS["pruned"]) for i in self.finished]
        with self.figure.batch_update():
            self.figure.data[0].x = values
            self.figure.data[0].marker.color = colors
        winner = self.trace.hypothesis(r.winner)
        text = self.labels[self.finished.index(r.winner)] if r.winner in self.finished else str(winner)
        self.readout.value = (f"α = {r.alpha:.1f}: the search stops after step {r.stop_step} and returns "
                              f"<b>{html.escape(text)}</b> ({len(winner)} tokens). Red: returned; green: in the beam "
                              "when the search stops; grey: not in the beam when the search stops (pushed out earlier, or finished only later).")

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


class LensStepView:
    """The decoder lens along one decoding; choosing a step (the menu, or a click on its column) says from which
    decoder layer its word leads and shows, beside it, the cross-attention row of the head that looked hardest at
    one source piece while the word was chosen.

    Attributes:
        widget: the box to display. ``step``: the step menu. ``figure``: the lens heatmap (a FigureWidget).
        ``head_figure``: that head's weights over the source. ``readout``: the sentence about the chosen step.
    """

    def __init__(self, steps: Any, token_label: Callable[[int], str], src_tokens: Sequence[str], step: int = 0) -> None:
        self.steps, self.token_label, self.src_tokens = steps, token_label, list(src_tokens)
        options = [(f"{t}: {token_label(i)}", t) for t, i in enumerate(steps.tokens)]
        self.step = W.Dropdown(options=options, value=min(max(step, 0), len(options) - 1), description="step")
        self.readout = W.HTML()
        self.figure = go.FigureWidget(lens_steps_figure(steps, token_label))
        self.head_figure = go.FigureWidget(go.Figure(go.Bar(x=list(range(len(self.src_tokens))), y=np.zeros(len(self.src_tokens)),
                                                            marker_color=STATUS_COLORS["kept"],
                                                            hovertemplate="%{x}: %{y:.3f}<extra></extra>")))
        self.head_figure.update_layout(height=260, width=640, yaxis=dict(range=[0, 1], title="weight"),
                                       xaxis=dict(tickvals=list(range(len(self.src_tokens))),
                                                  ticktext=[html.escape(t) for t in self.src_tokens], tickangle=-45))
        self.figure.data[0].on_click(self._on_click)
        self.step.observe(lambda _: self.update(), names="value")
        self.widget = W.VBox([self.figure, self.step, self.readout, self.head_figure])
        self.update()

    def _on_click(self, _trace: Any, points: Any, _state: Any) -> None:
        if points.xs:
            self.step.value = int(points.xs[0])

    def update(self) -> None:
        """Describe the chosen step and draw the head that looked hardest at the source then."""
        t = int(self.step.value)
        self.readout.value = html.escape(self.steps.describe(t, self.token_label, self.src_tokens))
        layer, head, _pos, _w = self.steps.looked[t]
        row = self.steps.cross[layer, head, t].numpy()  # (S,)
        with self.head_figure.batch_update():
            self.head_figure.data[0].y = row
            self.head_figure.layout.title = (f"cross-attention, decoder layer {layer}, head {head}, while writing "
                                             f"'{html.escape(self.token_label(self.steps.tokens[t]))}'")
        with self.figure.batch_update():
            self.figure.layout.shapes = ({"type": "rect", "x0": t - 0.5, "x1": t + 0.5, "y0": -0.5,
                                          "y1": self.steps.n_layers - 0.5, "line": {"color": "#e4572e", "width": 3}},)

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)
