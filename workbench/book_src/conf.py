"""Sphinx configuration of the Attention Workbench book (copied into a temporary source folder by
``workbench book build``, next to the executed notebooks)."""

from workbench.tools.book.sphinx_build import sphinx_setup

project = "Attention Workbench"
author = "Attention Workbench developers"
copyright = "Attention Workbench developers"
language = "en"

extensions = ["myst_nb", "sphinx-mathjax-offline", "sphinx_togglebutton"]
exclude_patterns = ["_build", "**.ipynb_checkpoints"]

# -- notebooks: already executed by papermill; never run them again here
nb_execution_mode = "off"
nb_merge_streams = True
# -- exercises: each solution cell is tagged `hide-input`, so its code is collapsed behind this toggle (its check,
#    the next cell, stays open); sphinx-togglebutton collapses `{toggle}` / dropdown content the same way
nb_code_prompt_show = "Show the solution"
nb_code_prompt_hide = "Hide the solution"
togglebutton_hint = "Show"
togglebutton_hint_hide = "Hide"
nb_ipywidgets_js = {}  # widget outputs are turned into static snapshots: no require.js / html-manager from a CDN
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]

# -- math: MathJax 3 shipped by sphinx-mathjax-offline (copied to _static/mathjax); SVG output needs no web fonts
mathjax_path = "mathjax/tex-svg.js"

# -- HTML
html_theme = "sphinx_book_theme"
html_title = "Attention Workbench"
html_static_path = ["_static"]
html_js_files = ["plotly.min.js"]  # copied from the installed plotly package by the builder
html_css_files = ["book.css"]
html_show_sourcelink = False
html_last_updated_fmt = None
html_theme_options = {
    "home_page_in_toc": True,
    "show_navbar_depth": 1,
    "use_download_button": True,
    "use_fullscreen_button": False,
    "use_repository_button": False,
    "navigation_with_keys": False,
}


def setup(app):
    return sphinx_setup(app)
