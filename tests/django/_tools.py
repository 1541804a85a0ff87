"""Helpers of the Django-level tests: test tools in the project registry, the runs' model."""

from contextlib import contextmanager

from django.conf import settings

from tool_calling import OpenAIChatModel
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


_MODELS = []
"""The chat models tests installed, innermost last (``chat_model``)."""


def current_chat_model():
    """``TOOL_CALLING["CHAT_MODEL"]["CLASS"]`` of the test settings: the installed model.

    With none installed, the default: the OpenAI adapter, pointed by tests/settings.py at a
    closed port, so a turn that reaches it fails fast instead of talking to a real model.
    """
    if _MODELS:
        return _MODELS[-1]
    return OpenAIChatModel()


@contextmanager
def chat_model(model):
    """Make ``model`` the chat model of every governed path, through ``CHAT_MODEL["CLASS"]``.

    tests/settings.py names :func:`current_chat_model` there, as a project names its own
    factory; this only chooses what it returns (process-wide, so a live server sees it).
    """
    _MODELS.append(model)
    try:
        yield model
    finally:
        _MODELS.remove(model)


def tool_calling_settings(**keys):
    """The test settings' ``TOOL_CALLING`` with ``keys`` changed (for ``override_settings``)."""
    return {**settings.TOOL_CALLING, **keys}
