"""Figures: the data drawn is the data given, labels stay readable and distinct, exports work offline."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import types
from html.parser import HTMLParser

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import pytest
import torch
from conftest import require

from workbench.viz import figures
from workbench.viz.figures import FigureInputError, ImageExportError

SRC = ["▁Ein", "▁Mann", "▁fährt", "▁.", "</s>"]
TGT = ["<s>", "▁the", "▁man", "▁the", "▁man"]  # repeated tokens on purpose
SRC_SHOWN = ["▁Ein", "▁Mann", "▁fährt", "▁.", "&lt;/s&gt;"]  # as written for plotly (escaped HTML)
TGT_SHOWN = ["&lt;s&gt;", "▁the", "▁man", "▁the", "▁man"]


def softmax(*shape: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(*shape, generator=g) * 2, dim=-1)


def n_subplots(fig: go.Figure) -> int:
    return sum(1 for name in fig.layout if name.startswith("xaxis") and fig.layout[name] is not None)


# -- attention heatmap --------------------------------------------------------------------------------------------
def test_heatmap_draws_the_weights_with_token_hover():
    w = softmax(5, 5)
    fig = figures.attention_heatmap(w, TGT, SRC, title="cross")
    assert isinstance(fig, go.Figure) and len(fig.data) == 1
    hm = fig.data[0]
    np.testing.assert_allclose(np.asarray(hm.z), w.numpy(), rtol=1e-6)
    assert (hm.zmin, hm.zmax) == (0.0, 1.0)
    assert fig.layout.yaxis.autorange == "reversed"  # first query on top
    assert "weight: %{z:.3f}" in hm.hovertemplate
    assert hm.customdata[2][1] == "query: ▁man (2)<br>key: ▁Mann (1)"
    assert list(fig.layout.xaxis.ticktext) == SRC_SHOWN


def test_duplicate_tokens_stay_distinct_cells():
    w = softmax(5, 5)
    fig = figures.attention_heatmap(w, TGT, SRC)
    hm = fig.data[0]
    assert list(hm.y) == [0, 1, 2, 3, 4] and list(hm.x) == [0, 1, 2, 3, 4]  # positions, not categories
    assert list(fig.layout.yaxis.tickvals) == [0, 1, 2, 3, 4]
    assert list(fig.layout.yaxis.ticktext) == TGT_SHOWN  # both "▁the" rows keep their label
    assert hm.customdata[1][0].startswith("query: ▁the (1)") and hm.customdata[3][0].startswith("query: ▁the (3)")
    np.testing.assert_allclose(np.asarray(hm.z)[3], w[3].numpy(), rtol=1e-6)  # the second "the" keeps its row


def test_special_tokens_are_escaped_for_plotly():
    fig = figures.attention_heatmap(np.eye(2), ["<s>", "a&b"], ["x", "</s>"])
    assert list(fig.layout.yaxis.ticktext) == ["&lt;s&gt;", "a&amp;b"]
    assert "key: &lt;/s&gt; (1)" in fig.data[0].customdata[0][1]


def test_heatmap_accepts_bf16_tensor_with_grad():
    w = softmax(3, 4).to(torch.bfloat16).requires_grad_()
    z = np.asarray(figures.attention_heatmap(w).data[0].z)
    assert z.dtype == np.float32 and z.shape == (3, 4)
    assert list(figures.attention_heatmap(w).layout.xaxis.ticktext) == ["0", "1", "2", "3"]


def test_bad_inputs_name_the_problem():
    with pytest.raises(FigureInputError, match="3 tokens.*4 positions"):
        figures.attention_heatmap(np.eye(4), ["a", "b", "c"], None)
    with pytest.raises(FigureInputError, match=r"\(1, 2, 4, 4\)"):
        figures.attention_heatmap(np.ones((1, 2, 4, 4)))


def test_long_inputs_grow_with_length_and_decimate_ticks():
    sizes, plot_width = {}, {}
    for T in (10, 30, 61, 120):
        toks = [f"w{i}" for i in range(T)]
        fig = figures.attention_heatmap(softmax(T, T), toks, toks)
        sizes[T] = (fig.layout.width, fig.layout.height)
        plot_width[T] = fig.layout.width - fig.layout.margin.l - fig.layout.margin.r
        if T == 120:
            long = fig
        elif T <= 60:
            assert list(fig.layout.xaxis.ticktext) == toks  # short: every token labelled
    widths = [sizes[T][0] for T in (10, 30, 61, 120)]
    heights = [sizes[T][1] for T in (10, 30, 61, 120)]
    assert widths == sorted(widths) and heights == sorted(heights) and widths[-1] > widths[-2] > widths[0]
    # a fixed cell size beyond max_tokens: the plot area grows in proportion to the length
    assert plot_width[61] == 61 * figures.MIN_CELL_PX and plot_width[120] == 120 * figures.MIN_CELL_PX
    ticks = list(long.layout.xaxis.tickvals)
    assert len(ticks) <= 60 and ticks[:3] == [0, 2, 4]
    assert list(long.layout.yaxis.ticktext)[:2] == ["w0", "w2"]
    assert long.data[0].customdata[119][1] == "query: w119 (119)<br>key: w1 (1)"  # hover keeps every token
    few = figures.attention_heatmap(softmax(120, 120), max_tokens=10)
    assert len(few.layout.xaxis.tickvals) <= 10


# -- head grid and lines ------------------------------------------------------------------------------------------
def test_head_grid_layers_by_heads_with_shared_scale():
    w = softmax(2, 3, 5, 5)
    fig = figures.head_grid(w, TGT, SRC, layer_labels=["enc 0", "enc 1"], title="grid")
    assert len(fig.data) == 6 and n_subplots(fig) == 6
    np.testing.assert_allclose(np.asarray(fig.data[1 * 3 + 2].z), w[1, 2].numpy(), rtol=1e-6)
    assert {t.coloraxis for t in fig.data} == {"coloraxis"}
    assert (fig.layout.coloraxis.cmin, fig.layout.coloraxis.cmax) == (0.0, 1.0)
    assert fig.data[5].hovertemplate.startswith("enc 1 · head 2<br>")
    assert fig.data[0].customdata[3][0] == "query: ▁the (3)<br>key: ▁Ein (0)"
    assert [a.text for a in fig.layout.annotations][:2] == ["enc 0 · head 0", "enc 0 · head 1"]


def test_head_grid_wraps_heads_to_fit_a_width():
    w = softmax(2, 8, 5, 5)
    wide = figures.head_grid(w, TGT, SRC, layer_labels=["a", "b"])
    assert wide.layout.width > figures.PAGE_WIDTH  # one row of eight heads per layer does not fit the page
    fig = figures.head_grid(w, TGT, SRC, layer_labels=["a", "b"], max_width=figures.PAGE_WIDTH)
    assert fig.layout.width <= figures.PAGE_WIDTH and fig.layout.height > wide.layout.height
    assert len(fig.data) == 16 and n_subplots(fig) >= 16  # each layer's eight heads on rows of equal length

    def column(trace):  # the x domain of a trace's subplot
        return tuple(fig.layout["xaxis" + trace.xaxis[1:]].domain)

    assert fig.data[1 * 8 + 5].hovertemplate.startswith("b · head 5<br>")  # trace l * H + h is still layer l, head h
    np.testing.assert_allclose(np.asarray(fig.data[13].z), w[1, 5].numpy(), rtol=1e-6)
    assert column(fig.data[8]) == column(fig.data[0])  # layer b starts a new row, in the first column
    assert len({column(t) for t in fig.data}) < 8  # fewer columns than heads: wrapped
    same = figures.head_grid(w, TGT, SRC, layer_labels=["a", "b"], max_width=10_000)
    assert same.layout.width == wide.layout.width  # room enough: no wrap


def test_head_grid_single_layer():
    fig = figures.head_grid(softmax(4, 3, 5).numpy(), None, SRC)
    assert len(fig.data) == 4 and n_subplots(fig) == 4
    assert [a.text for a in fig.layout.annotations] == [f"head {h}" for h in range(4)]
    with pytest.raises(FigureInputError, match="layer_labels"):
        figures.head_grid(softmax(2, 2, 3, 3), layer_labels=["only one"])


def _segments(fig: go.Figure) -> list[go.Scatter]:
    return [t for t in fig.data if t.mode == "lines" and t.x != (None,)]


def test_head_lines_one_segment_per_pair_above_threshold():
    w = softmax(2, 5, 5)
    fig = figures.head_lines(w, TGT, SRC, head=1, threshold=0.0)
    n_segments = sum(list(t.x).count(None) for t in _segments(fig))
    assert n_segments == 5 * 5
    assert {t.legendgroup for t in _segments(fig)} == {"head 1"}
    thr = 0.1
    fig = figures.head_lines(w, TGT, SRC, threshold=thr)  # every head
    assert sum(list(t.x).count(None) for t in _segments(fig)) == int((w >= thr).sum())
    legend = [t.name for t in fig.data if t.showlegend]
    assert legend == ["head 0", "head 1"]
    queries, keys = fig.data[-2], fig.data[-1]
    assert list(queries.text) == TGT_SHOWN and set(queries.x) == {0.0}
    assert list(keys.text)[-1] == "&lt;/s&gt;" and set(keys.x) == {1.0}
    assert "query 3: ▁the" in queries.hovertext[3]


def test_head_lines_width_grows_with_weight_and_hover_is_exact():
    w = np.array([[0.9, 0.1], [0.3, 0.7]])
    fig = figures.head_lines(w, ["a", "b"], ["c", "d"], threshold=0.05)
    by_width = sorted(_segments(fig), key=lambda t: t.line.width)
    assert "weight: 0.100" in by_width[0].text[0] and "weight: 0.900" in by_width[-1].text[0]
    assert by_width[0].opacity < by_width[-1].opacity
    with pytest.raises(FigureInputError, match="head=3"):
        figures.head_lines(softmax(2, 3, 3), list("abc"), list("abc"), head=3)


# -- positions and masks ------------------------------------------------------------------------------------------
def test_positional_and_distance_figures():
    table = torch.randn(12, 8)
    fig = figures.positional_heatmap(table)
    np.testing.assert_allclose(np.asarray(fig.data[0].z), table.numpy(), rtol=1e-6)
    dist = torch.cdist(table, table)
    small = figures.distance_matrix_figure(dist)
    np.testing.assert_allclose(np.asarray(small.data[0].z), dist.numpy(), rtol=1e-6)
    assert small.data[0].texttemplate == "%{z:.2f}"  # values written in the cells, like a table
    assert figures.distance_matrix_figure(torch.rand(13, 13)).data[0].texttemplate is None
    assert figures.distance_matrix_figure(dist, annotate=False).data[0].texttemplate is None


def test_mask_figure_z_is_the_mask():
    causal = torch.tril(torch.ones(5, 5, dtype=torch.bool))
    fig = figures.mask_figure(causal, TGT, TGT, title="causal")
    np.testing.assert_array_equal(np.asarray(fig.data[0].z), causal.numpy())
    assert "may attend" in fig.data[0].hovertemplate and "query: ▁the (3)" in fig.data[0].customdata[3][0]
    batch = torch.stack([causal, ~causal])[:, None]  # (B, 1, Tq, Tk): the first item is drawn
    np.testing.assert_array_equal(np.asarray(figures.mask_figure(batch).data[0].z), causal.numpy())
    padding = torch.tensor([[True, True, True, False, False]])[:, None, None]  # (B, 1, 1, Tk)
    z = np.asarray(figures.mask_figure(padding, TGT, SRC).data[0].z)
    assert z.shape == (5, 5) and (z == np.array([1, 1, 1, 0, 0])).all()


def test_masks_side_by_side():
    causal = torch.tril(torch.ones(5, 5, dtype=torch.bool))
    padding = torch.tensor([True, True, True, True, False])
    masks = {"padding": padding, "causal": causal, "combined": causal & padding}
    fig = figures.masks_side_by_side(masks, TGT, TGT, title="masks")
    assert len(fig.data) == 3 and n_subplots(fig) == 3
    assert [a.text for a in fig.layout.annotations] == ["padding", "causal", "combined"]
    for trace, mask in zip(fig.data, masks.values(), strict=True):
        expected = np.broadcast_to(mask.numpy(), (5, 5))
        np.testing.assert_array_equal(np.asarray(trace.z), expected)
    with pytest.raises(FigureInputError):
        figures.masks_side_by_side({})


# -- training and measurements ------------------------------------------------------------------------------------
@dataclasses.dataclass
class _History:
    train_loss: list[float]
    val_loss: list[float]
    val_bleu: list[float] = dataclasses.field(default_factory=list)
    lr: list[float] = dataclasses.field(default_factory=list)


def test_training_curves_from_dict_dataclass_and_object():
    full = {"train_loss": [3.0, 2.0, 1.5], "val_loss": [2.5, 2.1, 2.0], "val_bleu": [5, 12, 20], "lr": [1e-4, 2e-4, 1e-4]}
    fig = figures.training_curves(full)
    assert [t.name for t in fig.data] == ["train loss (label-smoothed)", "validation loss", "validation BLEU",
                                          "learning rate"]
    assert n_subplots(fig) == 2 and fig.data[3].yaxis != fig.data[2].yaxis  # lr on its own axis
    assert list(fig.data[1].y) == full["val_loss"] and list(fig.data[0].x) == [1, 2, 3]
    losses_only = figures.training_curves(_History([3.0, 2.0], [2.5, 2.2]))
    assert len(losses_only.data) == 2 and n_subplots(losses_only) == 1
    obj = types.SimpleNamespace(train_loss=[1.0], val_loss=[], lr=[3e-4])
    assert [t.name for t in figures.training_curves(obj).data] == ["train loss (label-smoothed)", "learning rate"]
    with pytest.raises(FigureInputError, match="train_loss"):
        figures.training_curves({"lr": [1.0]})


def test_training_curves_accepts_the_package_history():
    from workbench.translation.train import History

    fig = figures.training_curves(History(train_loss=[4.0, 3.0], val_loss=[3.5, 3.2], val_bleu=[1.0, 4.0]))
    assert len(fig.data) == 3


def test_loglog_with_fits():
    n = np.array([64, 128, 256, 512])
    fig = figures.loglog_figure(n, {"attention": 1e-6 * n**2, "recurrent": 1e-5 * n},
                                fits={"attention": (2.0, float(np.log(1e-6)))}, title="time")
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert len(fig.data) == 3  # attention, its fit, recurrent
    assert fig.data[0].name == "attention (slope 2.00)" and fig.data[2].name == "recurrent"
    assert fig.data[1].line.dash == "dash"
    np.testing.assert_allclose(np.asarray(fig.data[1].y), 1e-6 * n**2, rtol=1e-9)
    with pytest.raises(FigureInputError, match="atention"):
        figures.loglog_figure(n, {"attention": n}, fits={"atention": (1.0, 0.0)})
    with pytest.raises(FigureInputError, match="3 values but x has 4"):
        figures.loglog_figure(n, {"attention": [1, 2, 3]})


def test_bar_and_line_helpers():
    bar = figures.bar_figure(["8", "16", "32"], torch.tensor([20.0, 22.5, 25.0]), title="BLEU", ylabel="BLEU")
    assert len(bar.data) == 1 and list(bar.data[0].x) == ["8", "16", "32"]
    np.testing.assert_allclose(np.asarray(bar.data[0].y), [20.0, 22.5, 25.0])
    assert bar.layout.xaxis.type == "category"
    line = figures.line_figure([0, 1, 2], {"greedy": [1, 2, 3], "beam": np.array([2, 3, 4])}, xlabel="heads pruned",
                               log_y=True)
    assert [t.name for t in line.data] == ["greedy", "beam"] and line.layout.yaxis.type == "log"
    np.testing.assert_allclose(np.asarray(line.data[1].y), [2, 3, 4])


# -- rendering and export -----------------------------------------------------------------------------------------
class _Spy:
    """Stands in for plotly.io.renderers and counts assignments to ``default``."""

    def __init__(self) -> None:
        self._default, self.sets = "", 0

    @property
    def default(self) -> str:
        return self._default

    @default.setter
    def default(self, value: str) -> None:
        self._default, self.sets = value, self.sets + 1


def test_offline_renderer_embeds_plotlyjs_and_is_idempotent(monkeypatch):
    spy = _Spy()
    monkeypatch.setattr(figures, "pio", types.SimpleNamespace(renderers=spy))
    assert figures.setup_offline_renderer() == figures.OFFLINE_RENDERER
    assert figures.setup_offline_renderer() == figures.OFFLINE_RENDERER
    assert spy.sets == 1  # setting it again would embed plotly.js a second time
    names = figures.OFFLINE_RENDERER.split("+")
    assert "notebook" in names and all(n in pio.renderers for n in names)
    assert pio.renderers["notebook"].connected is False  # not the CDN-loading notebook_connected


class _HTMLCheck(HTMLParser):
    VOID = {"meta", "br", "link", "img", "input", "hr"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.tags: list[str] = []
        self.script_srcs: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "script" and dict(attrs).get("src"):
            self.script_srcs.append(dict(attrs)["src"])
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):  # <meta ... />
        self.tags.append(tag)

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes <{self.stack[-1] if self.stack else None}>"
        self.stack.pop()


def test_to_html_embeds_plotlyjs_and_is_valid(tmp_path):
    from plotly.offline import get_plotlyjs

    fig = figures.attention_heatmap(softmax(5, 5), TGT, SRC)
    path = figures.to_html(fig, tmp_path / "sub" / "attention.html")
    text = path.read_text(encoding="utf-8")
    assert get_plotlyjs() in text  # the whole library, inline
    parser = _HTMLCheck()
    parser.feed(text)
    parser.close()
    assert parser.stack == [] and {"html", "head", "body", "script", "div"} <= set(parser.tags)
    assert parser.script_srcs == []  # no CDN (nor any other external) script
    assert "▁Mann" in text and "Plotly.newPlot" in text


def _browser() -> str:
    """The Chrome/Chromium that kaleido and these tests use (``BROWSER_PATH``, else on ``PATH``)."""
    browser = os.environ.get("BROWSER_PATH") or shutil.which("chromium") or shutil.which("google-chrome")
    require(browser, "Chromium or Chrome", "apt-get install chromium (Debian's package, /usr/bin/chromium)")
    return browser


@pytest.mark.browser
@pytest.mark.slow
def test_html_renders_in_headless_chromium_offline(tmp_path):
    browser = _browser()
    path = figures.to_html(figures.attention_heatmap(np.eye(3), ["a", "<eos>", "a"]), tmp_path / "f.html")
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--virtual-time-budget=5000", "--dump-dom", path.as_uri()]
    dom = subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout  # a browser that is there must run
    assert 'class="main-svg"' in dom  # plotly drew the figure with no network
    assert "&lt;eos&gt;" in dom  # and the special token is shown, not swallowed as a tag


def test_to_image_explains_what_to_install(monkeypatch, tmp_path):
    fig = figures.attention_heatmap(np.eye(2))
    monkeypatch.setattr(figures, "_kaleido_version", lambda: None)
    with pytest.raises(ImageExportError, match=r"pip install 'kaleido>=1'"):
        figures.to_image(fig, tmp_path / "f.png")
    monkeypatch.setattr(figures, "_kaleido_version", lambda: "0.2.1")
    with pytest.raises(ImageExportError, match="0.2.1"):
        figures.to_image(fig, tmp_path / "f.png")
    with pytest.raises(FigureInputError, match="bmp"):
        figures.to_image(fig, tmp_path / "f.bmp")


def test_to_image_names_a_missing_browser(monkeypatch, tmp_path):
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-such-chrome"))
    with pytest.raises(ImageExportError, match="Chrom|kaleido"):
        figures.to_image(figures.attention_heatmap(np.eye(2)), tmp_path / "f.png")
    assert not (tmp_path / "f.png").exists()


@pytest.mark.slow
def test_png_export(tmp_path):
    version = figures._kaleido_version()
    require(version is not None and int(version.split(".")[0]) >= 1, f"kaleido >= 1 (found {version})",
            "pip install -e '.[dev]' (the dev extra has kaleido)")
    _browser()
    fig = figures.attention_heatmap(softmax(4, 4), TGT[:4], SRC[:4])
    path = figures.to_image(fig, tmp_path / "f.png", scale=1)  # kaleido and a browser are there: it must work
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (fig.layout.width, fig.layout.height)  # the figure's own size, not a default


@pytest.mark.slow
@pytest.mark.parametrize("ext, magic", [("svg", b"<svg"), ("pdf", b"%PDF-")])
def test_vector_export(ext, magic, tmp_path):
    """The formats the library page documents besides PNG: SVG and PDF through the same kaleido path."""
    version = figures._kaleido_version()
    require(version is not None and int(version.split(".")[0]) >= 1, f"kaleido >= 1 (found {version})",
            "pip install -e '.[dev]' (the dev extra has kaleido)")
    _browser()
    path = figures.to_image(figures.attention_heatmap(softmax(4, 4), TGT[:4], SRC[:4], title="export"),
                            tmp_path / f"f.{ext}")
    assert path.read_bytes().startswith(magic)


def test_markdown_table_keeps_its_rows_whatever_the_cells_hold():
    """The probe's finding: a "|" or a line break in a cell broke the table."""
    from workbench.viz.figures import markdown_table

    text = markdown_table([{"a|b": "x|y", "c": "one\ntwo", "d": 1.23456}])
    lines = text.splitlines()
    assert len(lines) == 3 and all(line.count(" | ") - line.count("\\| ") == 2 for line in lines[::2])
    assert "x\\|y" in lines[2] and "one<br>two" in lines[2] and "1.235" in lines[2]
