"""How a durable run hears of its tool calls: receivers of ``tool_calling.signals``.

``ToolCallingConfig.ready()`` connects them. The code that ends a call or decides an approval
(``tool_calling.calls``) sends a signal and knows nothing of runs; here the run records the
event, goes back to ``running`` once no call waits for a person, and queues its next step when
the last call of its batch ended. When a run ended (``turn_finished``), its turn is recorded as
one span when something is traced (``observability.run_turn_ended``).
"""

from __future__ import annotations

import logging
from typing import Any

from tool_calling import models, observability, signals
from tool_calling.governance import chat_model
from tool_calling.runs import events, lifecycle

__all__ = [
    "connect",
    "on_approval_decided",
    "on_tool_call_finished",
    "on_tool_call_started",
    "on_turn_finished",
]

logger = logging.getLogger("tool_calling.runs")


def on_tool_call_started(
    sender: Any,
    *,
    execution_id: int,
    run_id: Any,
    tool_call_id: str,
    tool_name: str,
    attempt: int,
    **kwargs: Any,
) -> None:
    """Record ``tool_call_started`` in the call's run."""
    if run_id is None:
        return
    events.append(
        run_id,
        "tool_call_started",
        {
            "execution": execution_id,
            "tool_call_id": tool_call_id,
            "tool": tool_name,
            "attempt": attempt,
        },
    )


def on_tool_call_finished(
    sender: Any,
    *,
    execution_id: int,
    run_id: Any,
    assistant_message_id: int | None,
    tool_call_id: str,
    tool_name: str,
    status: str,
    is_error: bool,
    duration_ms: int | None,
    **kwargs: Any,
) -> None:
    """Record ``tool_call_ended``; queue the run's next step if the batch has ended."""
    if run_id is None:
        return
    events.append(
        run_id,
        "tool_call_ended",
        {
            "execution": execution_id,
            "tool_call_id": tool_call_id,
            "tool": tool_name,
            "status": status,
            "is_error": is_error,
            "duration_ms": duration_ms,
        },
    )
    if assistant_message_id is None:
        return
    running = (
        models.ToolExecution.objects.filter(
            run_id=run_id, assistant_message_id=assistant_message_id
        )
        .exclude(status__in=models.TERMINAL_STATUSES)
        .exists()
    )
    if not running:
        lifecycle.wake(run_id, assistant_message_id)


def on_approval_decided(
    sender: Any, *, execution: models.ToolExecution, decision: str, **kwargs: Any
) -> None:
    """Record ``approval_decided`` in the call's run; back to ``running`` when none waits."""
    run_id = execution.run_id
    if run_id is None:
        return
    lifecycle.resume(run_id)
    data: dict[str, Any] = {
        "execution": execution.pk,
        "tool_call_id": execution.tool_call_id,
        "tool": execution.tool_name,
        "decision": decision,
        "by": execution.confirmed_by_id if decision == "confirmed" else execution.decided_by_id,
    }
    for key in ("edited", "reason"):
        if key in kwargs:
            data[key] = kwargs[key]
    events.append(run_id, "approval_decided", data)


def on_turn_finished(sender: Any, *, run_id: Any, **kwargs: Any) -> None:
    """Record the ended run's turn span, with the usage of its model calls (when traced).

    The calls are those of the run's ``model_message`` events since it last started (a retried
    run's earlier attempt had its own turn).
    """
    if run_id is None or not observability.tracing_enabled():
        return
    run = (
        models.Run.objects.filter(pk=run_id)
        .values(
            "trace_context",
            "conversation_id",
            "started_at",
            "finished_at",
            "status",
            "finish_reason",
        )
        .first()
    )
    if run is None or not run["trace_context"] or run["started_at"] is None:
        return
    reported = models.RunEvent.objects.filter(
        run_id=run_id, kind="model_message", created_at__gte=run["started_at"]
    ).values_list("data", flat=True)
    totals: dict[str, int | None] = {"prompt_tokens": None, "completion_tokens": None}
    for data in reported:
        usage = data.get("usage") if isinstance(data, dict) else None
        for key in totals:
            count = usage.get(key) if isinstance(usage, dict) else None
            if isinstance(count, int) and not isinstance(count, bool):
                totals[key] = (totals[key] or 0) + count
    try:
        model = chat_model()
    except Exception:  # the turn is still recorded, without the model's names
        logger.warning("The chat model could not be made to name run %s's turn", run_id)
        model = None
    observability.run_turn_ended(
        run["trace_context"],
        run_id=run_id,
        conversation_id=run["conversation_id"],
        started_at=run["started_at"],
        finished_at=run["finished_at"],
        status=run["status"],
        finish_reason=run["finish_reason"],
        input_tokens=totals["prompt_tokens"],
        output_tokens=totals["completion_tokens"],
        model=model,
    )


def connect() -> None:
    """Connect the receivers (once; ``ToolCallingConfig.ready()`` calls it)."""
    signals.tool_call_started.connect(on_tool_call_started, dispatch_uid="tc_runs_started")
    signals.tool_call_finished.connect(on_tool_call_finished, dispatch_uid="tc_runs_finished")
    signals.approval_decided.connect(on_approval_decided, dispatch_uid="tc_runs_decided")
    signals.turn_finished.connect(
        on_turn_finished, sender=models.Run, dispatch_uid="tc_runs_turn_finished"
    )
