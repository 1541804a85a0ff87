"""Tool calls: the ``execute_tool {tool}`` span and the tool-call metrics.

:class:`tool_call` observes a call where it runs (in-process or on a worker);
:func:`limit_refused` observes a call a call limit refused (it never ran).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Protocol

from tool_calling.core.chat.messages import ToolCall
from tool_calling.core.execution.plan import ToolOutcome, ToolOutcomeKind
from tool_calling.observability import _otel
from tool_calling.observability import semconv as sc
from tool_calling.observability._content import _redacted, content_enabled
from tool_calling.observability._metrics import _instruments
from tool_calling.observability._scope import _error_type, _Scope, _scope, _text

INLINE = "inline"
"""``tool_calling.tool_call.execution_mode`` of a call run in the turn's process."""
CELERY = "celery"
"""``tool_calling.tool_call.execution_mode`` of a call run on a Celery worker."""


# -- tool calls ------------------------------------------------------------------------------------


class _Ended(Protocol):
    """How a governed call ended (``calls.running.CallOutcome``)."""

    @property
    def status(self) -> str: ...

    @property
    def outcome(self) -> ToolOutcome: ...


_OUTCOME_ERRORS = {ToolOutcomeKind.TIMEOUT: "timeout", ToolOutcomeKind.UNKNOWN: "outcome_unknown"}


class tool_call:
    """Observe one tool call where it runs: ``with tool_call(call, ...) as observed:``.

    Inside the block the ``execute_tool {tool}`` span is current (spans the tool makes, the MCP
    SDK's among them, are its children) and log records carry the call's id and tool name.
    ``observed.ended(outcome)`` records how it ended (and returns ``outcome``); a block that
    raises ends the span with the exception's type.

    Args:
        call: The model's call (its arguments go on the span with content on only).
        execution_mode: ``"inline"`` or ``"celery"``.
        attempt: The attempt that runs the call.
        description: The tool's description.
        approval: The approval decision the call runs under (blank: none needed).
        conversation_id: The stored conversation of the turn.
        run_id: The durable run that made the call.
        trace_context: The run's stored trace context (``Run.trace_context``): the span joins
            the run's turn even when someone else's request sent the call (an approval).
        approval_attributes: The ``tool_calling.approval.*`` attributes of a call that waited
            for a person (``semconv``); never an argument value.
    """

    __slots__ = (
        "_attributes",
        "_ended",
        "_instruments",
        "_otel_token",
        "_scope",
        "_scope_token",
        "_span",
        "_started",
    )

    def __init__(
        self,
        call: ToolCall,
        *,
        execution_mode: str,
        attempt: int = 1,
        description: str = "",
        approval: str = "",
        conversation_id: Any = None,
        run_id: Any = None,
        trace_context: str = "",
        approval_attributes: Mapping[str, Any] | None = None,
    ) -> None:
        scope = _scope.get()
        turn = scope.turn
        conversation = scope.conversation_id if conversation_id is None else str(conversation_id)
        run = scope.run_id if run_id is None else str(run_id)
        self._scope = _Scope(conversation, run, call.id, call.name, turn, scope.step)
        self._ended = False
        self._span: Any = None
        self._otel_token: Any = None
        if turn is not None:  # the turn looked the providers up for its calls
            tracer, self._instruments = turn.tracer, turn.instruments
        else:
            tracer, self._instruments = _otel.tracer(), _instruments()
        if tracer is None and self._instruments is None:
            self._attributes: dict[str, Any] | None = None  # only the log fields
            return
        self._attributes = {
            sc.GEN_AI_TOOL_NAME: call.name,
            sc.TOOL_CALLING_EXECUTION_MODE: execution_mode,
        }
        if tracer is not None:
            attributes: dict[str, Any] = {
                sc.GEN_AI_OPERATION_NAME: sc.OPERATION_EXECUTE_TOOL,
                sc.GEN_AI_TOOL_NAME: call.name,
                sc.GEN_AI_TOOL_CALL_ID: call.id,
                sc.GEN_AI_TOOL_TYPE: sc.TOOL_TYPE_FUNCTION,
                sc.TOOL_CALLING_EXECUTION_MODE: execution_mode,
                sc.TOOL_CALLING_ATTEMPT: attempt,
            }
            if description:
                attributes[sc.GEN_AI_TOOL_DESCRIPTION] = description
            if approval:
                attributes[sc.TOOL_CALLING_APPROVAL] = approval
            if approval_attributes:
                attributes.update(approval_attributes)
            if conversation:
                attributes[sc.GEN_AI_CONVERSATION_ID] = conversation
            if run:
                attributes[sc.TOOL_CALLING_RUN_ID] = run
            if content_enabled():
                attributes[sc.GEN_AI_TOOL_CALL_ARGUMENTS] = _redacted(
                    call.arguments, tool_name=call.name, field="arguments"
                )
            parent = _otel.stored_parent(trace_context)
            self._span = _otel.start_span(
                tracer, f"{sc.OPERATION_EXECUTE_TOOL} {call.name}", "internal", attributes, parent
            )
        self._started = time.perf_counter()

    def __enter__(self) -> tool_call:
        self._scope_token = _scope.set(self._scope)
        if self._span is not None:
            self._otel_token = _otel.attach(self._span)
        return self

    def ended(self, result: Any) -> Any:
        """Record how the call ended (``status`` and ``outcome``); returns ``result``."""
        if self._attributes is not None:
            ended: _Ended = result
            self._end(ended.status, ended.outcome, time.perf_counter() - self._started)
        return result

    def _end(
        self,
        status: str,
        outcome: ToolOutcome | None,
        seconds: float,
        error: BaseException | None = None,
    ) -> None:
        attributes = self._attributes
        if self._ended or attributes is None:
            return
        self._ended = True
        status = str(status)
        attributes[sc.TOOL_CALLING_OUTCOME] = status
        error_type = ""
        if error is not None:
            error_type = _error_type(error)
        elif outcome is not None and outcome.kind is not ToolOutcomeKind.OK:
            kind = outcome.kind
            error_type = outcome.error_type or _OUTCOME_ERRORS.get(kind, sc.ERROR_TYPE_OTHER)
        if error_type:
            attributes[sc.ERROR_TYPE] = error_type
        span = self._span
        if span is not None:
            ended: dict[str, Any] = {sc.TOOL_CALLING_OUTCOME: status}
            if error_type:
                ended[sc.ERROR_TYPE] = error_type
            if status == "refused":
                ended[sc.TOOL_CALLING_REFUSAL] = "governance"
            span.set_attributes(ended)
            if error_type:
                _otel.set_error(span, error_type.rpartition(".")[2])
            if outcome is not None and content_enabled():
                name = attributes[sc.GEN_AI_TOOL_NAME]
                if outcome.kind is ToolOutcomeKind.OK:
                    span.set_attribute(
                        sc.GEN_AI_TOOL_CALL_RESULT,
                        _redacted(outcome.text, tool_name=name, field="result"),
                    )
                else:
                    span.add_event(
                        "exception",
                        {
                            "exception.type": error_type,
                            "exception.message": _redacted(
                                outcome.text, tool_name=name, field="error"
                            ),
                        },
                    )
        instruments = self._instruments
        if instruments is not None:
            metric = {
                sc.GEN_AI_TOOL_NAME: attributes[sc.GEN_AI_TOOL_NAME],
                sc.TOOL_CALLING_OUTCOME: status,
                sc.TOOL_CALLING_EXECUTION_MODE: attributes[sc.TOOL_CALLING_EXECUTION_MODE],
            }
            instruments.tool_duration.record(seconds, metric)
            instruments.tool_calls.add(1, metric)

    def __exit__(self, exc_type: Any, exc: BaseException | None, traceback: Any) -> None:
        if self._otel_token is not None:
            _otel.detach(self._otel_token)
        _scope.reset(self._scope_token)
        if exc is not None:
            self._end("failed", None, time.perf_counter() - self._started, exc)
        if self._span is not None:
            self._span.end()


def limit_refused(
    call: ToolCall, response_text: str, *, conversation_id: Any = None, run_id: Any = None
) -> None:
    """Observe a call a call limit refused (it never ran): a span, and the refusal counters.

    ``response_text`` is the breach text the model gets; it tells the total limit from a
    tool's own.
    """
    limit = "total" if response_text.startswith("Total tool call limit") else "per_tool"
    scope = _scope.get()
    conversation = _text(conversation_id) or scope.conversation_id
    run = _text(run_id) or scope.run_id
    error_type = "tool_calling.core.execution.limits.ToolCallLimitExceededException"
    tracer = _otel.tracer()
    if tracer is not None:
        attributes: dict[str, Any] = {
            sc.GEN_AI_OPERATION_NAME: sc.OPERATION_EXECUTE_TOOL,
            sc.GEN_AI_TOOL_NAME: call.name,
            sc.GEN_AI_TOOL_CALL_ID: call.id,
            sc.GEN_AI_TOOL_TYPE: sc.TOOL_TYPE_FUNCTION,
            sc.TOOL_CALLING_OUTCOME: "refused",
            sc.TOOL_CALLING_REFUSAL: "limit",
            sc.TOOL_CALLING_LIMIT: limit,
            sc.ERROR_TYPE: error_type,
        }
        if conversation:
            attributes[sc.GEN_AI_CONVERSATION_ID] = conversation
        if run:
            attributes[sc.TOOL_CALLING_RUN_ID] = run
        span = _otel.start_span(
            tracer, f"{sc.OPERATION_EXECUTE_TOOL} {call.name}", "internal", attributes
        )
        _otel.set_error(span, "ToolCallLimitExceededException")
        span.end()
    instruments = _instruments()
    if instruments is not None:
        instruments.limit_refusals.add(
            1, {sc.GEN_AI_TOOL_NAME: call.name, sc.TOOL_CALLING_LIMIT: limit}
        )
        instruments.tool_calls.add(
            1, {sc.GEN_AI_TOOL_NAME: call.name, sc.TOOL_CALLING_OUTCOME: "refused"}
        )
