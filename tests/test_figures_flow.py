"""Figures of information flow, attribution and interventions."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import pytest

from workbench.viz import figures
from workbench.viz.figures import FigureInputError


def test_rollout_heatmap_draws_the_matrix_on_its_own_range():
    r = np.array([[0.6, 0.3, 0.1], [0.2, 0.5, 0.3]])
    fig = figures.rollout_heatmap(r, ["a", "<eos>"], ["x", "y", "z"], title="rollout")
    assert isinstance(fig, go.Figure)
    np.testing.assert_array_equal(np.asarray(fig.data[0].z), r)
    assert fig.data[0].zmax == pytest.approx(0.6) and "share" in fig.data[0].hovertemplate
    assert list(fig.layout.yaxis.ticktext) == ["a", "&lt;eos&gt;"]
    with pytest.raises(FigureInputError, match="rollout"):
        figures.rollout_heatmap(np.ones((2, 2, 2)))


def test_attention_vs_attribution_puts_panels_on_one_scale():
    att = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]])
    ig = np.array([[-2.0, 1.0, 1.0], [0.0, 0.0, 0.0]])  # signed; the second row is all zero
    fig = figures.attention_vs_attribution({"attention": att, "integrated gradients": ig}, ["a", "b"], ["x", "y", "z"])
    assert len(fig.data) == 2 and [a.text for a in fig.layout.annotations] == ["attention", "integrated gradients"]
    np.testing.assert_allclose(np.asarray(fig.data[0].z), att)
    np.testing.assert_allclose(np.asarray(fig.data[1].z), [[0.5, 0.25, 0.25], [0.0, 0.0, 0.0]])
    assert fig.layout.coloraxis.cmax == pytest.approx(0.8)
    assert "value: -2" in fig.data[1].customdata[0][0]
    with pytest.raises(FigureInputError, match="different shapes"):
        figures.attention_vs_attribution({"a": att, "b": att[:, :2]})
    with pytest.raises(FigureInputError, match="query_tokens has 1 tokens"):
        figures.attention_vs_attribution({"a": att}, ["a"], ["x", "y", "z"])


def test_token_bars_keep_repeated_tokens_apart_and_colour_by_sign():
    fig = figures.token_bars(["the", "dog", "the"], [0.5, -1.0, 0.0])
    assert list(fig.data[0].x) == [0, 1, 2] and list(fig.layout.xaxis.ticktext) == ["the", "dog", "the"]
    assert list(fig.data[0].marker.color) == ["#1f77b4", "#d62728", "#1f77b4"]
    assert {"rollout_heatmap", "attention_vs_attribution", "token_bars"} <= set(figures.__all__)


def test_grouped_bar_figure_groups_series_with_error_bars():
    fig = figures.grouped_bar_figure(["saliency", "IG"], {"attention": [0.5, 0.4], "random": [0.0, np.nan]},
                                     {"attention": [0.05, 0.02]}, title="agreement")
    assert [t.name for t in fig.data] == ["attention", "random"] and fig.layout.barmode == "group"
    np.testing.assert_allclose(np.asarray(fig.data[0].error_y.array), [0.05, 0.02])
    assert fig.data[1].error_y.array is None
    with pytest.raises(FigureInputError, match="not series"):
        figures.grouped_bar_figure(["a"], {"x": [1.0]}, {"y": [0.1]})
    with pytest.raises(FigureInputError):
        figures.grouped_bar_figure(["a", "b"], {"x": [1.0]})
    with pytest.raises(FigureInputError, match="no series"):
        figures.grouped_bar_figure(["a"], {})


def test_two_colour_bars_and_grouped_bars_say_what_their_colours_are():
    bars = figures.token_bars(["the", "dog"], [0.5, -1.0], ylabel="Δ log p")
    named = [t for t in bars.data if t.showlegend is not False and t.name]
    assert bars.layout.showlegend and {t.marker.color for t in named} == {"#1f77b4", "#d62728"}
    assert [t.name for t in named] == ["positive Δ log p", "negative Δ log p"]
    grouped = figures.grouped_bar_figure(["a"], {"only series": [1.0]})
    assert grouped.layout.showlegend and grouped.data[0].name == "only series"  # even one series is named


def test_long_titles_wrap_instead_of_being_cut():
    title = "gru-de-en: dot-product attention while translating → A woman uses a drill while a man watches her work"
    fig = figures.attention_heatmap(np.full((4, 5), 0.2), ["a", "b", "c", "d"], ["v", "w", "x", "y", "z"], title=title)
    lines = fig.layout.title.text.split("<br>")
    assert len(lines) > 1 and " ".join(lines) == title  # every word kept, in order
    assert max(len(line) for line in lines) * figures.TITLE_CHAR_PX <= fig.layout.width - 40
    short = figures.attention_heatmap(np.full((4, 5), 0.2), title="weights")
    assert short.layout.title.text == "weights"
    assert fig.layout.margin.t > short.layout.margin.t and fig.layout.height > short.layout.height
