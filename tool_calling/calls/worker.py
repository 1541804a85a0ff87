"""What a Celery worker does with one tool call: claim it, run it governed, record how it ended.

``tool_calling.tasks.execute_tool_call`` calls :func:`execute`; its request class calls
:func:`worker_lost` and :func:`hard_time_limit_reached` from the worker's main process. The
database, not the broker, decides whether a delivery may run the tool: a redelivered or
duplicated task that finds its call claimed under a live lease, or finished, does nothing, and
a call whose worker died runs again only if its tool is idempotent (``calls.lifecycle``).
"""

from __future__ import annotations

import logging
import socket
from typing import Any

from django.db import close_old_connections
from django.db.models import F
from django.utils import timezone

from tool_calling import _notify, models, observability
from tool_calling._connections import give_back
from tool_calling._lease import Heartbeat
from tool_calling._prepared import PreparedQuery
from tool_calling.calls import deadlines, lifecycle
from tool_calling.calls.approvals import approved_as_recorded
from tool_calling.calls.dispatch import Dispatch, dispatch
from tool_calling.calls.failures import log_unexpected
from tool_calling.calls.gate import GateCall
from tool_calling.calls.retries import log_retry, retry_pause
from tool_calling.calls.running import CallOutcome, run_gated
from tool_calling.conf import hard_time_limit
from tool_calling.conf import settings as app_settings
from tool_calling.core.chat.messages import ToolCall
from tool_calling.core.execution.plan import ToolOutcome, ToolOutcomeKind
from tool_calling.core.tools.context import ToolContext
from tool_calling.observability import semconv
from tool_calling.registry import registry
from tool_calling.resolvers import CallRules, call_rules_of_call, installed_callback

__all__ = [
    "claim",
    "execute",
    "hard_time_limit_reached",
    "heartbeat",
    "timeout_text",
    "worker_lost",
    "worker_name",
]

logger = logging.getLogger("tool_calling.calls")

S = models.ExecutionStatus


def worker_name(hostname: str | None, pid: int | None) -> str:
    """How a worker process is named in the audit (``host (pid N)``)."""
    return f"{hostname or socket.gethostname()} (pid {pid})"


def timeout_text(name: str, timeout: int | None) -> str:
    """What the model is told about a call that hit its time limit."""
    return f"Tool {name!r} timed out after {timeout or app_settings.EXECUTION['TIMEOUT']} s."


_CALL = PreparedQuery(
    models.ToolExecution,
    lambda execution_id: (
        models.ToolExecution.objects.select_related("user")
        .annotate(rules=call_rules_of_call(), run_trace_context=F("run__trace_context"))
        .filter(pk=execution_id)
    ),
)
"""The call and its user, with the re-check of its tool's rules for that user at call time (S2)
and the run's trace (its calls join it, whoever's request sent them), in one query,
compiled once (building it took ten times longer than running it)."""


def claim(execution_id: int, *, task_id: str, worker: str) -> lifecycle.CallRef | None:
    """Claim the call for one attempt, atomically; ``None`` if this delivery must not run it.

    A ``pending`` call is claimed as attempt 1. A ``running`` call whose lease expired (its
    worker died) is taken over as the next attempt if its tool is idempotent and attempts are
    left, else settled (``unknown`` / ``failed``). A call claimed under a live lease, or
    finished, is left alone.
    """
    claimed = _claim(execution_id, task_id=task_id, worker=worker)
    return claimed[0] if claimed is not None else None


def _claim(
    execution_id: int, *, task_id: str, worker: str
) -> tuple[lifecycle.CallRef, models.ToolExecution] | None:
    """:func:`claim`, with the row as read for the claim (what the call runs with)."""
    for _ in range(3):  # read again when another claimant changed the row in between
        row: models.ToolExecution | None = _CALL.first(execution_id)  # type: ignore[assignment]
        if row is None:
            logger.warning("Tool call %s does not exist (deleted?); nothing to run", execution_id)
            return None
        status = row.status
        ref = lifecycle.CallRef.of(row)
        if status == S.RUNNING:
            lease = row.lease_expires_at
            if lease is not None and lease > timezone.now():
                logger.info(
                    "Tool call %s is already running (attempt %s); this delivery does nothing",
                    execution_id,
                    ref.attempt,
                )
                return None
            if lifecycle.settle_lost(ref, idempotent=row.idempotent) is not None:
                return None
        elif status != S.PENDING:
            logger.info("Tool call %s already ended (%s); nothing to run", execution_id, status)
            return None
        claimed = lifecycle.claim(ref, status, task_id=task_id, worker=worker)
        if claimed is not None:
            if claimed.attempt > 1:
                logger.warning(
                    "Tool call %s (%r): taking over as attempt %s after its worker stopped",
                    execution_id,
                    ref.tool_name,
                    claimed.attempt,
                )
            return claimed, row
    return None


def heartbeat(ref: lifecycle.CallRef) -> Heartbeat:
    """Renews the claimed call's lease while the tool runs (a lost claim is logged)."""

    def lost() -> None:
        logger.warning(
            "Tool call %s: attempt %s lost its claim while the tool runs; its result will be "
            "discarded",
            ref.execution_id,
            ref.attempt,
        )

    return Heartbeat(
        f"tool-call-lease-{ref.execution_id}", lifecycle.lease(), lambda: lifecycle.renew(ref), lost
    )


def _run(
    ref: lifecycle.CallRef, row: models.ToolExecution, is_soft_timeout: type[BaseException] | None
) -> CallOutcome:
    name = row.tool_name
    # The registry's tool, or an MCP server's tool as approved (a session of this worker).
    callback = installed_callback(name)
    if callback is None:
        text = f"Tool {name!r} is not installed on the worker that took the call."
        return CallOutcome(S.FAILED, ToolOutcome.failure(text))
    payload = row.payload or {}
    arguments = payload.get("arguments") or "{}"
    context = ToolContext(payload.get("context") or {})
    timeout = row.timeout or int(app_settings.EXECUTION["TIMEOUT"])
    # Celery's exception at the soft limit; on a pool without Celery's limits, the one this
    # worker raises in their place (the same class, recorded when the worker started).
    soft = is_soft_timeout or deadlines.soft_exception()

    def invoke() -> str:
        if soft is None or not deadlines.needed():
            return callback.call(arguments, context)
        # No Celery time limits on this pool (threads, gevent, solo): the call runs in a thread
        # of its own, given up on at its hard limit. Meanwhile this thread's database
        # connection goes back (a pooled one to its pool).
        give_back()
        return deadlines.run_with_deadline(
            lambda: callback.call(arguments, context),
            soft=timeout,
            grace=hard_time_limit(timeout) - timeout,
            soft_exception=soft,
            name=name,
        )

    rules = CallRules.of_column(getattr(row, "rules", None))
    gate_call = GateCall(
        ToolCall(row.tool_call_id, name, arguments),
        callback,
        row.user,
        context,
        # Bound to the exact arguments approved and to the tool's definition then: either
        # changed since, the call is refused.
        approved=approved_as_recorded(row) and _same_definition(row, rules),
        # A retry, or a run again after a crash, is the same call: counted once.
        count_quota=ref.attempt == 1,
        # Read with the call itself, at call time (S2).
        rules=rules,
    )
    # The gate admitted the installed tool itself: invoke runs it, within its time limit.
    _, result = run_gated(gate_call, lambda verdict: invoke())
    cause = result.outcome.cause
    if soft is not None and isinstance(cause, soft | deadlines.HardTimeLimitExceeded):
        text = timeout_text(name, row.timeout)
        logger.warning("Tool call %s (%r): %s", ref.execution_id, name, text)
        outcome = ToolOutcome(ToolOutcomeKind.TIMEOUT, text, traceback=result.outcome.traceback)
        return CallOutcome(S.TIMED_OUT, outcome, result.duration_ms)
    return result


def _same_definition(row: models.ToolExecution, rules: CallRules | None) -> bool:
    """Whether the tool is defined now as when the call's decision was asked for."""
    if not row.definition_sha256 or rules is None:
        return True  # unbound (an older row), or withdrawn: availability refuses it
    return rules.schema_hash == row.definition_sha256


def _observed(row: models.ToolExecution, ref: lifecycle.CallRef) -> observability.tool_call:
    """The ``execute_tool`` span of the call on this worker (the sender's trace continues)."""
    callback = registry.get(row.tool_name)  # no query; an MCP tool's span goes without one
    return observability.tool_call(
        ToolCall(row.tool_call_id, row.tool_name, (row.payload or {}).get("arguments") or "{}"),
        execution_mode=observability.CELERY,
        attempt=ref.attempt,
        description=callback.definition.description if callback is not None else "",
        approval=row.approval,
        conversation_id=row.conversation_id,
        run_id=row.run_id,
        trace_context=getattr(row, "run_trace_context", None) or "",
        approval_attributes=approval_attributes(row),
    )


def approval_attributes(row: models.ToolExecution) -> dict[str, Any]:
    """The ``tool_calling.approval.*`` span attributes of a call a person let run (else none).

    Roles, times and the decider's primary key; never the arguments.
    """
    if row.approval != models.ApprovalDecision.APPROVED or row.decided_at is None:
        return {}
    by_user = row.deciders == models.Deciders.USER
    attributes: dict[str, Any] = {
        semconv.TOOL_CALLING_APPROVAL_DECIDERS: row.deciders,
        semconv.TOOL_CALLING_APPROVAL_REQUESTED_AT: row.created_at.isoformat(),
        semconv.TOOL_CALLING_APPROVAL_DECIDED_AT: row.decided_at.isoformat(),
        semconv.TOOL_CALLING_APPROVAL_DECIDED_BY: "user" if by_user else "approver",
        semconv.TOOL_CALLING_APPROVAL_WAIT: (row.decided_at - row.created_at).total_seconds(),
    }
    if row.decided_by_id is not None:
        attributes[semconv.TOOL_CALLING_APPROVAL_DECIDER_ID] = str(row.decided_by_id)
    if row.confirmed_at is not None:
        attributes[semconv.TOOL_CALLING_APPROVAL_CONFIRMED_AT] = row.confirmed_at.isoformat()
    return attributes


def execute(
    execution_id: int,
    *,
    task_id: str,
    worker: str,
    soft_timeout: type[BaseException] | None = None,
) -> None:
    """Run call ``execution_id`` once: claim it, run it governed, record the outcome.

    Returns without running the tool when the call is finished or claimed by a live attempt.
    A ``SystemExit`` or ``KeyboardInterrupt`` of the tool (the pool terminating this process)
    settles the call as a dead worker's (run again if idempotent, else "outcome unknown"), then
    is raised again, so the process still stops as it was told to.

    Args:
        execution_id: The ``ToolExecution`` row.
        task_id: The Celery task id (recorded).
        worker: :func:`worker_name` of this process.
        soft_timeout: The exception Celery raises at the soft time limit.
    """
    found = _claim(execution_id, task_id=task_id, worker=worker)
    if found is None:
        return
    claimed, row = found
    beat = heartbeat(claimed)
    beat.start()
    try:
        with _observed(row, claimed) as observed:
            result = observed.ended(_run(claimed, row, soft_timeout))
    finally:
        beat.stop()
    cause = result.outcome.cause
    if cause is not None and not isinstance(cause, Exception):
        # The pool stops this process mid-call (SystemExit, KeyboardInterrupt): the tool did not
        # finish, and nobody knows what it did. Settled as a dead worker's call is: run again if
        # idempotent (by the redelivery, or the sweeper), else "outcome unknown"; never "failed"
        # with the exit code for a text.
        _interrupted(claimed, worker, idempotent=row.idempotent)
        raise cause
    if _retried(claimed, row, result):
        return
    error_id = log_unexpected(claimed.execution_id, claimed.tool_name, result.outcome)
    lifecycle.finish(
        claimed, result.status, result.outcome, duration_ms=result.duration_ms, error_id=error_id
    )
    _notify.call_ended(execution_id)


def _interrupted(ref: lifecycle.CallRef, worker: str, *, idempotent: bool) -> None:
    lifecycle.end_lease(ref.execution_id, worker)
    settled = lifecycle.settle_lost(ref, idempotent=idempotent)
    logger.warning(
        "Tool call %s (%r): attempt %s was interrupted by its process stopping; %s",
        ref.execution_id,
        ref.tool_name,
        ref.attempt,
        "settled" if settled else "left for another attempt",
    )
    if settled:
        _notify.call_ended(ref.execution_id)


def _retried(ref: lifecycle.CallRef, row: models.ToolExecution, result: CallOutcome) -> bool:
    """Send a call that failed transiently again after its backoff, if its tool retries (R6)."""
    if result.status != S.FAILED:
        return False
    pause = retry_pause(ref.attempt, result.outcome, result.rules)
    if pause is None:
        return False
    if (
        lifecycle.retry(
            ref, result.outcome, earlier=row.attempts, duration_ms=result.duration_ms, pause=pause
        )
        is None
    ):
        return False
    log_retry(ref, result.outcome, pause)
    # A publish that fails clears dispatched_at: the sweeper sends it (at once, R3).
    dispatch(Dispatch.of(row, countdown=pause))
    return True


def hard_time_limit_reached(execution_id: int, worker: str, timeout: float) -> None:
    """Record a call its worker process was killed for at the hard time limit (``timed_out``)."""
    try:
        row = models.ToolExecution.objects.filter(pk=execution_id).values("tool_name", "timeout")
        found = row.first()
        if found is not None and lifecycle.kill(
            execution_id, worker, timeout_text(found["tool_name"], found["timeout"])
        ):
            logger.warning(
                "Tool call %s (%r) killed at its hard time limit (%s s)",
                execution_id,
                found["tool_name"],
                timeout,
            )
            _notify.call_ended(execution_id)
    except Exception:
        logger.exception("Could not record the hard time limit of tool call %s", execution_id)
    finally:
        close_old_connections()


def worker_lost(execution_id: int, worker: str, reason: Any) -> None:
    """End the lease of a call whose worker process died, before Celery redelivers it."""
    try:
        if lifecycle.end_lease(execution_id, worker):
            logger.warning(
                "Tool call %s: the worker process running it died (%s)", execution_id, reason
            )
    except Exception:
        logger.exception("Could not end the lease of tool call %s", execution_id)
    finally:
        close_old_connections()
