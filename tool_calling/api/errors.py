"""The API's one error shape: every failure answers JSON with a ``detail``.

``detail`` is a sentence for people. A 400 from validation also carries ``errors``, the messages
by field as DRF produces them, for programs::

    {"detail": "text: The message is empty.", "errors": {"text": ["The message is empty."]}}

The API's views use :func:`exception_handler` whatever the project's
``REST_FRAMEWORK["EXCEPTION_HANDLER"]`` says (that handler still runs first).
``tool_calling.api.middleware.JSONErrorMiddleware`` gives the same shape to the errors Django
answers before or instead of DRF (unknown paths, bodies over ``DATA_UPLOAD_MAX_MEMORY_SIZE``,
CSRF failures of plain views, server errors).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import exception_handler as drf_exception_handler

__all__ = ["exception_handler", "json_type", "summary"]


def json_type(value: object) -> str:
    """The JSON name of a parsed value's type, with its article: ``"a number"``, ``"null"``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return f"a {type(value).__name__}"


def _messages(errors: Any, path: str) -> list[str]:
    """The messages of DRF's nested errors, each prefixed with its field's dotted path."""
    if isinstance(errors, Mapping):
        found = []
        for key, value in errors.items():
            field = "" if key in (api_settings.NON_FIELD_ERRORS_KEY, "detail") else str(key)
            found += _messages(value, f"{path}.{field}" if path and field else path or field)
        return found
    if isinstance(errors, list | tuple):
        return [message for item in errors for message in _messages(item, path)]
    return [f"{path}: {errors}" if path else str(errors)]


def summary(errors: Any) -> str:
    """One sentence out of DRF's validation errors: ``"text: The message is empty."``."""
    return " ".join(_messages(errors, "")) or "The request is invalid."


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """The project's DRF exception handler, then a ``detail`` for validation errors too."""
    handler = api_settings.EXCEPTION_HANDLER
    if handler is exception_handler:
        handler = drf_exception_handler
    response: Response | None = handler(exc, context)
    if response is None or not isinstance(exc, exceptions.ValidationError):
        return response
    data = response.data
    if isinstance(data, Mapping) and isinstance(data.get("detail"), str):
        return response  # already the API's shape (the project's handler made it)
    errors = data if isinstance(data, Mapping) else {api_settings.NON_FIELD_ERRORS_KEY: data}
    response.data = {"detail": summary(errors), "errors": errors}
    return response
