"""A governed call in the turn's own process: the gate, the audit, the tool and its retries.

``governance.GovernedToolCallingManager`` runs every call it keeps in-process through
:func:`run_inline`, as a worker runs its calls through ``calls.worker``: each attempt passes the
gate (``calls.gate``) and runs through the same helper (``calls.running.run_gated``); a call that
failed transiently runs again as its tool's retries say (``calls.retries.retry_pause``), here in
the turn's thread (a worker sends its call again instead). :func:`run_search_call` runs a
turn's ``tool_search``, the one call without a ``Tool`` row.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tool_calling import models, observability
from tool_calling.calls import lifecycle
from tool_calling.calls.failures import log_unexpected, with_error_id
from tool_calling.calls.gate import Confirmation, GateCall, Verdict, approval_refusal_text
from tool_calling.calls.retries import log_retry, retry_pause
from tool_calling.calls.running import CallOutcome, run_gated
from tool_calling.core.chat.messages import ToolCall
from tool_calling.core.execution.plan import ToolOutcome, ToolOutcomeKind
from tool_calling.core.tools.callback import ToolCallback, ToolExecutionException
from tool_calling.core.tools.context import ToolContext

__all__ = ["InlineScope", "run_inline", "run_search_call"]

logger = logging.getLogger("tool_calling.calls")

S = models.ExecutionStatus


@dataclass(frozen=True)
class InlineScope:
    """Whose turn a call belongs to, as its audit row records it."""

    user: Any = None
    """The user of the turn (``None`` without one)."""
    conversation_id: Any = None
    """The stored conversation of the turn."""
    assistant_message_id: int | None = None
    """The stored assistant message whose calls these are."""
    run_id: Any = None
    """The durable run whose calls these are."""
    approval_text: Callable[[str], str] = approval_refusal_text
    """What the model reads of a call that needs a person's approval (it cannot wait here)."""
    confirmation: Confirmation | None = None
    """The user's confirmation of a call, given when asked (over MCP): the gate lets the call
    it covers through (``GateCall.confirmed``), and its row records it."""

    @property
    def recorded(self) -> dict[str, Any]:
        """The audit row's fields of the scope (``calls.lifecycle`` keywords)."""
        return {
            "user": self.user,
            "conversation_id": self.conversation_id,
            "assistant_message_id": self.assistant_message_id,
            "run_id": self.run_id,
        }


def _arguments(call: ToolCall) -> str:
    raw = call.arguments
    return raw if raw and not raw.isspace() else "{}"


def run_inline(
    callback: ToolCallback,
    tool_call: ToolCall,
    tool_context: ToolContext,
    *,
    scope: InlineScope,
    tool: models.Tool | None,
) -> str:
    """Run one call in this process, governed and audited; its text, or raise its failure.

    Every attempt passes the gate first (the first one counts toward the quotas, a retry does
    not); a call it refuses is recorded and raises its refusal (a ``ToolFailure``, or the
    ``ToolArgumentsError`` of bad arguments), which the manager tells the model.

    Args:
        callback: The tool as the turn offers it.
        tool_call: The model's call.
        tool_context: The turn's tool context.
        scope: Whose turn it is.
        tool: The tool's row (the turn's snapshot), linked from the audit.

    Raises:
        BaseException: what the tool raised, or the refusal; the manager decides.
    """
    refs: list[lifecycle.CallRef] = []

    def start(verdict: Verdict) -> None:
        confirmed = verdict.confirmed
        decided = None
        if confirmed is not None:
            decided = lifecycle.confirmed_fields(
                confirmed.user,
                confirmed.at,
                confirmed.arguments_sha256,
                confirmed.definition_sha256,
                confirmed.basis,
            )
        refs.append(
            lifecycle.record_started(
                verdict.call,
                tool=tool,
                augmented=verdict.augmented,
                decided=decided,
                **scope.recorded,
            )
        )

    def run(verdict: Verdict) -> str:
        return verdict.callback.call(_arguments(verdict.call), tool_context)

    def attempt(first: bool) -> CallOutcome:
        # One execute_tool span per attempt, with the attempt's number (a retry's too).
        number = 1 if first else refs[-1].attempt
        observed_as = {
            "execution_mode": observability.INLINE,
            "description": callback.definition.description,
            "conversation_id": scope.conversation_id,
            "run_id": scope.run_id,
        }
        gate_call = GateCall(
            tool_call,
            callback,
            scope.user,
            tool_context,
            approval_text=scope.approval_text,
            count_quota=first,
            confirmed=scope.confirmation,
        )
        with observability.tool_call(tool_call, attempt=number, **observed_as) as observed:
            verdict, result = run_gated(gate_call, run, on_start=start if first else None)
            observed.ended(result)
        if not first and not verdict.admitted:
            logger.warning(
                "Tool call %s (%r): attempt %s was refused (%s)",
                refs[-1].execution_id,
                tool_call.name,
                number,
                verdict.refused_by.value if verdict.refused_by else "",
            )
        return result

    result = attempt(True)
    if not refs:  # the gate refused it: it never started
        lifecycle.record_refused(
            tool_call, result.text, tool=tool, outcome=result.outcome, **scope.recorded
        )
        raise result.outcome.as_exception()
    result = _retried(refs, result, attempt)
    error_id = log_unexpected(refs[-1].execution_id, tool_call.name, result.outcome)
    lifecycle.finish(
        refs[-1],
        result.status,
        result.outcome,
        duration_ms=result.duration_ms,
        keep=False,
        error_id=error_id,
    )
    if result.outcome.kind is not ToolOutcomeKind.OK:
        # What the tool raised, or a refusal: the manager decides. The error id travels on the
        # exception to the exception processor (S13).
        with_error_id(result.outcome, error_id)
        raised = result.outcome.exception
        if error_id and isinstance(raised, ToolExecutionException):
            raise raised
        raise result.outcome.as_exception()
    return result.text


def _retried(
    refs: list[lifecycle.CallRef],
    result: CallOutcome,
    attempt: Callable[[bool], CallOutcome],
) -> CallOutcome:
    """Run a call that failed transiently again, in this thread, as its tool says (R6).

    Each retry is the ``retry`` transition (the failed attempt kept in the audit), a pause,
    then ``claim`` as the next attempt; the gate is asked again before each.
    """
    earlier: list[dict[str, Any]] = []
    while result.status == S.FAILED:
        ref = refs[-1]
        pause = retry_pause(ref.attempt, result.outcome, result.rules)
        if pause is None:
            break
        recorded = lifecycle.retry(
            ref, result.outcome, earlier=earlier, duration_ms=result.duration_ms, pause=pause
        )
        if recorded is None:
            break
        earlier = recorded
        log_retry(ref, result.outcome, pause)
        time.sleep(pause)
        claimed = lifecycle.claim(ref, S.PENDING, task_id="", worker="in-process")
        if claimed is None:
            break
        refs.append(claimed)
        result = attempt(False)
    return result


def run_search_call(
    callback: ToolCallback,
    tool_call: ToolCall,
    tool_context: ToolContext,
    *,
    keep: bool,
    **scope: Any,
) -> tuple[lifecycle.CallRef, ToolOutcome]:
    """Run a turn's ``tool_search`` call in this process and audit it: its row and outcome.

    It has no ``Tool`` row and does not pass the gate: it only searches the tools the turn
    offers, and what it finds passes the gate when it is called. Recorded ``running``, then
    ``succeeded`` or ``failed`` (``keep``: the exact outcome stays in the working data, for a
    durable run's next stage).

    Args:
        callback: The search tool of the turn.
        tool_call: The model's call.
        tool_context: The turn's tool context.
        keep: Keep the exact outcome in the row's working data.
        **scope: ``user``, ``conversation_id``, ``assistant_message_id``, ``run_id``.
    """
    ref = lifecycle.record_started(tool_call, tool=None, **scope)
    started = time.monotonic()
    try:
        outcome = ToolOutcome.ok(callback.call(_arguments(tool_call), tool_context))
    except BaseException as exc:  # classified; the manager decides what the model sees
        outcome = ToolOutcome.from_exception(exc)
    status = S.SUCCEEDED if outcome.kind is ToolOutcomeKind.OK else S.FAILED
    duration = int((time.monotonic() - started) * 1000)
    lifecycle.finish(ref, status, outcome, duration_ms=duration, keep=keep)
    return ref, outcome
