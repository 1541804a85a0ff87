"""Celery tasks of tool_calling: ids in, a call into ``calls`` or ``runs``; nothing else.

``execute_tool_call`` runs one tool call (``calls.worker``), ``run_step`` advances a durable
run (``runs.steps``), ``sweep_tool_executions`` recovers lost calls and runs (run it every
30-60 s with Celery beat), ``purge_expired`` deletes what ``RETENTION`` no longer keeps (beat,
e.g. hourly). The database, not the broker, is the record: a task carries only a
row's id, and a redelivered or duplicated task finds its work claimed or done and does nothing.
"""

from __future__ import annotations

import os
from typing import Any

try:
    from celery import Task, shared_task
    from celery.exceptions import SoftTimeLimitExceeded, Terminated, WorkerLostError
    from celery.worker.request import Request
except ImportError as exc:  # pragma: no cover - exercised only without Celery installed
    raise ImportError(
        "tool_calling.tasks needs Celery to run tool calls on workers: pip install 'celery[redis]'"
    ) from exc

from django.db import close_old_connections

from tool_calling import retention
from tool_calling._connections import give_back
from tool_calling.calls import deadlines, sweeper, worker
from tool_calling.calls.dispatch import EXECUTE_TOOL_CALL, RUN_STEP
from tool_calling.runs import steps
from tool_calling.runs import sweeper as run_sweeper

__all__ = [
    "ToolCallRequest",
    "execute_tool_call",
    "run_step",
    "sweep_tool_executions",
    "worker_init",
]


class ToolCallRequest(Request):
    """Celery's request, with what the worker's main process does when a call's child dies.

    A hard time limit records the call ``timed_out`` (the pool replaces the child). A child
    that died otherwise (``WorkerLostError``, or terminated on purpose) ends its lease at once,
    before the message is redelivered, so the redelivery takes the call over (idempotent) or
    reports its outcome unknown without waiting for the lease to run out.
    """

    def _execution_id(self) -> int | None:
        args = self.args
        if args and isinstance(args[0], int):
            return args[0]
        return None

    def _worker(self) -> str:
        return worker.worker_name(self.hostname, self.worker_pid)

    def on_timeout(self, soft: bool, timeout: float) -> None:
        """Record a hard time limit as ``timed_out``, then let Celery handle it."""
        execution_id = self._execution_id()
        if not soft and execution_id is not None:
            worker.hard_time_limit_reached(execution_id, self._worker(), timeout)
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
            worker.worker_lost(execution_id, self._worker(), exc)
        return super().on_failure(
            exc_info, send_failed_event=send_failed_event, return_ok=return_ok
        )


class _ToolCallTask(Task):
    Request = ToolCallRequest


@shared_task(
    bind=True,
    base=_ToolCallTask,
    name=EXECUTE_TOOL_CALL,
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
)
def execute_tool_call(self: Any, tool_execution_id: int) -> None:
    """Run tool call ``tool_execution_id`` once: claim it, run it governed, record the outcome.

    Acknowledged late and requeued when its worker process dies: the claim, not the broker,
    decides whether the tool may run again (idempotent tools only).
    """
    # What Django does per request: drop a connection that failed or outlived CONN_MAX_AGE (a
    # worker keeps its connections between tasks with CELERY_DB_REUSE_MAX).
    close_old_connections()
    request = self.request
    try:
        worker.execute(
            tool_execution_id,
            task_id=request.id or "",
            worker=worker.worker_name(getattr(request, "hostname", None), os.getpid()),
            soft_timeout=SoftTimeLimitExceeded,
        )
    finally:
        # As at the end of a request: a pooled connection goes back for the pool's other threads
        # (Celery's own fixup keeps them for CELERY_DB_REUSE_MAX tasks).
        give_back()


@shared_task(name=RUN_STEP, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_step(run_id: str) -> None:
    """Advance durable run ``run_id`` until it ends or waits for tool calls (never blocks).

    A redelivered step finds the run's lease held (does nothing) or expired (takes over and
    continues from the database).
    """
    close_old_connections()
    try:
        steps.advance_run(run_id)
    finally:
        give_back()


def worker_init(sender: Any = None, **kwargs: Any) -> None:
    """Receiver of Celery's ``worker_init``: tell ``calls.deadlines`` the worker's pool.

    ``sender`` is the worker. On a pool where Celery enforces no time limits, each call's own
    are enforced by ``calls.deadlines`` with Celery's ``SoftTimeLimitExceeded``.
    """
    deadlines.set_pool(getattr(sender, "pool_cls", None), SoftTimeLimitExceeded)


@shared_task(name="tool_calling.sweep_tool_executions", ignore_result=True)
def sweep_tool_executions() -> dict[str, int]:
    """Re-dispatch lost calls, settle calls whose worker died, expire approvals, queue lost steps.

    Returns:
        How many calls were re-dispatched, settled, purged and denied as expired approvals.
    """
    report = sweeper.sweep().as_dict()
    run_sweeper.sweep_runs()
    return report


@shared_task(name="tool_calling.purge_expired", ignore_result=True)
def purge_expired() -> dict[str, int]:
    """Delete the run events, runs and audit rows past ``TOOL_CALLING["RETENTION"]``.

    Returns:
        How many rows of each kind were deleted.
    """
    return retention.purge_expired().as_dict()
