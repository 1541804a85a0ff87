"""Celery tasks of tool_calling: one task per tool call, and the sweeper of lost calls.

The database, not the broker, is the record of what was asked. A call is a ``ToolExecution``
row; its task carries only the row's id. The life of a row on a worker::

    PENDING ──claim──▶ RUNNING ──▶ SUCCEEDED | FAILED | REFUSED | TIMED_OUT
       │    (attempt+1, lease)  │
       │                        └─ lease expired (worker died):
       │                             idempotent, attempts left ─▶ RUNNING (attempt+1)
       │                             idempotent, no attempts left ─▶ FAILED
       │                             not idempotent ─▶ OUTCOME_UNKNOWN (never run twice)
       └─ the caller gave up before a worker started it ─▶ TIMED_OUT

A task claims its row with one conditional UPDATE, so a redelivered or duplicated task that
finds the row claimed (live lease) or finished returns without running the tool. While the tool
runs, a thread renews the lease; the result is written only if the row still belongs to this
attempt, so the late result of an attempt that was fenced off is discarded. The sweeper
(``tool_calling.sweep_tool_executions``, run periodically by Celery beat) sends again the calls
whose publishing failed or whose message was lost, and settles the calls whose lease expired.
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
from dataclasses import dataclass, field
from typing import Any

try:
    from celery import Task, current_task, shared_task
    from celery.exceptions import SoftTimeLimitExceeded, Terminated, WorkerLostError
    from celery.worker.request import Request
except ImportError as exc:  # pragma: no cover - exercised only without Celery installed
    raise ImportError(
        "tool_calling.tasks needs Celery to run tool calls on workers: pip install 'celery[redis]'"
    ) from exc

from django.db import close_old_connections, transaction
from django.db.models import Max, Q
from django.utils import timezone

from tool_calling import models
from tool_calling._lease import Heartbeat
from tool_calling.approvals import approved_as_recorded
from tool_calling.conf import hard_time_limit
from tool_calling.conf import settings as app_settings
from tool_calling.core.tools.context import ToolContext
from tool_calling.exceptions import ToolExecutionException
from tool_calling.governance import CallOutcome, audit_text, run_governed_call
from tool_calling.registry import registry

__all__ = [
    "UNKNOWN_OUTCOME_TEXT",
    "Claim",
    "ToolCallRequest",
    "claim",
    "dispatch",
    "dispatch_on_commit",
    "execute_tool_call",
    "in_worker_task",
    "record",
    "run_step",
    "sweep_tool_executions",
]

logger = logging.getLogger("tool_calling.tasks")

UNKNOWN_OUTCOME_TEXT = (
    "The outcome of this call is unknown: the worker running it stopped mid-call, and the tool "
    "is not idempotent, so it was not run again."
)
"""What the model is told about a call of a non-idempotent tool whose worker died."""

_SWEEP_BATCH = 500
"""Rows the sweeper handles per kind and run; the next run takes the rest."""

_FIELDS = (
    "id",
    "tool_name",
    "status",
    "attempt",
    "lease_expires_at",
    "idempotent",
    "timeout",
    "run_id",
    "tool_call_id",
)


def _execution_settings() -> dict[str, Any]:
    return dict(app_settings.EXECUTION)


def _lease() -> datetime.timedelta:
    return datetime.timedelta(seconds=int(app_settings.EXECUTION["LEASE_SECONDS"]))


def _timeout_text(name: str, timeout: int | None) -> str:
    return f"Tool {name!r} timed out after {timeout or app_settings.EXECUTION['TIMEOUT']} s."


# -- publishing ---------------------------------------------------------------------------------


def in_worker_task() -> bool:
    """Return whether the caller runs inside a task on a Celery worker (not eagerly)."""
    if not current_task:
        return False
    request = current_task.request
    return bool(request.id) and not request.is_eager and not request.called_directly


def dispatch(execution_id: int) -> bool:
    """Send the task of call ``execution_id`` to its queue, with its time limits.

    A failure to publish (the broker is down) is logged, not raised: the row stays ``PENDING``
    with ``dispatched_at`` unchanged, and the sweeper sends it again (R3).

    Returns:
        Whether the broker took the message.
    """
    row = (
        models.ToolExecution.objects.filter(pk=execution_id)
        .values("tool_name", "queue", "timeout")
        .first()
    )
    if row is None:
        return False
    timeout = row["timeout"] or int(app_settings.EXECUTION["TIMEOUT"])
    queue = row["queue"] or str(app_settings.EXECUTION["QUEUE"])
    try:
        result = execute_tool_call.apply_async(
            args=[execution_id],
            queue=queue,
            soft_time_limit=timeout,
            time_limit=hard_time_limit(timeout),
        )
    except Exception:
        logger.exception(
            "Could not send tool call %s (%r) to queue %r; the sweeper will send it again",
            execution_id,
            row["tool_name"],
            queue,
        )
        return False
    models.ToolExecution.objects.filter(pk=execution_id).update(dispatched_at=timezone.now())
    logger.debug("Sent tool call %s to queue %r as task %s", execution_id, queue, result.id)
    return True


def dispatch_on_commit(execution_id: int) -> None:
    """Send the call once the current transaction commits; never if it rolls back (R4)."""
    transaction.on_commit(lambda: dispatch(execution_id))


# -- claiming -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """One attempt's hold on a call: only this attempt may renew the lease or write the result."""

    execution_id: int
    """The ``ToolExecution`` row."""
    attempt: int
    """The attempt number this claim made (``ToolExecution.attempt``)."""
    started: dict[str, Any] | None = field(default=None, compare=False)
    """For a call of a durable run: what its ``tool_call_started`` event says."""


def _settle_lost(row: dict[str, Any], now: datetime.datetime) -> bool:
    """End a call whose worker died when it may not run again; False when it may.

    Only ever changes the row if it is still the same expired attempt (conditional UPDATE).
    """
    name = row["tool_name"]
    if not row["idempotent"]:
        status, text = models.ExecutionStatus.OUTCOME_UNKNOWN, UNKNOWN_OUTCOME_TEXT
    elif row["attempt"] >= int(app_settings.EXECUTION["MAX_ATTEMPTS"]):
        status = models.ExecutionStatus.FAILED
        text = (
            f"Tool {name!r} failed: the worker running it stopped mid-call "
            f"{row['attempt']} times, so it was not run again."
        )
    else:
        return False
    settled = (
        models.ToolExecution.objects.filter(
            pk=row["id"], status=models.ExecutionStatus.RUNNING, attempt=row["attempt"]
        )
        .filter(Q(lease_expires_at__lt=now) | Q(lease_expires_at=None))
        .update(
            status=status,
            result=audit_text(text, tool_name=name, field="result"),
            is_error=True,
            finished_at=now,
            payload={"response": text},
        )
    )
    if settled:
        logger.warning(
            "Tool call %s (%r): the worker of attempt %s stopped mid-call; ended %s",
            row["id"],
            name,
            row["attempt"],
            status,
        )
    return True


def claim(execution_id: int, *, task_id: str, worker: str) -> Claim | None:
    """Claim call ``execution_id`` for one attempt, atomically; ``None`` if it must not run.

    A ``PENDING`` row becomes ``RUNNING`` as attempt 1. A ``RUNNING`` row whose lease expired
    (its worker died) is taken over as the next attempt if its tool is idempotent and attempts
    are left, else settled (``OUTCOME_UNKNOWN`` / ``FAILED``). A row claimed under a live lease,
    or finished, is left alone: a redelivered or duplicated task never runs the tool again.
    """
    for _ in range(3):  # re-read when another claimant changed the row in between
        row = models.ToolExecution.objects.filter(pk=execution_id).values(*_FIELDS).first()
        if row is None:
            logger.warning("Tool call %s does not exist (deleted?); nothing to run", execution_id)
            return None
        now = timezone.now()
        status = row["status"]
        if status == models.ExecutionStatus.PENDING:
            condition = Q(status=status)
        elif status == models.ExecutionStatus.RUNNING:
            lease = row["lease_expires_at"]
            if lease is not None and lease > now:
                logger.info(
                    "Tool call %s is already running (attempt %s); this delivery does nothing",
                    execution_id,
                    row["attempt"],
                )
                return None
            if _settle_lost(row, now):
                return None
            condition = Q(status=status) & (Q(lease_expires_at__lt=now) | Q(lease_expires_at=None))
        else:
            logger.info("Tool call %s already ended (%s); nothing to run", execution_id, status)
            return None
        attempt = row["attempt"] + 1
        claimed = models.ToolExecution.objects.filter(
            condition, pk=execution_id, attempt=row["attempt"]
        ).update(
            status=models.ExecutionStatus.RUNNING,
            attempt=attempt,
            lease_expires_at=now + _lease(),
            task_id=task_id[:255],
            worker=worker[:255],
            started_at=now,
        )
        if claimed:
            if attempt > 1:
                logger.warning(
                    "Tool call %s (%r): taking over as attempt %s after its worker stopped",
                    execution_id,
                    row["tool_name"],
                    attempt,
                )
            started = None
            if row["run_id"] is not None:
                started = {
                    "run_id": row["run_id"],
                    "tool_call_id": row["tool_call_id"],
                    "tool": row["tool_name"],
                    "attempt": attempt,
                }
            return Claim(execution_id, attempt, started)
    return None


def record(claimed: Claim, outcome: CallOutcome, tool_name: str) -> bool:
    """Write the outcome if the row still belongs to ``claimed``'s attempt (fencing, R5).

    Returns:
        False when another attempt took the call over (or it was settled) meanwhile: the late
        result is discarded and logged.
    """
    fields = outcome.audit_fields(tool_name)
    written = models.ToolExecution.objects.filter(
        pk=claimed.execution_id, status=models.ExecutionStatus.RUNNING, attempt=claimed.attempt
    ).update(lease_expires_at=None, payload={"response": outcome.text}, **fields)
    if not written:
        logger.warning(
            "Discarded the late result (%s) of attempt %s of tool call %s (%r): another attempt "
            "took the call over, or it was settled, meanwhile",
            outcome.status,
            claimed.attempt,
            claimed.execution_id,
            tool_name,
        )
    return bool(written)


def _heartbeat(claimed: Claim) -> Heartbeat:
    """Renews the claimed call's lease while the tool runs (a lost claim is logged)."""
    lease = _lease()

    def renew() -> bool:
        return bool(
            models.ToolExecution.objects.filter(
                pk=claimed.execution_id,
                status=models.ExecutionStatus.RUNNING,
                attempt=claimed.attempt,
            ).update(lease_expires_at=timezone.now() + lease)
        )

    def lost() -> None:
        logger.warning(
            "Tool call %s: attempt %s lost its claim while the tool runs; its result will be "
            "discarded",
            claimed.execution_id,
            claimed.attempt,
        )

    return Heartbeat(f"tool-calling-lease-{claimed.execution_id}", lease, renew, lost)


def _run(claim: Claim) -> tuple[CallOutcome, str]:
    """Run the claimed call through governance; returns the outcome and the tool's name."""
    row = models.ToolExecution.objects.select_related("user").get(pk=claim.execution_id)
    name = row.tool_name
    payload = row.payload or {}
    callback = registry.get(name)
    if callback is None:
        text = f"Tool {name!r} is not installed on the worker that took the call."
        return CallOutcome(models.ExecutionStatus.FAILED, text, True), name
    arguments = payload.get("arguments") or "{}"
    context = ToolContext(payload.get("context") or {})
    outcome = run_governed_call(
        name,
        row.user,
        lambda: callback.call(arguments, context),
        # Bound to the exact arguments approved: changed since, the call is refused.
        approved=approved_as_recorded(row),
    )
    failure = outcome.exception
    if isinstance(failure, ToolExecutionException):
        failure = failure.cause
    if isinstance(failure, SoftTimeLimitExceeded):
        text = _timeout_text(name, row.timeout)
        logger.warning("Tool call %s (%r): %s", claim.execution_id, name, text)
        outcome = CallOutcome(
            models.ExecutionStatus.TIMED_OUT,
            text,
            True,
            error=outcome.error,
            duration_ms=outcome.duration_ms,
        )
    return outcome, name


def _worker_name(hostname: str | None, pid: int | None) -> str:
    return f"{hostname or socket.gethostname()} (pid {pid})"


class ToolCallRequest(Request):
    """Celery's request, with what the worker's main process does when a call's child dies.

    A hard time limit records the call ``TIMED_OUT`` (the pool replaces the child). A child
    that died otherwise (``WorkerLostError``, or terminated on purpose) ends its lease at once,
    before the message is redelivered, so the redelivery takes the call over (idempotent) or
    reports its outcome unknown without waiting for the lease to run out.
    """

    def _execution_id(self) -> int | None:
        args = self.args
        if args and isinstance(args[0], int):
            return args[0]
        return None

    def _held(self, execution_id: int) -> Any:
        return models.ToolExecution.objects.filter(
            pk=execution_id,
            status=models.ExecutionStatus.RUNNING,
            worker=_worker_name(self.hostname, self.worker_pid)[:255],
        )

    def on_timeout(self, soft: bool, timeout: float) -> None:
        """Record a hard time limit as ``TIMED_OUT``, then let Celery handle it."""
        execution_id = self._execution_id()
        if not soft and execution_id is not None:
            try:
                row = self._held(execution_id).values("tool_name", "timeout").first()
                if row is not None:
                    text = _timeout_text(row["tool_name"], row["timeout"])
                    self._held(execution_id).update(
                        status=models.ExecutionStatus.TIMED_OUT,
                        result=audit_text(text, tool_name=row["tool_name"], field="result"),
                        is_error=True,
                        finished_at=timezone.now(),
                        lease_expires_at=None,
                        payload={"response": text},
                    )
                    logger.warning(
                        "Tool call %s (%r) killed at its hard time limit (%s s)",
                        execution_id,
                        row["tool_name"],
                        timeout,
                    )
            except Exception:
                logger.exception(
                    "Could not record the hard time limit of tool call %s", execution_id
                )
            finally:
                close_old_connections()
        super().on_timeout(soft, timeout)

    def on_failure(
        self, exc_info: Any, send_failed_event: bool = True, return_ok: bool = False
    ) -> Any:
        """End the lease of a call whose child process died, then let Celery requeue it."""
        exc = getattr(exc_info, "exception", None)
        exc = getattr(exc, "exc", exc)  # ExceptionWithTraceback
        execution_id = self._execution_id()
        # Terminated: the child was killed on purpose (revoke with terminate, or the worker's
        # cancel-on-connection-loss); dead all the same.
        if isinstance(exc, WorkerLostError | Terminated | SystemExit) and execution_id is not None:
            try:
                ended = self._held(execution_id).update(lease_expires_at=timezone.now())
                if ended:
                    logger.warning(
                        "Tool call %s: the worker process running it died (%s)", execution_id, exc
                    )
            except Exception:
                logger.exception("Could not end the lease of tool call %s", execution_id)
            finally:
                close_old_connections()
        return super().on_failure(
            exc_info, send_failed_event=send_failed_event, return_ok=return_ok
        )


class _ToolCallTask(Task):
    Request = ToolCallRequest


@shared_task(
    bind=True,
    base=_ToolCallTask,
    name="tool_calling.execute_tool_call",
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
)
def execute_tool_call(self: Any, tool_execution_id: int) -> None:
    """Run tool call ``tool_execution_id`` once: claim it, run it governed, record the outcome.

    Returns without running the tool when the row is finished or claimed by a live attempt.
    The task is acknowledged late and requeued when its worker process dies: the claim, not
    the broker, decides whether the tool may run again (idempotent tools only).
    """
    request = self.request
    worker = _worker_name(getattr(request, "hostname", None), os.getpid())
    claimed = claim(tool_execution_id, task_id=request.id or "", worker=worker)
    if claimed is None:
        _call_ended(tool_execution_id, report=False)
        return
    if claimed.started is not None:
        _call_started(tool_execution_id, claimed.started)
    heartbeat = _heartbeat(claimed)
    heartbeat.start()
    try:
        outcome, name = _run(claimed)
    finally:
        heartbeat.stop()
    record(claimed, outcome, name)
    _call_ended(tool_execution_id, in_run=claimed.started is not None)
    failure = outcome.exception
    if isinstance(failure, ToolExecutionException):
        failure = failure.cause
    if failure is not None and not isinstance(failure, Exception):
        # SystemExit or KeyboardInterrupt (the pool terminating this process): recorded, and
        # the process still stops as it was told to.
        raise failure


def _call_started(execution_id: int, started: dict[str, Any]) -> None:
    """Report the start in the durable run's events (best effort: the row is the record)."""
    from tool_calling.runs import tool_call_started

    try:
        tool_call_started(execution_id, **started)
    except Exception:
        logger.exception("Could not record the start of tool call %s", execution_id)


def _call_ended(execution_id: int, *, report: bool = True, in_run: bool | None = None) -> None:
    """A call ended: wake callers waiting in-process, and queue a durable run's next step.

    ``in_run`` says whether the call belongs to a durable run, when the caller knows.
    """
    from tool_calling import _notify
    from tool_calling.runs import tool_call_finished

    _notify.call_ended(execution_id)
    if in_run is False:
        return
    try:
        tool_call_finished(execution_id, report=report)
    except Exception:  # the sweeper queues the step later
        logger.exception("Could not queue the next step after tool call %s", execution_id)


@shared_task(
    name="tool_calling.run_step", acks_late=True, reject_on_worker_lost=True, ignore_result=True
)
def run_step(run_id: str) -> None:
    """Advance durable run ``run_id`` until it ends or waits for tool calls (never blocks).

    A redelivered step finds the run's lease held (does nothing) or expired (takes over and
    continues from the database).
    """
    from tool_calling.runs import advance_run

    advance_run(run_id)


# -- the sweeper --------------------------------------------------------------------------------


@shared_task(name="tool_calling.sweep_tool_executions", ignore_result=True)
def sweep_tool_executions() -> dict[str, int]:
    """Re-dispatch lost calls, settle calls whose worker died, and drop delivered working data.

    Run it every 30-60 s with Celery beat. Sends again the ``PENDING`` calls that never reached
    the broker (or were sent ``REDISPATCH_AFTER`` seconds ago and never started); for
    ``RUNNING`` calls whose lease expired, sends again the idempotent ones with attempts left
    and ends the others (``OUTCOME_UNKNOWN`` or ``FAILED``). Every change is conditional, so
    two sweepers, or a sweeper and a worker, never act twice on one call.

    Returns:
        How many calls were re-dispatched, settled, purged and denied as expired approvals.
    """
    execution = _execution_settings()
    now = timezone.now()
    lease = _lease()
    counts = {"redispatched": 0, "settled": 0, "purged": 0, "expired": 0}
    on_workers = models.ToolExecution.objects.filter(mode=models.ExecutionMode.CELERY)

    # Committed calls whose publish failed (or whose on_commit never ran: the process died).
    # The lease's length of grace lets a just-committed call's own publish happen first.
    lost = on_workers.filter(status=models.ExecutionStatus.PENDING).filter(
        Q(dispatched_at=None, created_at__lt=now - lease)
        | Q(dispatched_at__lt=now - datetime.timedelta(seconds=int(execution["REDISPATCH_AFTER"])))
    )
    for execution_id in lost.order_by("pk").values_list("pk", flat=True)[:_SWEEP_BATCH]:
        counts["redispatched"] += dispatch(execution_id)

    expired = on_workers.filter(status=models.ExecutionStatus.RUNNING).filter(
        Q(lease_expires_at__lt=now) | Q(lease_expires_at=None)
    )
    for row in expired.order_by("pk").values(*_FIELDS, "dispatched_at")[:_SWEEP_BATCH]:
        if _settle_lost(row, now):
            counts["settled"] += 1
            continue
        sent = row["dispatched_at"]
        # One message per lease period is enough: the first delivery takes the call over.
        if sent is None or sent < now - lease:
            counts["redispatched"] += dispatch(row["id"])

    # The exact results (not redacted) of calls nobody is waiting for any more.
    longest = max(
        int(execution["TIMEOUT"]),
        models.Tool.objects.aggregate(longest=Max("timeout"))["longest"] or 0,
    )
    wait = hard_time_limit(longest) + int(execution["WAIT_MARGIN"])
    # Counted from the end of the call: an approved call may start long after it was made.
    before = now - datetime.timedelta(seconds=wait)
    stale = (
        on_workers.filter(status__in=models.TERMINAL_STATUSES)
        .filter(Q(finished_at__lt=before) | Q(finished_at=None, created_at__lt=before))
        .exclude(payload={})
    )
    counts["purged"] = stale.update(payload={})
    from tool_calling.approvals import expire_approvals
    from tool_calling.runs import sweep_runs

    # Calls nobody approved in time are denied, and their runs go on.
    counts["expired"] = expire_approvals(now)

    # Durable runs whose next step was lost (publish failed, message lost with the broker).
    steps = sweep_runs()
    if steps:
        logger.info("Swept durable runs: queued %s steps", steps)
    if counts["redispatched"] or counts["settled"] or counts["expired"]:
        logger.info("Swept tool calls: %s", counts)
    return counts
