"""Durable runs: the turn of a run, whose steps and calls run anywhere, is one ``invoke_agent``.

A run's first step reserves the turn span (its ids, under whoever sent the step) and stores them
on the run (:func:`resume_turn`); every step and tool call, on any worker, after any wait, makes
its spans children of it. The span itself is recorded once the run ended, by the process that
ended it (:func:`run_turn_ended`): from the first step's start to the run's end, with the usage
of all its model calls. So a backend shows the whole turn, not its first step.

The stored text is ``"<traceparent>;<parent span id>"`` (``_otel.reserve_span``). A bare
traceparent is a turn span a step already recorded: with a tracer other than the SDK's, which
cannot give a span reserved ids, the first step records its own span, as runs made before this
did.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from tool_calling.observability import _otel
from tool_calling.observability import semconv as sc
from tool_calling.observability._chat import _default_model, provider_name
from tool_calling.observability._scope import _error_type, _Restore, _scope, _text
from tool_calling.observability._turns import _Turn

_FAILED_STEPS_KEPT = 1000
# The error type of a step that raised, by run, until the run's failure is recorded right after
# (the step's exception is known where it escapes the step; the run is failed a moment later).
_failed_steps: dict[str, str] = {}


class run_step:
    """One step of a durable run: ``with run_step(run_id, step):`` around its work.

    Log records carry the run's id. The step joins the run's turn when it reads the run
    (:func:`resume_turn`); an exception that escapes the step is the error of the turn, if the
    run fails for it.
    """

    __slots__ = ("_restore", "_turn", "run_id", "step")

    def __init__(self, run_id: Any, step: int) -> None:
        self.run_id = _text(run_id)
        self.step = step
        self._turn: _Turn | None = None
        self._restore: list[_Restore] = []

    def __enter__(self) -> run_step:
        self._restore.append(_Restore(None, _scope.get().but(run_id=self.run_id, step=self)))
        return self

    def resume(self, stored: str, conversation_id: Any, store: Callable[[str], Any]) -> None:
        """Join the stored turn, or reserve it (the first step): see :func:`resume_turn`."""
        scope = _scope.get().but(conversation_id=_text(conversation_id))
        tracer = _otel.tracer()
        if tracer is None:
            self._restore.append(_Restore(None, scope))
            return
        if not stored:
            # The first step: the turn's ids, under whoever sent the step.
            stored = _otel.reserve_span(tracer, sc.OPERATION_INVOKE_AGENT)
            if stored:
                store(stored)
        parent = _otel.stored_parent(stored)
        if parent is not None:
            self._restore.append(_Restore(None, scope, parent))
            return
        # A tracer that cannot start a reserved span: the step records a turn span of its own.
        turn = _Turn(
            provider="",
            model="",
            conversation_id=_text(conversation_id),
            run_id=self.run_id,
            announce=False,
        )
        self._turn = turn
        self._restore.append(_Restore(turn.span, scope.but(turn=turn)))
        text = _otel.span_context_text(turn.span)
        if text:
            store(text)

    def __exit__(self, exc_type: Any, exc: BaseException | None, traceback: Any) -> None:
        while self._restore:
            self._restore.pop()()
        if self._turn is not None:
            self._turn.end(error=exc)
        if exc is not None and isinstance(exc, Exception):
            if len(_failed_steps) >= _FAILED_STEPS_KEPT:
                _failed_steps.pop(next(iter(_failed_steps)))
            _failed_steps[self.run_id] = _error_type(exc)


def resume_turn(stored: str, conversation_id: Any, store: Callable[[str], Any]) -> None:
    """Join the run's turn in the current :class:`run_step` (call it once the run was read).

    Args:
        stored: The run's stored trace context (``Run.trace_context``; blank: none yet).
        conversation_id: The run's conversation.
        store: Saves the turn's context when this step reserved it (none was stored).
    """
    step = _scope.get().step
    if step is not None:
        step.resume(stored, conversation_id, store)


def run_turn_ended(
    stored: str,
    *,
    run_id: Any,
    conversation_id: Any,
    started_at: datetime.datetime | None,
    finished_at: datetime.datetime | None,
    status: str,
    finish_reason: str = "",
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    model: Any = None,
) -> None:
    """Record a durable run's turn once the run ended: its ``invoke_agent`` span.

    The span starts when the first step did and ends with the run, with the ids its first step
    reserved, so the spans of every step and call are its children.

    Args:
        stored: The run's stored trace context (``Run.trace_context``).
        run_id: The run.
        conversation_id: Its conversation.
        started_at: When its first step started (``Run.started_at``).
        finished_at: When it ended (``Run.finished_at``).
        status: How it ended: ``succeeded``, ``failed`` or ``cancelled``.
        finish_reason: The model's last finish reason.
        input_tokens: The prompt tokens of all its model calls (``None``: none reported).
        output_tokens: The completion tokens of all its model calls.
        model: The chat model of the run (``gen_ai.provider.name``, ``gen_ai.request.model``).
    """
    run = _text(run_id)
    error_type = _failed_steps.pop(run, "")
    tracer = _otel.tracer()
    if tracer is None or not stored or started_at is None or finished_at is None:
        return
    attributes: dict[str, Any] = {sc.GEN_AI_OPERATION_NAME: sc.OPERATION_INVOKE_AGENT}
    if model is not None:
        attributes[sc.GEN_AI_PROVIDER_NAME] = provider_name(model)
        request_model = _default_model(model)
        if request_model:
            attributes[sc.GEN_AI_REQUEST_MODEL] = request_model
    if conversation_id:
        attributes[sc.GEN_AI_CONVERSATION_ID] = _text(conversation_id)
    attributes[sc.TOOL_CALLING_RUN_ID] = run
    if input_tokens is not None:
        attributes[sc.GEN_AI_USAGE_INPUT_TOKENS] = input_tokens
    if output_tokens is not None:
        attributes[sc.GEN_AI_USAGE_OUTPUT_TOKENS] = output_tokens
    if finish_reason:
        attributes[sc.GEN_AI_RESPONSE_FINISH_REASONS] = [finish_reason]
    span = _otel.start_reserved_span(
        tracer, sc.OPERATION_INVOKE_AGENT, stored, attributes, _nanoseconds(started_at)
    )
    if span is None:
        return  # a bare traceparent: its first step recorded the turn span
    if status == "failed":
        span.set_attribute(sc.ERROR_TYPE, error_type or sc.ERROR_TYPE_OTHER)
        _otel.set_error(span, error_type.rpartition(".")[2] or "failed")
    span.end(end_time=_nanoseconds(finished_at))


def _nanoseconds(moment: datetime.datetime) -> int:
    return int(moment.timestamp() * 1_000_000_000)
