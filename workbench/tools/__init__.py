"""Tools, one sub-package a trade, all users of the public API (``import workbench as wb``).

* :mod:`workbench.tools.cli`: the ``workbench`` command (``main``) with its course commands and run options;
* :mod:`workbench.tools.book`: the notebooks (finding, copying, running), student copies, the book, slides, the
  README's generated blocks and the in-browser translation page;
* :mod:`workbench.tools.grading`: grading a class of student copies, each run in a sandbox;
* :mod:`workbench.tools.bench`: the benchmark suite (``workbench bench``) and the reference models it races;
* :mod:`workbench.tools.release`: building a shipped model (weights chosen on val, card, export);
* :mod:`workbench.tools.provenance`: the record every result file carries, and the one report writer.

Within ``tools/`` imports point down the same way: ``cli`` -> ``grading`` -> ``book`` / ``bench`` / ``release``
-> ``provenance`` (``tests/test_import_layers.py``).
"""
