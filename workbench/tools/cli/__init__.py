"""The ``workbench`` command line: the commands (``main``), the course commands, the run options."""
