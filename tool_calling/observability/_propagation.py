"""Trace context across Celery: sent in a task's headers, continued on the worker."""

from __future__ import annotations

from typing import Any

from tool_calling.observability import _otel
from tool_calling.observability._scope import _Restore


def task_headers() -> dict[str, str] | None:
    """The current trace context as Celery task headers; ``None`` when nothing is traced."""
    if _otel.tracer() is None:
        return None
    return _otel.inject()


def task_options() -> dict[str, Any]:
    """``apply_async`` options that carry the current trace: ``{"headers": ...}``, or ``{}``.

    Empty when nothing is traced, so a task is sent exactly as it would be without
    OpenTelemetry.
    """
    headers = task_headers()
    return {"headers": headers} if headers else {}


_task_tokens: dict[str, _Restore] = {}


def task_prerun(sender: Any = None, task_id: str | None = None, task: Any = None, **_: Any) -> None:
    """Celery ``task_prerun``: continue the trace the task's headers carry (tool_calling's tasks).

    Left alone when another instrumentation already made a span current for the task.
    """
    if (
        not task_id
        or task is None
        or not str(getattr(task, "name", "")).startswith("tool_calling.")
    ):
        return
    if _otel.tracer() is None or _otel.has_current_span():
        return
    request = getattr(task, "request", None)
    headers = getattr(request, "headers", None) or {}
    carrier = {}
    for key in ("traceparent", "tracestate"):
        value = getattr(request, key, None) or headers.get(key)
        if isinstance(value, str):
            carrier[key] = value
    parent = _otel.extract(carrier)
    if parent is not None:
        _task_tokens[task_id] = _Restore(None, None, parent)


def task_postrun(sender: Any = None, task_id: str | None = None, **_: Any) -> None:
    """Celery ``task_postrun``: end what :func:`task_prerun` continued."""
    restore = _task_tokens.pop(task_id or "", None)
    if restore is not None:
        restore()
