"""The patching inspector: a layer x position heatmap of a minimal pair; clicking a cell shows the patched translation.

``PatchingInspector(model, tokenizer, clean, corrupted)`` translates both sentences greedily, takes the first
target position where the translations differ as the answer (``logit(clean token) - logit(corrupted token)``),
sweeps one family of sites (:func:`workbench.inspect.patching_sweeps.sweep_positions`) clean -> corrupted and draws
it. Clicking a cell (or calling :meth:`PatchingInspector.select`) decodes the corrupted sentence greedily, key/value
cache on, with that one cell patched from the clean run, and shows the translation beside the plain ones.
"""

from __future__ import annotations

import html
import time
from typing import Any

import ipywidgets as W
import plotly.graph_objects as go
import torch

from workbench.errors import PatchingError
from workbench.inspect.patching import Site, patched_greedy
from workbench.inspect.patching_sweeps import (
    POSITION_FAMILIES,
    LogitDiff,
    _family_rows,
    position_family,
    prepare_pair,
    sweep_positions,
)
from workbench.translation.decode import greedy_decode
from workbench.viz.patching_figures import patching_heatmap

__all__ = ["PatchingInspector"]


class PatchingInspector:
    """Click a (layer, position) cell to see the corrupted sentence's translation with that cell patched from the clean.

    Attributes:
        widget: the ipywidgets box to display; figure: the heatmap (a ``FigureWidget``); result: the sweep shown.
        patched_text: the last patched translation; last_update_ms: time of the last click's decoding.
    """

    def __init__(self, model: torch.nn.Module, tokenizer: Any, clean: str, corrupted: str,
                 family: str = "enc.resid", max_extra: int = 20) -> None:
        self.model, self.tokenizer, self.max_extra = model.eval(), tokenizer, max_extra
        a, b = tokenizer.encode_src([clean, corrupted])
        if len(a) != len(b):
            raise PatchingError(f"{clean!r} has {len(a)} source tokens and {corrupted!r} {len(b)}: the inspector "
                                "patches position by position, so choose a pair of equal token length")
        device = next(model.parameters()).device
        self.clean_src, self.corrupt_src = torch.tensor([a], device=device), torch.tensor([b], device=device)
        out_a, out_b = (greedy_decode(model, s, bos_id=tokenizer.bos_id, eos_id=tokenizer.eos_id,
                                      max_extra=max_extra)[0].tolist() for s in (self.clean_src, self.corrupt_src))
        k = next((t for t, (x, y) in enumerate(zip(out_a, out_b)) if x != y), None)  # noqa: B905
        if k is None:
            raise PatchingError(f"{clean!r} and {corrupted!r} translate the same: there is no answer to restore")
        self.answer_pos = k
        self.clean_text, self.corrupt_text = (tokenizer.decode_tgt([o])[0] for o in (out_a, out_b))
        self.good, self.bad = tokenizer.id_to_token(out_a[k]), tokenizer.id_to_token(out_b[k])
        bos = tokenizer.bos_id
        self.tgt = (torch.tensor([[bos, *out_a[:k]]], device=device), torch.tensor([[bos, *out_b[:k]]], device=device))
        self.metric = LogitDiff(k, out_a[k], out_b[k])
        self.pair = prepare_pair(model, self.clean_src, self.corrupt_src, self.tgt, self.metric)
        self.src_tokens = [tokenizer.id_to_token(i, side="src") for i in a]
        self.tgt_tokens = [tokenizer.id_to_token(i) for i in self.tgt[0][0].tolist()]
        self.family_menu = W.Dropdown(options=list(POSITION_FAMILIES), value=position_family(family), description="sites")
        self.info = W.HTML()
        self.output = W.HTML(value="<i>click a cell</i>")
        self.patched_text: str | None = None
        self.last_update_ms = 0.0
        self.figure = go.FigureWidget()
        self.family_menu.observe(lambda _: self.draw(), names="value")
        self.draw()
        self.widget = W.VBox([self.family_menu, self.info, self.figure, self.output])

    def draw(self) -> None:
        """Sweep the chosen family and redraw the heatmap (one batched run)."""
        family = self.family_menu.value
        self.result = sweep_positions(self.model, self.clean_src, self.corrupt_src, self.tgt, self.metric,
                                      family=family, prepared=self.pair, src_tokens=self.src_tokens,
                                      tgt_tokens=self.tgt_tokens)
        fig = patching_heatmap(self.result, title=f"{family}: click a cell to patch it alone")
        with self.figure.batch_update():
            self.figure.data = []
            self.figure.add_trace(fig.data[0])
            self.figure.layout = fig.layout
        self.figure.data[0].on_click(self._on_click)
        self.info.value = (f"answer at target position {self.answer_pos}: <b>{html.escape(self.good)}</b> (clean) "
                           f"vs <b>{html.escape(self.bad)}</b> (corrupted)<br>clean: {html.escape(self.clean_text)}"
                           f"<br>corrupted: {html.escape(self.corrupt_text)}")

    def _on_click(self, _trace: Any, points: Any, _state: Any) -> None:
        if points.xs and points.ys:  # the heatmap's axes are integer rows and positions
            self.select(int(points.ys[0]), int(points.xs[0]))

    def select(self, row: int, pos: int) -> str:
        """Patch one cell (row of the heatmap, position) into the corrupted run and decode: the patched translation."""
        start = time.perf_counter()
        rows = _family_rows(self.model, self.family_menu.value)
        label, names = rows[row]
        sites = [Site(name, pos=pos) for name in names]
        out = patched_greedy(self.model, self.corrupt_src, self.pair.clean, sites, bos_id=self.tokenizer.bos_id,
                             eos_id=self.tokenizer.eos_id, max_extra=self.max_extra)
        self.patched_text = self.tokenizer.decode_tgt(out.tolist())[0]
        self.last_update_ms = (time.perf_counter() - start) * 1000
        axis = self.result.axes[1]
        token = self.result.labels[axis][pos]
        self.output.value = (f"{html.escape(label)}, position {pos} ({html.escape(token)}), score "
                             f"{float(self.result.values[row, pos]):.2f}:<br><b>{html.escape(self.patched_text)}</b>")
        return self.patched_text

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)
