"""Where governed tool calls run: on Celery workers the caller waits for, or in-process.

A script can hand a :class:`CeleryToolExecutor` to any ``DefaultToolCallingManager``; governed
turns use a :class:`RoutingToolCallExecutor` for a batch that has calls for workers (each
tool's execution mode: its own, set in the admin, else ``EXECUTION["MODE"]``), which sends
those and runs the others in-process meanwhile. The workers re-check governance either way.

The database is the record of a call on a worker: the executor records its ``ToolExecution``
row (``pending``, with the exact arguments and tool context in its working data), sends a task
carrying only the row's id once the row is committed, and completes the call's future from the
outcome the worker wrote, woken by the worker's notification (``_notify``) or by its own polls.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeoutError
from typing import Any

from django.db import transaction

from tool_calling import _notify, models
from tool_calling.calls import lifecycle
from tool_calling.calls.dispatch import Dispatch, dispatch_on_commit, in_worker_task
from tool_calling.calls.failures import with_error_id
from tool_calling.calls.gate import GateCall, Rule, Verdict, admit
from tool_calling.calls.retries import RetryPolicy
from tool_calling.conf import hard_time_limit
from tool_calling.conf import settings as app_settings
from tool_calling.core.chat.messages import ToolCall
from tool_calling.core.execution.plan import ToolOutcome, ToolOutcomeKind
from tool_calling.core.tools.callback import ToolCallback
from tool_calling.core.tools.context import ToolContext
from tool_calling.exceptions import ToolCallingError

__all__ = [
    "CeleryToolExecutor",
    "RoutingToolCallExecutor",
    "execution_mode",
    "outcome_of",
]

logger = logging.getLogger("tool_calling.calls")

# Polling of the rows a caller waits for: fast at first (most tools take milliseconds), then
# backing off to a few reads a second. With Redis a worker's notification wakes the caller at
# once; the polls are the fallback.
_POLL_FIRST = 0.01
_POLL_FACTOR = 1.5
_POLL_MAX = 0.25

_OUTCOME_FIELDS = ("id", "tool_name", "status", "result", "payload", "error_id")


def execution_mode(tool: models.Tool | None) -> str:
    """Return where calls of ``tool`` run: its own mode, else ``EXECUTION["MODE"]``."""
    if tool is not None and tool.execution_mode:
        return str(tool.execution_mode)
    return str(app_settings.EXECUTION["MODE"])


def outcome_of(row: Mapping[str, Any]) -> ToolOutcome:
    """The outcome of a finished call, from its row (``id``, ``status``, ``result``, ``payload``).

    The worker wrote the exact outcome into the working data; once that was purged, the
    audited ``result`` stands in for the text. The row's ``error_id`` (an unexpected error,
    S13) goes with it to the exception processor.
    """
    return with_error_id(_outcome(row), str(row.get("error_id") or ""))


def _outcome(row: Mapping[str, Any]) -> ToolOutcome:
    payload = row.get("payload") or {}
    stored = payload.get("outcome")
    if isinstance(stored, Mapping):
        try:
            return ToolOutcome.from_json(stored)
        except ValueError:
            logger.warning("Tool call %s: unreadable outcome in its working data", row.get("id"))
    text = row.get("result") or ""
    if row["status"] == models.ExecutionStatus.SUCCEEDED:
        return ToolOutcome.ok(text)
    if row["status"] == models.ExecutionStatus.TIMED_OUT:
        return ToolOutcome(ToolOutcomeKind.TIMEOUT, text)
    return ToolOutcome.failure(text)


def _wait_seconds(timeout: int, retries: RetryPolicy) -> int:
    """How long a caller waits for a call: every attempt to its hard limit, the pauses, a margin."""
    running = hard_time_limit(timeout) * retries.attempts + retries.longest_wait()
    return int(running + 0.999) + int(app_settings.EXECUTION["WAIT_MARGIN"])


class _ExecutionFuture(Future[ToolOutcome]):
    """The future of a call on a worker; it completes while its caller waits on it.

    The manager waits on its futures one by one, in call order, so each wait reads every row
    of the batch still outstanding and completes all that finished: a batch ends about when its
    slowest call does, with one query per poll whatever its size.
    """

    def __init__(self, waiter: _Waiter, ref: lifecycle.CallRef, wait: int) -> None:
        super().__init__()
        self.waiter = waiter
        self.ref = ref
        self.wait_seconds = wait
        self.deadline = time.monotonic() + wait
        listener = _notify.listener()
        self.notified = listener.count if listener is not None else None
        """The notifications counted when the call was sent (None: no Redis to tell)."""

    def result(self, timeout: float | None = None) -> ToolOutcome:
        """Wait for the call (at most ``timeout`` seconds more) and return its outcome."""
        if not self.done():
            self.waiter.wait_for(self, timeout)
        return super().result(0)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Wait for the call (at most ``timeout`` seconds more); calls never raise here."""
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
            self._outstanding[future.ref.execution_id] = future

    def wait_for(self, future: _ExecutionFuture, timeout: float | None) -> None:
        limit = None if timeout is None else time.monotonic() + timeout
        pause = _POLL_FIRST
        wakeups = _notify.listener()
        seen = future.notified or 0
        # Told of every call's end, a caller reads the rows only once something ended (or a
        # pause passed without word: a lost notification costs one pause, never the result).
        skip = wakeups is not None and future.notified is not None and wakeups.count == seen
        with self._lock:
            while not future.done():
                if not skip:
                    seen = wakeups.count if wakeups is not None else 0
                    self._poll()
                    if future.done():
                        return
                skip = False
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
            ).values(*_OUTCOME_FIELDS)
        )
        if not rows:
            return
        # The exact texts may hold what the audit redacts: keep them no longer than needed.
        kept = [row["id"] for row in rows if row["payload"]]
        if kept:
            lifecycle.purge_payloads(models.ToolExecution.objects.filter(pk__in=kept))
        for row in rows:
            self._outstanding.pop(row["id"]).set_result(outcome_of(row))

    def _give_up(self, future: _ExecutionFuture) -> None:
        """The call is past its deadline: never start it now, and tell the model."""
        ref = future.ref
        self._outstanding.pop(ref.execution_id, None)
        name = ref.tool_name
        text = f"Tool {name!r} did not start within {future.wait_seconds} s: no worker took it."
        if lifecycle.withdraw(ref, text):
            logger.warning(
                "Tool call %s (%r) was never started by a worker", ref.execution_id, name
            )
            future.set_result(ToolOutcome(ToolOutcomeKind.TIMEOUT, text))
            return
        row = models.ToolExecution.objects.filter(pk=ref.execution_id).values(*_OUTCOME_FIELDS)
        found = row.first()
        if found is not None and found["status"] in models.TERMINAL_STATUSES:
            lifecycle.purge_payloads(models.ToolExecution.objects.filter(pk=ref.execution_id))
            future.set_result(outcome_of(found))
            return
        logger.warning(
            "Tool call %s (%r) still runs on a worker after %s s; the model is told it did not "
            "finish",
            ref.execution_id,
            name,
            future.wait_seconds,
        )
        future.set_result(
            ToolOutcome(
                ToolOutcomeKind.TIMEOUT,
                f"Tool {name!r} did not finish within {future.wait_seconds} s on a worker.",
            )
        )


class CeleryToolExecutor:
    """A ``ToolCallExecutor`` that runs each call on a Celery worker and waits for it.

    Each call becomes a ``ToolExecution`` row (``pending``) and, once the row is committed, a
    ``tool_calling.execute_tool_call`` task carrying only its id, sent to the tool's queue with
    the tool's time limit. The future completes with the call's outcome when the row is
    finished. A call that has not ended ``timeout + TIMEOUT_GRACE + WAIT_MARGIN`` seconds after
    it was sent ends as timed out (never started: it is withdrawn, so it will not run later).

    Args:
        user: The user of the turn: the worker re-checks that this user may use the tool.
        conversation_id: Recorded in the audit.
        tools: ``Tool`` rows by name (the turn's snapshot); others are read when called.
        assistant_message_id: The stored assistant message whose calls these are.
    """

    def __init__(
        self,
        *,
        user: Any = None,
        conversation_id: Any = None,
        tools: Mapping[str, models.Tool] | None = None,
        assistant_message_id: int | None = None,
    ) -> None:
        self.user = user if getattr(user, "is_authenticated", False) else None
        self.conversation_id = conversation_id
        self.tools = tools if tools is not None else {}
        self.assistant_message_id = assistant_message_id
        self._waiter = _Waiter()

    def submit_tool_call(
        self, callback: ToolCallback, tool_call: ToolCall, tool_context: ToolContext
    ) -> Future[ToolOutcome]:
        """Record the call, send it to a worker once committed, and return its future.

        Raises:
            ToolCallingError: called inside a database transaction (a worker could not see the
                call before the transaction commits, so waiting for it would only time out),
                inside a task on a Celery worker (waiting there could starve the workers), or
                the tool context is not JSON.
        """
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
        tool = self.tools.get(name)
        if tool is None:
            tool = models.Tool.objects.filter(name=name).first()
        # Nothing invalid is sent: the gate's first rule here, all of them on the worker.
        verdict = admit(
            GateCall(tool_call, callback, self.user, tool_context, through=Rule.VALIDATION)
        )
        if not verdict.admitted:
            return self._rejected(tool_call, tool, verdict)
        row = lifecycle.record_for_worker(
            # The worker runs the plain registered tool: it gets the tool's own arguments.
            verdict.call,
            tool_context,
            tool=tool,
            user=self.user,
            conversation_id=self.conversation_id,
            assistant_message_id=self.assistant_message_id,
            augmented=verdict.augmented,
        )
        dispatch_on_commit(Dispatch.of(row))
        timeout = row.timeout or int(app_settings.EXECUTION["TIMEOUT"])
        wait = _wait_seconds(timeout, RetryPolicy.of(tool))
        future = _ExecutionFuture(self._waiter, lifecycle.CallRef.of(row), wait)
        self._waiter.add(future)
        return future

    def _rejected(
        self, tool_call: ToolCall, tool: models.Tool | None, verdict: Verdict
    ) -> Future[ToolOutcome]:
        """A call the gate refused before sending it (bad arguments): recorded, never sent."""
        assert verdict.outcome is not None
        lifecycle.record_refused(
            tool_call,
            verdict.text,
            tool=tool,
            user=self.user,
            conversation_id=self.conversation_id,
            assistant_message_id=self.assistant_message_id,
            outcome=verdict.outcome,
        )
        future: Future[ToolOutcome] = Future()
        future.set_result(verdict.outcome)
        return future


_inline_pool: ThreadPoolExecutor | None = None
_inline_pool_lock = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _inline_pool
    with _inline_pool_lock:
        if _inline_pool is None:
            _inline_pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="tool-calls")
        return _inline_pool


class RoutingToolCallExecutor:
    """Sends the calls of worker tools to a ``CeleryToolExecutor``; runs the others in-process.

    In-process calls run on a thread pool through ``call_inline`` (the manager's governed and
    audited ``call_tool``) while the workers run theirs, so a mixed batch takes about as long as
    its slowest call.

    Args:
        call_inline: Runs one call in-process and returns its text (raises to fail it).
        celery: Where the calls of worker tools go.
        tools: ``Tool`` rows by name: their execution modes decide the route.
    """

    def __init__(
        self,
        call_inline: Callable[[ToolCallback, ToolCall, ToolContext], str],
        celery: CeleryToolExecutor,
        tools: Mapping[str, models.Tool],
    ) -> None:
        self.call_inline = call_inline
        self.celery = celery
        self.tools = tools

    def submit_tool_call(
        self, callback: ToolCallback, tool_call: ToolCall, tool_context: ToolContext
    ) -> Future[str] | Future[ToolOutcome]:
        """Start the call where its tool runs and return the future of its text or outcome."""
        if execution_mode(self.tools.get(tool_call.name)) == models.ExecutionMode.CELERY:
            return self.celery.submit_tool_call(callback, tool_call, tool_context)
        return _pool().submit(
            contextvars.copy_context().run, self.call_inline, callback, tool_call, tool_context
        )
