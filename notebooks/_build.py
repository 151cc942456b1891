"""Generate the numbered notebooks from the cell sources in ``_nbNN.py`` (run: python notebooks/_build.py [NN ...]).

Keeping the sources here makes the notebooks reviewable as Python; the .ipynb files are committed without outputs.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).parent
COMMON = """\
import json, math, time
import numpy as np
import torch
import workbench as wb
from workbench import figures
figures.setup_offline_renderer()
wb.set_seed(SEED)
metrics = {}
"""


def build(name: str, cells: list[tuple[str, str]]) -> None:
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    for kind, src in cells:  # kind: "md", "params" or "code"
        src = src.strip("\n")
        if kind == "md":
            nb.cells.append(new_markdown_cell(src))
        elif kind == "params":
            cell = new_code_cell(src)
            cell.metadata["tags"] = ["parameters"]
            nb.cells.append(cell)
        else:
            nb.cells.append(new_code_cell(src))
    for i, cell in enumerate(nb.cells):
        cell["id"] = str(i)  # the ids nbstripout writes, so `nbstripout --verify` accepts the generated files
    nbformat.write(nb, HERE / f"{name}.ipynb")


if __name__ == "__main__":
    import importlib.util
    import sys

    wanted = sys.argv[1:]  # optional notebook numbers, e.g. 02 06; default: all
    for spec_file in sorted(HERE.glob("_nb*.py")):
        if wanted and spec_file.stem[3:5] not in wanted:
            continue
        spec = importlib.util.spec_from_file_location(spec_file.stem, spec_file)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        build(module.NAME, [("code", COMMON) if c == ("code", "COMMON") else c for c in module.CELLS])
        print("wrote", module.NAME)
