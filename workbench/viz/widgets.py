"""ipywidgets inspectors built on :mod:`workbench.viz.figures`; figures are plotly ``FigureWidget``s updated in place.

``AttentionInspector(model, tokenizer)`` explores every head of every layer of a translator: type a sentence,
translate it (greedy or beam), pick the attention kind, the layer and one head or all heads, and click a query
token to highlight its row. ``HeadInterventionInspector(model, tokenizer)`` switches heads off and shows the new
translation, the change in each output token's log-probability and the intervened model's attention. Small explorers for the notebooks: :func:`positional_explorer`,
:func:`mask_explorer`, :func:`complexity_explorer`. Callbacks only call functions the package already exposes.
"""

from __future__ import annotations

import html
import time
from collections.abc import Sequence
from typing import Any

import ipywidgets as W
import numpy as np
import plotly.graph_objects as go
import torch

from workbench.errors import PatchingError, WorkbenchError
from workbench.inspect.flow import rollout_from_cache
from workbench.inspect.greedy_trace import trace_greedy
from workbench.inspect.inspection import Inspection, inspect_translation
from workbench.inspect.intervene import InterventionOutcome, ablate_heads, head_means, intervened_greedy
from workbench.inspect.lens_paths import beam_tree_leads, lens_steps
from workbench.translation.batching import make_batch
from workbench.translation.decode import DECODING, translate
from workbench.translation.decode_trace import rerank, trace_beam
from workbench.translation.metrics import corpus_bleu
from workbench.viz import decoding_figures, figures
from workbench.viz.decoding_widgets import LensStepView

KIND_LABELS = {"encoder self-attention": "enc.self", "decoder self-attention": "dec.self", "cross-attention": "dec.cross"}
# toggles as wide as their text (padding kept small), never shrunk by their row
TOGGLE_LAYOUT = {"width": "auto", "flex": "0 0 auto", "padding": "0 6px"}
GENERAL_MODEL = "Helsinki-NLP/opus-mt-de-en"  # a general German-English model wb.pretrained can open (Hugging Face)


def model_note(card: dict[str, Any] | None) -> str:
    """HTML saying what a shipped model learned from (its card's first known limit, the domain) and where a general
    model is; empty without a card."""
    if not card:
        return ""
    limits = card.get("limits") or []
    domain = html.escape(limits[0]) if limits else ""
    pointer = "" if GENERAL_MODEL in domain else (
        f" For other German text open a general model, <code>wb.pretrained(\"{GENERAL_MODEL}\")</code>.")
    return (f"<small><b>{html.escape(str(card.get('name', 'this model')))}</b> knows what it was trained on. "
            f"{domain}{pointer} (A Hugging Face model needs the <code>transformers</code> package and the model in "
            "its cache, or a connection to download it once.)</small>")


class AttentionInspector:
    """Interactive attention explorer for a trained encoder-decoder Transformer.

    Attributes:
        widget: the ipywidgets box to display.
        single: FigureWidget with one head's heatmap. ``grid``: FigureWidget with every head of the layer.
        last_update_ms: server-side time of the last figure update (for the < 150 ms target).
    """

    def __init__(self, model: torch.nn.Module, tokenizer: Any, sentence: str = "Ein Mann fährt auf einem Fahrrad.",
                 beam: int = 1, card: dict[str, Any] | None = None, alpha: float = 0.6) -> None:
        self.model, self.tokenizer, self.alpha = model.eval(), tokenizer, alpha
        self.n_heads = model.cfg.n_heads
        self.n_layers = {"enc.self": model.cfg.n_enc_layers, "dec.self": model.cfg.n_dec_layers, "dec.cross": model.cfg.n_dec_layers}
        self.inspection: Inspection | None = None
        self.highlight: int | None = None
        self.last_update_ms = 0.0

        self.text = W.Text(value=sentence, description="source", layout=W.Layout(width="60%"), continuous_update=False)
        self.button = W.Button(description="translate", button_style="primary")
        self.search = W.ToggleButtons(options=[("greedy", 1), ("beam 4", 4)], value=beam if beam in (1, 4) else 1, description="decoding")
        self.kind = W.Dropdown(options=list(KIND_LABELS.items()), value="dec.cross", description="attention")
        self.layer = W.IntSlider(value=0, min=0, max=self.n_layers["dec.cross"] - 1, description="layer", continuous_update=False)
        self.head = W.Dropdown(options=[("all heads", -1)] + [(f"head {h}", h) for h in range(self.n_heads)], value=0, description="head")
        self.output = W.HTML()
        self.status = W.HTML()
        self.single = go.FigureWidget(figures.attention_heatmap(np.zeros((1, 1)), [""], [""]))
        self.grid = go.FigureWidget(figures.head_grid(np.zeros((1, self.n_heads, 1, 1)), [""], [""]))
        self.figure_box = W.Box([self.single])
        self.note = W.HTML(model_note(card))
        # generation: each generated token's cross-attention as the decoder produced it (greedy, with the cache; not a
        # teacher-forced pass), and with beam 4 the search's tree
        self.generation = W.Output()
        self.generation_box = W.Accordion(children=[self.generation], selected_index=None)
        self.generation_box.set_title(0, "while decoding: each new token's cross-attention, the layer it leads from, "
                                           "and the beam tree")
        self.generation_traces: dict[str, Any] = {}
        self.single.data[0].on_click(self._on_click)
        self._drawn = {"single": False, "grid": False}  # placeholders until the first real figure
        self._grid_axes: tuple | None = None  # the (queries, keys, heads) the grid was drawn for

        self.button.on_click(lambda _: self.translate())
        self.text.observe(lambda _: self.translate(), names="value")
        self.search.observe(lambda _: self.translate(), names="value")
        self.kind.observe(self._on_kind, names="value")
        self.layer.observe(lambda _: self.update(), names="value")
        self.head.observe(lambda _: self.update(), names="value")
        self.widget = W.VBox([
            W.HBox([self.text, self.button]), self.note, self.search, self.output,
            W.HBox([self.kind, self.layer, self.head]), self.figure_box, self.status, self.generation_box,
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
        self.show_generation()

    def show_generation(self) -> None:
        """Decode the sentence again step by step and draw what the decoder saw while generating: the cross-attention
        row of every new token (last layer, mean over heads), the logit lens along the greedy decoding (a step
        chosen says from which decoder layer its word leads, beside the head that looked at its source) and, with
        beam search, the tree of the search (its hover names the layer each proposed word leads from)."""
        ins, tok = self.inspection, self.tokenizer
        if ins is None:
            return
        src = torch.tensor([ins.src_ids], device=next(self.model.parameters()).device)
        label = lambda i: tok.id_to_token(i, "tgt")  # noqa: E731
        greedy = trace_greedy(self.model, src, k=5, bos_id=tok.bos_id, eos_id=tok.eos_id)
        figs = {"greedy": figures.attention_heatmap(
            greedy.cross[:, -1].mean(1), [label(i) for i in greedy.tokens], ins.src_tokens,
            title="greedy decoding: each generated token's cross-attention (last layer, mean over heads)")}
        self.generation_traces = {"greedy": greedy}
        try:
            steps = lens_steps(self.model, ins.src_ids, greedy.tokens, bos_id=tok.bos_id)
            self.lens_view: LensStepView | None = LensStepView(steps, label, ins.src_tokens)
        except PatchingError:  # a model without decoder layers (the recurrent baseline) has no lens
            self.lens_view = None
        if self.search.value > 1:
            beam = trace_beam(self.model, src, beam=self.search.value, bos_id=tok.bos_id, eos_id=tok.eos_id)
            ranking = rerank(beam, self.alpha)
            leads = beam_tree_leads(self.model, ins.src_ids, beam) if self.lens_view is not None else None
            self.generation_traces.update(beam=beam, ranking=ranking)
            figs["beam"] = decoding_figures.beam_tree_figure(beam, label, ranking, leads=leads,
                                                             title=f"beam {self.search.value}, α = {self.alpha:g}")
        self.generation_figures = figs
        self.generation.clear_output()
        with self.generation:
            from IPython.display import display

            display(figs["greedy"])
            if self.lens_view is not None:
                display(self.lens_view.widget)
            if "beam" in figs:
                display(figs["beam"])

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
            axes = (tuple(q), tuple(k), weights.shape[0])
            if not self._drawn["grid"] or axes != self._grid_axes:  # other tokens: new tick labels and sizes
                title = f"{self.kind.label}, layer {layer}, all heads"
                self._replace_placeholder("grid", go.FigureWidget(figures.head_grid(weights[None], q, k, title=title)))
                self._grid_axes = axes
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


class HeadInterventionInspector:
    """Switch attention heads off and watch the translation change; the weights are never modified.

    One grid of toggles per attention kind (rows = layers, columns = heads; the ``all`` button of a row switches
    the whole layer). Every change runs :func:`workbench.inspect.intervene.intervened_greedy` once: a teacher-forced pass
    of the intervened model over the original translation gives the change in each output token's
    log-probability and the attention figures (on the original translation, so they line up with the original
    ones), and greedy decoding resumes, with the key/value cache, from the first position where the intervened
    model leaves the original translation. The *BLEU* button scores the intervention on a validation sample.

    Attributes:
        widget: the ipywidgets box to display.
        toggles: (kind, layer, head) -> ToggleButton; ``layer_buttons``: (kind, layer) -> Button.
        original: the :class:`~workbench.inspect.inspection.Inspection` of the unmodified model.
        outcome: the latest :class:`~workbench.inspect.intervene.InterventionOutcome`.
        delta_figure, attention_figure, rollout_figure: FigureWidgets updated in place.
        last_update_ms: server-side time from a toggle to updated figures; ``timings``: its parts in ms.
    """

    KINDS = ("enc.self", "dec.self", "dec.cross")

    def __init__(self, model: torch.nn.Module, tokenizer: Any, sentence: str = "Ein Mann fährt auf einem Fahrrad.",
                 validation: Sequence[tuple[str, str]] | None = None, bleu_sentences: int = 50,
                 means: dict[tuple[str, int], torch.Tensor] | None = None, max_extra: int = DECODING.max_extra,
                 card: dict[str, Any] | None = None) -> None:
        self.model, self.tokenizer = model.eval(), tokenizer
        self.validation = list(validation or [])[:bleu_sentences]
        self.means, self.max_extra = means, max_extra
        cfg = model.cfg
        self.n_heads = cfg.n_heads
        self.n_layers = {"enc.self": cfg.n_enc_layers, "dec.self": cfg.n_dec_layers, "dec.cross": cfg.n_dec_layers}
        self.original: Inspection | None = None
        self.outcome: InterventionOutcome | None = None
        self.last_update_ms, self.timings = 0.0, {}
        self._quiet = False  # True while several toggles change at once (one update at the end)
        self._bleu_original: float | None = None

        self.text = W.Text(value=sentence, description="source", layout=W.Layout(width="60%"), continuous_update=False)
        self.mode = W.ToggleButtons(options=[("zero", "zero"), ("mean", "mean")], value="zero", description="ablation",
                                    tooltips=["replace the heads' outputs by 0", "replace them by their mean output"])
        self.mode.disabled = means is None and not self.validation
        self.reset = W.Button(description="all heads on", icon="undo", layout=W.Layout(**TOGGLE_LAYOUT))
        self.toggles: dict[tuple[str, int, int], W.ToggleButton] = {}
        self.layer_buttons: dict[tuple[str, int], W.Button] = {}
        grids = [self._toggle_grid(kind) for kind in self.KINDS]
        self.result = W.HTML()
        self.kind = W.Dropdown(options=list(KIND_LABELS.items()), value="dec.cross", description="attention")
        self.layer = W.IntSlider(value=0, min=0, max=self.n_layers["dec.cross"] - 1, description="layer", continuous_update=False)
        self.bleu_button = W.Button(description=f"BLEU on {len(self.validation)} val sentences", disabled=not self.validation,
                                    layout=W.Layout(**TOGGLE_LAYOUT))
        self.bleu_result = W.HTML()
        self.status = W.HTML()
        self.figure_box = W.VBox()

        self.text.observe(lambda _: self.translate(), names="value")
        self.mode.observe(lambda _: self.update(), names="value")
        self.reset.on_click(lambda _: self.set_heads([]))
        self.kind.observe(self._on_kind, names="value")
        self.layer.observe(lambda _: None if self._quiet else self.update(), names="value")
        self.bleu_button.on_click(lambda _: self.score_bleu())
        self.note = W.HTML(model_note(card))
        self.widget = W.VBox([
            self.text, self.note, W.HBox(grids, layout=W.Layout(flex_flow="row wrap")), W.HBox([self.mode, self.reset]),
            self.result,
            W.HBox([self.kind, self.layer]), self.figure_box, W.HBox([self.bleu_button, self.bleu_result]), self.status,
        ])
        self.translate()

    # -- the toggle grid -----------------------------------------------------------------------------------------
    def _toggle_grid(self, kind: str) -> W.Widget:
        rows = []
        for layer in range(self.n_layers[kind]):
            # sized by their text and never shrunk by the row (fixed 34/64 px widths cut labels to "0.." and "L...")
            whole = W.Button(description=f"L{layer} all", layout=W.Layout(**TOGGLE_LAYOUT, min_width="5em"),
                             tooltip="switch the whole layer")
            whole.on_click(lambda _, kind=kind, layer=layer: self._toggle_layer(kind, layer))
            self.layer_buttons[(kind, layer)] = whole
            cells = []
            for head in range(self.n_heads):
                toggle = W.ToggleButton(value=False, description=str(head), tooltip=f"{kind} layer {layer} head {head}",
                                        layout=W.Layout(**TOGGLE_LAYOUT, min_width="2.6em"))
                toggle.observe(self._on_toggle, names="value")
                self.toggles[(kind, layer, head)] = toggle
                cells.append(toggle)
            rows.append(W.HBox([whole, *cells], layout=W.Layout(flex_flow="row nowrap", width="auto")))
        title = next(label for label, k in KIND_LABELS.items() if k == kind)
        return W.VBox([W.HTML(f"<b>{title}</b>"), *rows], layout=W.Layout(margin="0 16px 8px 0", flex="0 0 auto"))

    def _on_toggle(self, change: Any) -> None:
        change.owner.button_style = "danger" if change.new else ""
        if not self._quiet:
            self.update()

    def _toggle_layer(self, kind: str, layer: int) -> None:
        keys = [(kind, layer, h) for h in range(self.n_heads)]
        switch_off = not all(self.toggles[k].value for k in keys)
        self.set_heads([k for k, t in self.toggles.items() if t.value and k not in keys] + (keys if switch_off else []))

    def set_heads(self, heads: Sequence[tuple[str, int, int]]) -> None:
        """Switch off exactly these heads (all others on), then update once."""
        wanted = set(heads)
        self._quiet = True
        try:
            for key, toggle in self.toggles.items():
                toggle.value = key in wanted
        finally:
            self._quiet = False
        self.update()

    def heads_off(self) -> list[tuple[str, int, int]]:
        return [key for key, toggle in self.toggles.items() if toggle.value]

    def _ablation(self) -> dict[str, Any]:
        if self.mode.value == "mean" and self.means is None:
            self.means = head_means(self.model, [self._validation_batch()])
        return {"mode": self.mode.value, "means": self.means if self.mode.value == "mean" else None}

    def _validation_batch(self) -> Any:
        pairs = self.validation
        return make_batch(self.tokenizer.encode_src([s for s, _ in pairs]), self.tokenizer.encode_tgt([t for _, t in pairs]),
                          self.model.pad_id)

    # -- actions -------------------------------------------------------------------------------------------------
    def translate(self) -> None:
        """Translate the source with every head on; the interventions are then compared with this translation."""
        try:
            self.original = inspect_translation(self.model, self.tokenizer, self.text.value, max_extra=self.max_extra)
        except WorkbenchError as exc:
            self.result.value = f"<b style='color:#b00'>{exc}</b>"
            self.original = None
            return
        ins, tok = self.original, self.tokenizer
        # the same computation as every update, with no head off: switching all heads back on gives these numbers
        self.baseline = intervened_greedy(self.model, ins.src_ids, ins.out_ids, bos_id=tok.bos_id, eos_id=tok.eos_id,
                                          max_extra=self.max_extra)
        self.original_logprob = self.baseline.reference_logprob
        self.original_rollout = rollout_from_cache(self.baseline.cache).source
        self.delta_figure = go.FigureWidget(figures.token_bars(ins.out_tokens, np.zeros(len(ins.out_tokens)),
                                                               title="change in log p of each original output token"))
        self.rollout_figure = go.FigureWidget(figures.attention_vs_attribution(
            {"original": self.original_rollout, "intervened": self.original_rollout}, ins.out_tokens, ins.src_tokens,
            title="decoder-to-source attention rollout"))
        self._build_attention_figure()
        self.figure_box.children = [self.delta_figure, self.attention_figure, self.rollout_figure]
        self._bleu_original = None
        self.update()

    def _build_attention_figure(self) -> None:
        kind, layer = self.kind.value, self.layer.value
        q, k = self.original.axes(kind)
        self.attention_figure = go.FigureWidget(figures.head_grid(self.baseline.cache[kind, layer][0], q, k, cell_px=150))

    def _on_kind(self, _: Any) -> None:
        self._quiet = True  # clamping the layer slider must not redraw the old kind's figure
        try:
            self.layer.max = self.n_layers[self.kind.value] - 1
        finally:
            self._quiet = False
        if self.original is not None:
            self._build_attention_figure()  # the axes change with the kind
            self.figure_box.children = [self.delta_figure, self.attention_figure, self.rollout_figure]
        self.update()

    def update(self) -> None:
        """Re-run the intervened model and update the translation, log-probability changes and figures in place."""
        if self.original is None:
            return
        t0 = time.perf_counter()
        ins, tok = self.original, self.tokenizer
        heads = self.heads_off()
        self.outcome = outcome = intervened_greedy(self.model, ins.src_ids, ins.out_ids, heads=heads, bos_id=tok.bos_id,
                                                   eos_id=tok.eos_id, max_extra=self.max_extra, **self._ablation())
        t1 = time.perf_counter()
        delta = (outcome.reference_logprob - self.original_logprob).numpy()
        kind, layer = self.kind.value, self.layer.value
        weights = outcome.cache[kind, layer][0].numpy()  # (H, Tq, Tk)
        rollout = figures.row_shares(rollout_from_cache(outcome.cache).source)  # drawn as the original panel is
        with self.delta_figure.batch_update():
            self.delta_figure.data[0].y = delta
            self.delta_figure.data[0].marker.color = ["#d62728" if v < 0 else "#1f77b4" for v in delta]
        with self.attention_figure.batch_update():
            for h, trace in enumerate(self.attention_figure.data):
                trace.z = weights[h]
                off = (kind, layer, h) in self.toggles and self.toggles[(kind, layer, h)].value
                self.attention_figure.layout.annotations[h].text = f"head {h}" + (" (off)" if off else "")
            self.attention_figure.layout.title = f"{self.kind.label}, layer {layer}, intervened model"
        with self.rollout_figure.batch_update():
            self.rollout_figure.data[1].z = rollout
        t2 = time.perf_counter()
        new = tok.decode_tgt([outcome.out_ids])[0]
        same = outcome.diverged_at is None
        self.result.value = (
            f"<b>original:</b> {html.escape(ins.translation)}<br><b>intervened:</b> "
            f"<span style='color:{'#555' if same else '#b00'}'>{html.escape(new)}</span>"
            f" {'(unchanged)' if same else f'(differs from token {outcome.diverged_at})'}<br>"
            f"<small>{len(heads)} head(s) off ({self.mode.value}-ablation) · Σ Δ log p = {delta.sum():+.3f}</small>"
        )
        self.timings = {"model_ms": (t1 - t0) * 1000, "figures_ms": (t2 - t1) * 1000}
        self.last_update_ms = (time.perf_counter() - t0) * 1000
        self.status.value = (f"<small>updated in {self.last_update_ms:.0f} ms (model {self.timings['model_ms']:.0f}, "
                             f"figures {self.timings['figures_ms']:.0f})</small>")

    def score_bleu(self) -> dict[str, float]:
        """BLEU (greedy, sacreBLEU) of the validation sample with every head on and with the current heads off."""
        if not self.validation:
            self.bleu_result.value = "no validation sentences given"
            return {}
        sources, refs = [s for s, _ in self.validation], [t for _, t in self.validation]
        if self._bleu_original is None:
            self._bleu_original = corpus_bleu(translate(self.model, self.tokenizer, sources, beam=1), refs).score
        with ablate_heads(self.model, self.heads_off(), **self._ablation()):
            intervened = corpus_bleu(translate(self.model, self.tokenizer, sources, beam=1), refs).score
        scores = {"original": self._bleu_original, "intervened": intervened, "change": intervened - self._bleu_original}
        self.bleu_result.value = (f"BLEU {scores['original']:.2f} → {scores['intervened']:.2f} "
                                  f"(<b>{scores['change']:+.2f}</b>) on {len(sources)} sentences")
        return scores

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)
