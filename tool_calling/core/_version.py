"""The package's version, in the core so that every module can name it without a circle."""

__all__ = ["VERSION"]

VERSION = "0.2.0"
"""Also ``tool_calling.__version__``; the package metadata reads it from here
(``[tool.setuptools.dynamic]`` in ``pyproject.toml``)."""
