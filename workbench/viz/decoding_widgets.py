"""ipywidgets for decoding: a length-penalty slider that re-ranks a traced beam's finished hypotheses.

The ranking comes from :func:`workbench.translation.decode_trace.rerank` (the same stop test and ranking as
:func:`~workbench.translation.decode.beam_search`); the widget only draws it.
"""

from __future__ import annotations

import html
from collections.abc import Callable

import ipywidgets as W
import numpy as np
import plotly.graph_objects as go

from workbench.translation.decode_trace import BeamTrace, Ranking, rerank
from workbench.viz.decoding_figures import STATUS_COLORS

__all__ = ["LengthPenaltyExplorer"]


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
