"""Helpers of the Django-level tests: test tools in the project registry."""

from contextlib import contextmanager

from tool_calling.registry import registry
from tool_calling.sync import sync_tools


@contextmanager
def registered(*tools):
    """``tools`` in the project registry (where workers resolve names) with ``Tool`` rows."""
    registry.register(*tools, source="tests")
    sync_tools()
    try:
        yield
    finally:
        for callback in tools:
            registry.unregister(callback.__name__)
