"""The package's version, in the base layer: what a cache key records without importing the public API.

``pyproject.toml`` reads it from here (``[tool.setuptools.dynamic]``); ``workbench.__version__`` is this one.
"""

__version__ = "0.1.0"

# the release that drops the site spellings from before workbench.model.sites (0.1.x accepts them with a warning)
OLD_SITE_NAMES_REMOVED_IN = "0.2.0"
