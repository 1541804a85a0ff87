"""The package's version, in the core so that every module can name it without a circle."""

__all__ = ["VERSION"]

VERSION = "0.1.0"
"""Also ``tool_calling.__version__``; ``pyproject.toml`` carries the same number."""
