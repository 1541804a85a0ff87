"""Where governed tool calls run: in-process, or on Celery workers that the caller waits for.

``GovernedToolCallingManager`` routes each call by its tool's execution mode (the tool's own,
set in the admin, else ``TOOL_CALLING["EXECUTION"]["MODE"]``): a batch with calls for workers
runs through a :class:`RoutingToolCallExecutor`, which sends those calls to a
:class:`CeleryToolExecutor` and runs the others in-process meanwhile. A script can also hand a
``CeleryToolExecutor`` to any ``DefaultToolCallingManager``; the workers still apply governance.

The database is the record of a call on a worker: the executor creates its ``ToolExecution``
row (``PENDING``, with the exact arguments and tool context in its working data), sends a task
carrying only the row's id once the row is committed, and reads the outcome back from the row.
"""

from __future__ import annotations

import contextvars
import datetime
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeoutError
from typing import Any

from django.db import transaction
from django.utils import timezone

from tool_calling import _notify, models
from tool_calling.conf import hard_time_limit
from tool_calling.conf import settings as app_settings
from tool_calling.core.chat.messages import ToolCall
from tool_calling.core.tools.callback import ToolCallback
from tool_calling.core.tools.context import ToolContext
from tool_calling.exceptions import ToolArgumentsError, ToolCallingError, ToolFailure
from tool_calling.governance import ToolNotAvailableError, _assistant_message_id, audit_text

__all__ = [
    "CeleryToolExecutor",
    "RemoteToolError",
    "RoutingToolCallExecutor",
    "ToolCallTimeoutError",
    "execution_mode",
    "outcome_of",
    "record_call",
]

logger = logging.getLogger("tool_calling.execution")

_ARGUMENTS_ERROR = f"{ToolArgumentsError.__module__}.{ToolArgumentsError.__qualname__}"

# Polling of the rows a caller waits for: fast at first (most tools take milliseconds), then
# backing off to a few reads a second.
_POLL_FIRST = 0.01
_POLL_FACTOR = 1.5
_POLL_MAX = 0.25


class ToolCallTimeoutError(ToolFailure, TimeoutError):
    """A call sent to a worker did not end within its time limit plus the wait margin.

    The model is told so as an error response; the call may still finish later, and its row
    then records what happened.
    """

    def __init__(self, message: str, *, execution_id: int) -> None:
        super().__init__(message)
        self.execution_id = execution_id
        """The ``ToolExecution`` row of the call."""


class RemoteToolError(ToolCallingError):
    """A tool raised on a worker; the message is what the model is told.

    Raised by the future of a call on a worker, so that the manager's exception processor
    decides what the model sees (``THROW_EXCEPTION_ON_ERROR`` applies as for in-process calls).
    The traceback is in the row's ``error``.
    """

    def __init__(self, message: str, *, error_type: str, execution_id: int) -> None:
        super().__init__(message)
        self.error_type = error_type
        """``module.QualifiedName`` of the exception the tool raised."""
        self.execution_id = execution_id
        """The ``ToolExecution`` row of the call."""


def execution_mode(tool: models.Tool | None) -> str:
    """Return where calls of ``tool`` run: its own mode, else ``EXECUTION["MODE"]``."""
    if tool is not None and tool.execution_mode:
        return str(tool.execution_mode)
    return str(app_settings.EXECUTION["MODE"])


def _exception_class(error_type: str) -> type[BaseException] | None:
    """Return the exception class ``module.QualifiedName`` if its module is imported already."""
    import sys

    module_name, _, qualname = error_type.rpartition(".")
    obj: Any = sys.modules.get(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return obj if isinstance(obj, type) and issubclass(obj, BaseException) else None


def outcome_of(row: Mapping[str, Any]) -> str:
    """Return the text of a finished call, or raise what the manager turns into its response.

    ``row`` holds the ``ToolExecution`` fields ``id``, ``tool_name``, ``status``, ``result``,
    ``error_type`` and ``payload``. The text comes from the working data (exact, not
    redacted) and falls back to the audited ``result``.

    Raises:
        ToolNotAvailableError: the worker refused the call (governance, S2).
        ToolArgumentsError: the arguments failed the tool's schema.
        ToolFailure: the call failed in a way the model is told as is (the tool raised
            ``ToolFailure``, timed out, or its outcome is unknown).
        RemoteToolError: the tool raised any other exception.
    """
    payload = row.get("payload") or {}
    text = payload.get("response")
    if not isinstance(text, str):
        text = row.get("result") or ""
    status = row["status"]
    if status == models.ExecutionStatus.SUCCEEDED:
        return text
    if status == models.ExecutionStatus.REFUSED:
        raise ToolNotAvailableError(text)
    error_type = row.get("error_type") or ""
    if status == models.ExecutionStatus.FAILED and error_type:
        if error_type == _ARGUMENTS_ERROR:
            raise ToolArgumentsError(row["tool_name"], text)
        cls = _exception_class(error_type)
        if cls is None or not issubclass(cls, ToolFailure):
            raise RemoteToolError(text, error_type=error_type, execution_id=row["id"])
    raise ToolFailure(text)


def _wait_seconds(timeout: int) -> int:
    return hard_time_limit(timeout) + int(app_settings.EXECUTION["WAIT_MARGIN"])


class _ExecutionFuture(Future[str]):
    """The future of a call on a worker; it completes while its caller waits on it.

    The manager waits on its futures one by one, in call order, so each wait reads every row
    of the batch still outstanding and completes all that finished: a batch ends about when its
    slowest call does, with one query per poll whatever its size.
    """

    def __init__(self, waiter: _Waiter, execution_id: int, tool_name: str, wait: int) -> None:
        super().__init__()
        self.waiter = waiter
        self.execution_id = execution_id
        self.tool_name = tool_name
        self.wait_seconds = wait
        self.deadline = time.monotonic() + wait

    def result(self, timeout: float | None = None) -> str:
        """Wait for the call (at most ``timeout`` seconds more) and return its text."""
        if not self.done():
            self.waiter.wait_for(self, timeout)
        return super().result(0)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Wait for the call (at most ``timeout`` seconds more) and return its exception."""
        if not self.done():
            self.waiter.wait_for(self, timeout)
        return super().exception(0)


class _Waiter:
    """Reads the rows of outstanding calls until they end, completing their futures."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._outstanding: dict[int, _ExecutionFuture] = {}

    def add(self, future: _ExecutionFuture) -> None:
        with self._lock:
            self._outstanding[future.execution_id] = future

    def wait_for(self, future: _ExecutionFuture, timeout: float | None) -> None:
        limit = None if timeout is None else time.monotonic() + timeout
        pause = _POLL_FIRST
        wakeups = _notify.listener()
        with self._lock:
            while not future.done():
                seen = wakeups.count if wakeups is not None else 0
                self._poll()
                if future.done():
                    return
                now = time.monotonic()
                if now >= future.deadline:
                    self._give_up(future)
                    return
                if limit is not None and now >= limit:
                    raise FutureTimeoutError()
                ends = [future.deadline] + ([limit] if limit is not None else [])
                delay = max(0.0, min(pause, min(ends) - now))
                if wakeups is not None:
                    # Woken as soon as a worker reports a call's end; the poll stays the record.
                    wakeups.wait(seen, delay)
                else:
                    time.sleep(delay)
                pause = min(pause * _POLL_FACTOR, _POLL_MAX)

    def _poll(self) -> None:
        ids = list(self._outstanding)
        if not ids:
            return
        rows = list(
            models.ToolExecution.objects.filter(
                pk__in=ids, status__in=models.TERMINAL_STATUSES
            ).values("id", "tool_name", "status", "result", "error_type", "payload")
        )
        if not rows:
            return
        # The exact text may hold what the audit redacts: keep it no longer than needed.
        models.ToolExecution.objects.filter(pk__in=[row["id"] for row in rows]).update(payload={})
        for row in rows:
            self._complete(self._outstanding.pop(row["id"]), row)

    @staticmethod
    def _complete(future: _ExecutionFuture, row: Mapping[str, Any]) -> None:
        try:
            future.set_result(outcome_of(row))
        except BaseException as exc:  # the future carries it to the manager
            future.set_exception(exc)

    def _give_up(self, future: _ExecutionFuture) -> None:
        """The call is past its deadline: never start it now, and tell the model."""
        self._outstanding.pop(future.execution_id, None)
        name = future.tool_name
        text = f"Tool {name!r} did not start within {future.wait_seconds} s: no worker took it."
        now = timezone.now()
        withdrawn = models.ToolExecution.objects.filter(
            pk=future.execution_id, status=models.ExecutionStatus.PENDING
        ).update(
            status=models.ExecutionStatus.TIMED_OUT,
            result=audit_text(text, tool_name=name, field="result"),
            is_error=True,
            finished_at=now,
            payload={},
        )
        if withdrawn:
            logger.warning(
                "Tool call %s (%r) was never started by a worker", future.execution_id, name
            )
            future.set_exception(ToolCallTimeoutError(text, execution_id=future.execution_id))
            return
        row = (
            models.ToolExecution.objects.filter(pk=future.execution_id)
            .values("id", "tool_name", "status", "result", "error_type", "payload")
            .first()
        )
        if row is not None and row["status"] in models.TERMINAL_STATUSES:
            models.ToolExecution.objects.filter(pk=future.execution_id).update(payload={})
            self._complete(future, row)
            return
        logger.warning(
            "Tool call %s (%r) still runs on a worker after %s s; the model is told it did not "
            "finish",
            future.execution_id,
            name,
            future.wait_seconds,
        )
        future.set_exception(
            ToolCallTimeoutError(
                f"Tool {name!r} did not finish within {future.wait_seconds} s on a worker.",
                execution_id=future.execution_id,
            )
        )


def _json_context(tool_context: Mapping[str, Any], tool_name: str) -> dict[str, Any]:
    context = dict(tool_context)
    try:
        json.dumps(context)
    except (TypeError, ValueError) as exc:
        raise ToolCallingError(
            f"Tool {tool_name!r} runs on a Celery worker, so its tool context must be JSON: "
            f"{exc}. Pass ids (user_id, tenant_id) rather than objects."
        ) from exc
    return context


def record_call(
    tool_call: ToolCall,
    tool_context: Mapping[str, Any],
    *,
    user: Any = None,
    conversation_id: Any = None,
    assistant_message_id: int | None = None,
    run_id: Any = None,
    tool: models.Tool | None = None,
    needs_approval: bool = False,
) -> models.ToolExecution:
    """Record a call for a worker: a ``PENDING`` row with the exact arguments and context.

    The caller sends it with ``tool_calling.tasks.dispatch_on_commit(row.pk)``. Shared by the
    waiting executor (:class:`CeleryToolExecutor`) and durable runs (``tool_calling.runs``).
    With ``needs_approval`` the row waits (``AWAITING_APPROVAL``) until a person approves it
    (``tool_calling.approvals``), which sends it, or denies it; it expires after
    ``APPROVALS["EXPIRE_AFTER"]`` seconds.

    Raises:
        ToolCallingError: the tool context is not JSON.
    """
    name = tool_call.name
    if tool is None:
        tool = models.Tool.objects.filter(name=name).first()
    timeout = int(
        tool.timeout if tool is not None and tool.timeout else app_settings.EXECUTION["TIMEOUT"]
    )
    arguments = tool_call.arguments
    return models.ToolExecution.objects.create(
        conversation_id=conversation_id,
        run_id=run_id,
        assistant_message_id=assistant_message_id,
        tool_call_id=tool_call.id[:200],
        tool=tool,
        tool_name=name[:200],
        arguments=audit_text(arguments, tool_name=name, field="arguments"),
        user=user if getattr(user, "is_authenticated", False) else None,
        status=(
            models.ExecutionStatus.AWAITING_APPROVAL
            if needs_approval
            else models.ExecutionStatus.PENDING
        ),
        approval=(
            models.ApprovalDecision.PENDING
            if needs_approval
            else models.ApprovalDecision.NOT_REQUIRED
        ),
        approval_expires_at=_approval_deadline() if needs_approval else None,
        mode=models.ExecutionMode.CELERY,
        queue=(tool.queue if tool is not None and tool.queue else "")
        or str(app_settings.EXECUTION["QUEUE"]),
        timeout=timeout,
        idempotent=bool(tool is not None and tool.idempotent),
        payload={
            "arguments": arguments if arguments and not arguments.isspace() else "{}",
            "context": _json_context(tool_context, name),
        },
    )


def _approval_deadline() -> datetime.datetime | None:
    seconds = app_settings.APPROVALS["EXPIRE_AFTER"]
    return None if seconds is None else timezone.now() + datetime.timedelta(seconds=int(seconds))


class CeleryToolExecutor:
    """A ``ToolCallExecutor`` that runs each call on a Celery worker and waits for it.

    Each call becomes a ``ToolExecution`` row (``PENDING``) and, once the row is committed, a
    ``tool_calling.execute_tool_call`` task carrying only its id, sent to the tool's queue with
    the tool's time limit. The future completes when the row is finished; its text and error
    come from the row. A call that has not ended ``timeout + TIMEOUT_GRACE + WAIT_MARGIN``
    seconds after it was sent fails with :class:`ToolCallTimeoutError` (never started: it is
    withdrawn, so it will not run later).

    Args:
        user: The user of the turn: the worker re-checks that this user may use the tool.
        conversation_id: Recorded in the audit.
        tools: ``Tool`` rows by name (the turn's snapshot); others are read when called.
    """

    def __init__(
        self,
        *,
        user: Any = None,
        conversation_id: Any = None,
        tools: Mapping[str, models.Tool] | None = None,
    ) -> None:
        self.user = user if getattr(user, "is_authenticated", False) else None
        self.conversation_id = conversation_id
        self.tools = tools if tools is not None else {}
        self._waiter = _Waiter()

    def submit_tool_call(
        self, callback: ToolCallback, tool_call: ToolCall, tool_context: ToolContext
    ) -> Future[str]:
        """Record the call, send it to a worker once committed, and return its future.

        Raises:
            ToolCallingError: called inside a database transaction (a worker could not see the
                call before the transaction commits, so waiting for it would only time out),
                inside a task on a Celery worker (waiting there could starve the workers), or
                the tool context is not JSON.
        """
        from tool_calling.tasks import dispatch_on_commit, in_worker_task

        name = tool_call.name
        if in_worker_task():
            raise ToolCallingError(
                f"Tool {name!r} runs on a Celery worker and cannot be waited for from inside a "
                "Celery task: the task would hold its worker while the call queues, possibly "
                "behind it. Run the turn in a web process or a script, run the tool inline, or "
                "chain the call's task instead of waiting for it."
            )
        if transaction.get_connection().in_atomic_block:
            raise ToolCallingError(
                f"Tool {name!r} runs on a Celery worker, which cannot see the call until the "
                "current database transaction commits; run the turn outside atomic() (and "
                "without ATOMIC_REQUESTS), or run the tool inline."
            )
        row = record_call(
            tool_call,
            tool_context,
            user=self.user,
            conversation_id=self.conversation_id,
            assistant_message_id=_assistant_message_id.get(),
            tool=self.tools.get(name),
        )
        timeout = row.timeout or int(app_settings.EXECUTION["TIMEOUT"])
        dispatch_on_commit(row.pk)
        future = _ExecutionFuture(self._waiter, row.pk, name, _wait_seconds(timeout))
        self._waiter.add(future)
        return future


_inline_pool: ThreadPoolExecutor | None = None
_inline_pool_lock = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _inline_pool
    with _inline_pool_lock:
        if _inline_pool is None:
            # The "tool-calling" prefix makes GovernedToolCallingManager close the thread's
            # database connections after each call.
            _inline_pool = ThreadPoolExecutor(
                max_workers=16, thread_name_prefix="tool-calling-routed"
            )
        return _inline_pool


class RoutingToolCallExecutor:
    """Sends the calls of worker tools to a ``CeleryToolExecutor``; runs the others in-process.

    In-process calls run on a thread pool through the manager's ``call_tool`` (governed and
    audited as usual) while the workers run theirs, so a mixed batch takes about as long as its
    slowest call.
    """

    def __init__(self, manager: Any, celery: CeleryToolExecutor | None = None) -> None:
        self.manager = manager
        governed = manager.governed
        self.tools: Mapping[str, models.Tool] = governed.rows
        self.celery = celery or CeleryToolExecutor(
            user=manager.user, conversation_id=manager.conversation_id, tools=governed.rows
        )

    def submit_tool_call(
        self, callback: ToolCallback, tool_call: ToolCall, tool_context: ToolContext
    ) -> Future[str]:
        """Start the call where its tool runs and return the future of its text."""
        if execution_mode(self.tools.get(tool_call.name)) == models.ExecutionMode.CELERY:
            return self.celery.submit_tool_call(callback, tool_call, tool_context)
        call: Callable[..., str] = self.manager.call_tool
        return _pool().submit(
            contextvars.copy_context().run, call, callback, tool_call, tool_context
        )
