"""OpenTelemetry spans and metrics of governed turns, in the GenAI semantic conventions.

``opentelemetry-api`` is optional (``pip install 'django-tool-calling[otel]'``): without it, or
without a tracer or meter provider configured (an SDK), every observation here is a no-op but
the log fields (:class:`LogContextFilter`). Spans, all with ``gen_ai.conversation.id`` and
``tool_calling.run.id`` where there is one:

``invoke_agent`` (INTERNAL)
    One turn: :class:`TurnObservationAdvisor` around a governed turn in-process; a durable run's
    whole turn, from its first step to its end, with the usage of all its model calls: the first
    step reserves the span's ids and stores them on the run, every step (on any worker, after any
    wait) and every tool call makes its spans children of it (:func:`run_step`,
    :func:`resume_turn`), and the process that ends the run records it
    (:func:`run_turn_ended`).
``chat {model}`` (CLIENT)
    One model call (:class:`ChatObservationAdvisor`, innermost, streaming included): provider,
    request and response model, token usage, finish reasons; in a durable run, the step that
    made it (``tool_calling.run.step``).
``execute_tool {tool}`` (INTERNAL)
    One tool call, where it runs (:class:`tool_call`, in-process or on a worker; calls a limit
    refused: :func:`limit_refused`): tool name, call id, type, execution mode, attempt, outcome,
    ``error.type`` on failure, the approval decision.

Content (arguments, results, messages) goes on spans only with
``TOOL_CALLING["OBSERVATIONS_INCLUDE_CONTENT"] = True``, redacted by ``AUDIT_REDACTOR`` and cut
to ``AUDIT_MAX_CHARS`` as the audit is; a tool's ``ToolContext`` never does. Metrics are
recorded once per operation where it ran: ``gen_ai.client.operation.duration`` and
``gen_ai.client.token.usage`` per model call, ``tool_calling.tool_call.duration`` and
``tool_calling.tool_calls`` per tool call, ``tool_calling.limit_refusals``, approval decisions
and how long they waited, and gauges of the calls waiting for approval.

A Celery task carries its sender's trace context in its headers (:func:`task_options`), and the
worker continues it (:func:`task_prerun`, connected by ``ToolCallingConfig.ready()``), so the
web request, a run's steps and every tool-call task make one trace. MCP calls nest under the
MCP SDK's own ``MCP send tools/call`` spans, which run inside ``execute_tool``; a connection to
an MCP server is opened for the request that needs it, so its ``MCP send initialize`` span is a
child of that request's span too.

Modules: ``_scope`` (what the current work belongs to, :class:`LogContextFilter`, making an
observation current), ``_content`` (:func:`content_enabled`, redaction, messages as GenAI
parts), ``_metrics`` (the instruments, the approval gauges, :func:`connect`), ``_chat`` (model
calls, :func:`provider_name`), ``_turns`` (the turn), ``_tools`` (tool calls), ``_runs`` (a
durable run's steps), ``_propagation`` (trace context in Celery task headers), ``_otel`` (the
only OpenTelemetry import) and ``semconv`` (attribute and metric names); :func:`tracing_enabled`
and :func:`metrics_enabled` are answered here.
"""

from __future__ import annotations

from tool_calling.observability import _otel
from tool_calling.observability._chat import ChatObservationAdvisor, chat_advisors, provider_name
from tool_calling.observability._content import content_enabled
from tool_calling.observability._metrics import connect
from tool_calling.observability._propagation import (
    task_headers,
    task_options,
    task_postrun,
    task_prerun,
)
from tool_calling.observability._runs import resume_turn, run_step, run_turn_ended
from tool_calling.observability._scope import LogContextFilter
from tool_calling.observability._tools import CELERY as CELERY
from tool_calling.observability._tools import INLINE as INLINE
from tool_calling.observability._tools import limit_refused, tool_call
from tool_calling.observability._turns import TurnObservationAdvisor

__all__ = [
    "ChatObservationAdvisor",
    "LogContextFilter",
    "TurnObservationAdvisor",
    "chat_advisors",
    "connect",
    "content_enabled",
    "limit_refused",
    "metrics_enabled",
    "provider_name",
    "resume_turn",
    "run_step",
    "run_turn_ended",
    "task_headers",
    "task_options",
    "task_postrun",
    "task_prerun",
    "tool_call",
    "tracing_enabled",
]


def tracing_enabled() -> bool:
    """Whether spans are recorded: the API is installed and a tracer provider is configured."""
    return _otel.tracer() is not None


def metrics_enabled() -> bool:
    """Whether metrics are recorded: the API is installed and a meter provider is configured."""
    return _otel.meter()[1] is not None
