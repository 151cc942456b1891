"""Notebooks and the book: finding, copying and running notebooks, student copies, the book, slides, the README's
generated blocks and the in-browser translation page."""
