"""Tools: the command line, the notebook runner, the book, the benchmark."""
