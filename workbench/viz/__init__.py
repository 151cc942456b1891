"""Presentation: plotly figures and ipywidgets inspectors."""
