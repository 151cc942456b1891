"""The package's version, in the base layer: what a cache key records without importing the public API.

``pyproject.toml`` reads it from here (``[tool.setuptools.dynamic]``); ``workbench.__version__`` is this one.
"""

__version__ = "0.1.0"

