"""How the admin shows stored texts: clipped, JSON indented, always escaped; links."""

from __future__ import annotations

import json
from typing import Any

from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html

from tool_calling import models
from tool_calling.registry import registry

# Longest text shown for one message part or audit field; the rest is cut with a marker, so a
# huge tool result cannot make an admin page unusable.
DISPLAY_MAX_CHARS = 20_000


def clip(text: str) -> str:
    """``text`` cut to ``DISPLAY_MAX_CHARS`` with a marker saying how much is not shown."""
    if len(text) <= DISPLAY_MAX_CHARS:
        return text
    hidden = len(text) - DISPLAY_MAX_CHARS
    return f"{text[:DISPLAY_MAX_CHARS]}\n[… {hidden} more characters not shown]"


def pretty(value: Any) -> str:
    """``value`` as readable text: JSON objects and arrays (even inside a string) indented."""
    if isinstance(value, str):
        if len(value) > DISPLAY_MAX_CHARS or value[:1] not in ("{", "["):
            return clip(value)  # not JSON worth indenting (or too long to parse for a page)
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            return value
    if value is None:
        return ""
    try:
        return clip(json.dumps(value, indent=2, ensure_ascii=False))
    except (TypeError, ValueError, RecursionError):
        return clip(repr(value))


def pre(value: Any) -> str:
    """``value`` pretty-printed in an escaped ``<pre>`` block."""
    return format_html('<pre class="tool-calling-pre">{}</pre>', pretty(value))


def admin_url(obj: Any, view: str = "change") -> str | None:
    """The admin URL of ``obj``'s ``view`` page; ``None`` when its admin is not registered."""
    opts = obj._meta
    try:
        return reverse(f"admin:{opts.app_label}_{opts.model_name}_{view}", args=[obj.pk])
    except NoReverseMatch:
        return None


def conversation_link(execution: models.ToolExecution, empty: str) -> str:
    """The call's conversation, linked to its transcript (``empty`` when it has none)."""
    if execution.conversation is None:
        return empty
    url = admin_url(execution.conversation)
    if url is None:
        return str(execution.conversation)
    return format_html('<a href="{}">{}</a>', url, execution.conversation)


def code_requires_confirmation(name: str) -> bool:
    """Whether the tool's code says ``@tool(requires_confirmation=True)``: a floor for operators.

    A condition on the arguments is not a floor on the row: the gate applies it per call.
    """
    callback = registry.get(name)
    return bool(callback is not None and callback.metadata.requires_confirmation is True)


def code_requires_approval(name: str) -> bool:
    """Whether the tool's code says ``@tool(requires_approval=True)``: a floor for operators."""
    callback = registry.get(name)
    return bool(callback is not None and callback.metadata.requires_approval)
