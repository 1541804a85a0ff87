"""Argument augmentation in governed turns: the model says why it calls a tool.

A tool is augmented when its "ask why it is called" in the admin says so
(``Tool.augment_arguments``), else when ``ARGUMENT_AUGMENTATION["ENABLED"]`` does. Its
definition then gains the fields of ``ARGUMENT_AUGMENTATION["TYPE"]`` (:class:`CallReason` by
default), required and first. Where a call is recorded (``governance`` for calls run in the
process of the turn, ``calls.executors`` and ``runs.steps`` for calls sent to workers), the
values are split from the tool's own arguments (:func:`split_call`): the values are stored on
the call's ``ToolExecution`` (``augmented_arguments``) and the tool only ever sees its own
arguments, so a worker runs the plain registered tool.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple

import pydantic
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from tool_calling import models
from tool_calling.conf import settings as app_settings
from tool_calling.core.augment import AugmentedArguments, AugmentedToolCallback
from tool_calling.core.chat.messages import ToolCall
from tool_calling.core.tools.callback import ToolCallback
from tool_calling.core.tools.context import ToolContext

__all__ = ["CallReason", "SplitCall", "augment_type", "augmented", "is_augmented", "split_call"]

logger = logging.getLogger("tool_calling.augmentation")


class CallReason(pydantic.BaseModel):
    """The default augmentation: why the model calls a tool, and how sure it is."""

    inner_thought: str = pydantic.Field(
        description="Why you call this tool now, in one sentence.",
    )
    confidence: Literal["low", "medium", "high"] = pydantic.Field(
        description="How sure you are that this call is the right next step.",
    )


@functools.cache
def _imported(path: str) -> Any:
    try:
        return import_string(path)
    except ImportError as exc:
        raise ImproperlyConfigured(
            f'Could not import {path!r} for \'TOOL_CALLING["ARGUMENT_AUGMENTATION"]["TYPE"]\': '
            f"{exc}"
        ) from exc


def augment_type() -> Any:
    """The type whose fields augmented calls carry (``ARGUMENT_AUGMENTATION["TYPE"]``).

    Raises:
        ImproperlyConfigured: the dotted path does not import.
    """
    configured = app_settings.ARGUMENT_AUGMENTATION["TYPE"]
    return _imported(configured) if isinstance(configured, str) else configured


def is_augmented(row: models.Tool | None) -> bool:
    """Whether calls of ``row``'s tool carry the augmentation: its own choice, else the setting."""
    if row is not None and row.augment_arguments is not None:
        return bool(row.augment_arguments)
    return bool(app_settings.ARGUMENT_AUGMENTATION["ENABLED"])


def _consumer(event: AugmentedArguments[Any]) -> None:
    # Governed paths record the values themselves (split_call); this only runs when a caller
    # calls the wrapped tool directly.
    # The values are the model's words: never in the log.
    logger.debug("Tool %r called with its augmented fields", event.tool_definition.name)


_wrapped: dict[tuple[int, int], tuple[ToolCallback, Any, AugmentedToolCallback]] = {}
_WRAPPED_SIZE = 4096
_lock = threading.Lock()


def _wrap(callback: ToolCallback, kind: Any) -> AugmentedToolCallback:
    # One wrapper per callback and type: each tool's schema is merged once, not every turn.
    key = (id(callback), id(kind))
    with _lock:
        hit = _wrapped.get(key)
        if hit is not None and hit[0] is callback and hit[1] is kind:
            return hit[2]
    wrapper = AugmentedToolCallback(callback, kind, _consumer)
    with _lock:
        if len(_wrapped) >= _WRAPPED_SIZE:
            _wrapped.clear()
        _wrapped[key] = (callback, kind, wrapper)
    return wrapper


def augmented(
    callbacks: Sequence[ToolCallback], rows: Mapping[str, models.Tool]
) -> list[ToolCallback]:
    """``callbacks``, each augmented tool wrapped in an ``AugmentedToolCallback``.

    Args:
        callbacks: The tools of a turn.
        rows: Their ``Tool`` rows by name (the turn's snapshot).

    Raises:
        ImproperlyConfigured: ``ARGUMENT_AUGMENTATION["TYPE"]`` does not import.
        ToolDefinitionError: it is not an object type with fields.
    """
    if not callbacks:
        return []
    if not app_settings.ARGUMENT_AUGMENTATION["ENABLED"] and not any(
        row.augment_arguments for row in rows.values()
    ):
        return list(callbacks)  # the common case: no tool asks, nothing to wrap
    kind = augment_type()
    return [
        _wrap(callback, kind) if is_augmented(rows.get(callback.definition.name)) else callback
        for callback in callbacks
    ]


@functools.cache
def _adapter(kind: Any) -> pydantic.TypeAdapter[Any]:
    return pydantic.TypeAdapter(kind)


class SplitCall(NamedTuple):
    """A call with the tool's own arguments, the values split from them, and what runs it."""

    call: ToolCall
    """The call with the tool's own arguments."""
    values: dict[str, Any]
    """The augmented values as JSON data (``{}`` for a tool that is not augmented)."""
    callback: ToolCallback
    """The tool that runs ``call``: an augmented tool's wrapped one."""


def split_call(
    callback: ToolCallback, tool_call: ToolCall, tool_context: ToolContext | Mapping[str, Any]
) -> SplitCall:
    """The call with the tool's own arguments, the augmented values as JSON data, the tool.

    A callback that is not augmented gives ``(tool_call, {}, callback)``.

    Raises:
        ToolArgumentsError: the arguments are not a JSON object, or the augmented values do
            not fit the augmentation type (the text is written for the model).
    """
    if not isinstance(callback, AugmentedToolCallback):
        return SplitCall(tool_call, {}, callback)
    context = tool_context if isinstance(tool_context, ToolContext) else ToolContext(tool_context)
    event, arguments = callback.split(tool_call.arguments, context)
    values = _adapter(callback.augment_type).dump_python(event.values, mode="json")
    own = ToolCall(tool_call.id, tool_call.name, arguments)
    kept = dict(values) if isinstance(values, Mapping) else {"value": values}
    return SplitCall(own, kept, callback.delegate)
