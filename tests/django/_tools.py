"""Helpers of the Django-level tests: test tools in the project registry, the runs' model."""

import io
import logging
from collections.abc import Iterator
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


@contextmanager
def every_log_record_at_debug() -> Iterator[io.StringIO]:
    """Every logger at DEBUG into one buffer, also those that do not propagate to the root."""
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    handler.setLevel(logging.DEBUG)
    loggers = [logging.getLogger()] + [
        logger
        for logger in logging.Logger.manager.loggerDict.values()
        if isinstance(logger, logging.Logger) and (not logger.propagate or logger.handlers)
    ]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    try:
        yield buffer
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(level)


@contextmanager
def current_celery_app(main="bare", **conf):
    """A new Celery app (no Django settings, ``conf`` only) as the current one, then the old.

    What a project that installed Celery but never defined its app (Celery's Django guide:
    ``<project>/celery.py``) runs with: Celery's default app, which reads no ``CELERY_*``.
    """
    from celery import Celery, current_app

    previous = current_app._get_current_object()
    app = Celery(main, set_as_current=False)
    app.conf.update(conf)
    app.set_current()
    try:
        yield app
    finally:
        previous.set_current()
