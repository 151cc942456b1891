"""Lessons print their own numbers: a figure in a lesson's prose comes from the run (printed by a cell, or glued with
myst-nb's ``glue``), so a student's own run never contradicts the text. A markdown cell that holds a measured-looking
decimal (``0.84``, ``6.5 %``) fails this test unless the number is one of the paper's own figures or a setting the
prose names (explicit lists below, each entry with its source). Numbers inside code spans, math and myst roles
(``{glue:}`name```), section numbers (§3.2.1, Section 6.1) and equation or table numbers are not prose figures.

The comments of code cells are prose a student reads too: the same rule holds for them, with one more allowance: a
number the cell's own code holds (an assert's threshold, a setting) is the code's, not a figure from an earlier run.
Integers (``~30 s``, ``27 %``) are not checked, in markdown or in comments."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]_*.ipynb"))

# The paper's figures (Vaswani et al., 2017), as a lesson may quote them.
PAPER_FIGURES = {
    # §5.3-§5.4, §6.1: Adam's betas, the schedule's exponents, dropout and label smoothing, beam search's alpha
    "0.9", "0.98", "0.5", "1.5", "0.1", "0.3", "0.6",
    # §5.2: training time and step time; §5.1: 4.5M sentence pairs; Table 2 training FLOPs (3.3e18, 2.3e19) and its
    # footnote's sustained single-precision TFLOPS per GPU (K80 2.8, K40 3.7, M40 6.0, P100 9.5)
    "3.5", "0.4", "4.5", "3.3", "2.3", "2.8", "3.7", "6.0", "9.5",
    # Table 2: BLEU of the Transformer and of earlier models (EN-DE, EN-FR)
    "23.75", "24.6", "25.16", "26.03", "26.30", "26.36", "27.3", "28.4", "39.2", "39.92", "40.46", "40.56", "41.16",
    "41.29", "38.1", "41.8", "41.0",
    # Table 3: dev perplexity and BLEU of every variation, and rows (D)'s dropout and smoothing values
    "4.92", "25.8", "5.29", "24.9", "5.00", "25.5", "4.91", "5.01", "25.4", "5.16", "25.1", "6.11", "23.7", "5.19",
    "25.3", "4.88", "5.75", "24.5", "4.66", "26.0", "5.12", "4.75", "26.2", "5.77", "4.95", "4.67", "5.47", "25.7",
    "4.33", "26.4", "0.0", "0.2",
}
# Settings the prose names (defaults, tolerances, parameter values to try): chosen, not measured.
SETTINGS = {
    "0.999",  # Adam's usual beta_2 (PyTorch's default), contrasted with the paper's 0.98
    "1.0",  # gradient clipping norm and --lr-factor of the CPU recipe
    "0.001",  # a peak learning rate offered in a "Try it" prompt
}
NUMBER = re.compile(r"(?<![\w.])[-−+±]?(\d+\.\d+)(?:\s?%)?(?![\w.])")
NOT_PROSE = [
    re.compile(r"```.*?```", re.S),  # fenced code
    re.compile(r"\$\$.*?\$\$", re.S),  # display math
    re.compile(r"\$[^$\n]+\$"),  # inline math
    re.compile(r"\{[\w:-]+\}`[^`]*`"),  # myst roles: {glue:}`name`, {nb}`02#...`, {doc}`...`
    re.compile(r"`[^`]*`"),  # inline code
    re.compile(r"§\s?\d+(\.\d+)*"),  # section numbers
    re.compile(r"\b[Ss]ections?\s\d+(\.\d+)*"),  # section numbers in words (Section 6.1)
    re.compile(r"\b\d+(\.\d+){2,}\b"),  # versions and dotted numbers (2.13.0)
    re.compile(r"https?://\S+"),
]


def measured_looking(markdown: str) -> list[str]:
    """The decimals of a markdown text that look like measurements: outside code, math and roles, and neither one of
    the paper's figures nor a named setting."""
    for pattern in NOT_PROSE:
        markdown = pattern.sub(" ", markdown)
    return [m.group(0).strip() for m in NUMBER.finditer(markdown) if m.group(1) not in PAPER_FIGURES | SETTINGS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem[:2] for p in NOTEBOOKS])
def test_lesson_prose_holds_no_figures_from_earlier_runs(path):
    nb = nbformat.read(str(path), as_version=4)
    found = [(i, n) for i, cell in enumerate(nb.cells) if cell.cell_type == "markdown"
             for n in measured_looking(cell.source)]
    assert not found, (f"{path.name}: markdown cells hold measured-looking figures {found} (cell index, figure): "
                       "print them from the run or glue them (myst-nb glue), or describe them in words")


def _tokens(source: str) -> list[tokenize.TokenInfo]:
    """Python tokens of a code cell; IPython lines (``%magic``, ``!shell``) are blanked first."""
    lines = ["" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()]
    return list(tokenize.generate_tokens(io.StringIO("\n".join(lines) + "\n").readline))


def comment_figures(source: str) -> list[str]:
    """The measured-looking decimals of a code cell's comments (not its strings), less the numbers its code holds."""
    tokens = _tokens(source)
    in_code = {t.string.lstrip("+-") for t in tokens if t.type == tokenize.NUMBER}
    return [n for t in tokens if t.type == tokenize.COMMENT for n in measured_looking(t.string)
            if NUMBER.search(n).group(1) not in in_code]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem[:2] for p in NOTEBOOKS])
def test_lesson_code_comments_hold_no_figures_from_earlier_runs(path):
    nb = nbformat.read(str(path), as_version=4)
    found = [(i, n) for i, cell in enumerate(nb.cells) if cell.cell_type == "code" for n in comment_figures(cell.source)]
    assert not found, (f"{path.name}: code comments hold measured-looking figures {found} (cell index, figure): print "
                       "the run's own number, or give the reason without the number")


@pytest.mark.parametrize("source, flagged", [
    ("x = run()  # measured on the shipped model: 0.95 against 0.08", ["0.95", "0.08"]),
    ("# the lag was 0.2 to 0.43 nats after 100 steps\nassert lag > 0.05", ["0.43"]),  # 0.2: a paper figure (dropout)
    ("assert ratio > 1.3  # above 1.3 at every seed tried", []),  # the threshold is the code's own number
    ("print('# 0.84 inside a string is output, not a comment')", []),
    ("%matplotlib inline\nbeam = 4  # Section 6.1: beam search", []),
    ("y = f(x)  # error −1.17 BLEU", ["−1.17"]),
])
def test_comment_figures_finds_run_figures_only(source, flagged):
    assert comment_figures(source) == flagged


@pytest.mark.parametrize("text, flagged", [
    ("one head puts about 0.84 of its weight on it", ["0.84"]),
    ("27 % missing at 32 steps, 6.5 % at 128", ["6.5 %"]),
    ("a gap of −1.17 BLEU", ["−1.17"]),
    ("Adam with $\\beta_2 = 0.98$ and label smoothing 0.1", []),  # math, and a paper figure
    ("the big model reaches 28.4 BLEU (Table 2)", []),
    ("printed: {glue:}`entropy_gap` nats above", []),
    ("run `-p ALPHAS=\"0.0 0.37\"` and see §3.2.1", []),
    ("torch 2.13.0 on the CPU", []),
    ("beam search (Section 6.1) with a length penalty", []),
])
def test_measured_looking_finds_run_figures_only(text, flagged):
    assert measured_looking(text) == flagged
