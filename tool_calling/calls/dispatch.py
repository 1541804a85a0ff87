"""Sending work to Celery workers: a tool call's task, or a durable run's next step.

Tasks are looked up by name in the Celery app's registry (``tool_calling.tasks`` registers
them; ``ToolCallingConfig.ready()`` imports it when Celery is installed), so nothing here
imports the tasks module above it. Celery itself is optional: without it, importing this module
works and sending raises a ``ToolCallingError`` that says what to install.

A call's task is sent once its row is committed (``dispatch_on_commit``), never for a rolled
back row (R4). The row is recorded as dispatched when it is written (no second write on the
happy path); a publish that fails is logged, not raised, and clears that mark, so the sweeper
sends the call again soon (R3).

Every publish is bounded (S9): it goes over a connection of this module's own pool whose socket
operations time out after ``EXECUTION["BROKER_TIMEOUT"]`` seconds (the project's own
``socket_timeout`` in ``CELERY_BROKER_TRANSPORT_OPTIONS`` when it is shorter), and is tried
twice at most. A broker that is down, or stalled (accepting connections, answering nothing),
costs a caller about twice that timeout, never a hang: the API answers its 503, a worker goes on.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from tool_calling import observability
from tool_calling.calls import lifecycle
from tool_calling.conf import hard_time_limit
from tool_calling.conf import settings as app_settings
from tool_calling.exceptions import ToolCallingError

try:
    import celery as _celery
except ImportError:  # pragma: no cover - exercised only without Celery installed
    _celery = None  # type: ignore[assignment]

__all__ = [
    "EXECUTE_TOOL_CALL",
    "PUBLISH_RETRY_POLICY",
    "RUN_STEP",
    "Dispatch",
    "dispatch",
    "dispatch_on_commit",
    "in_worker_task",
    "publish",
    "send_run_step",
    "task",
]

logger = logging.getLogger("tool_calling.calls")

EXECUTE_TOOL_CALL = "tool_calling.execute_tool_call"
"""The task that runs one tool call on a worker."""
RUN_STEP = "tool_calling.run_step"
"""The task that advances a durable run."""


def task(name: str) -> Any:
    """The Celery task registered as ``name`` in the current app.

    Raises:
        ToolCallingError: Celery is not installed, or ``tool_calling.tasks`` was not imported.
    """
    if _celery is None:
        raise ToolCallingError(
            "Running tool calls on Celery workers needs Celery: pip install 'celery[redis]'"
        )
    try:
        return _celery.current_app.tasks[name]
    except KeyError:
        raise ToolCallingError(
            f"The Celery task {name!r} is not registered: 'tool_calling' must be in "
            "INSTALLED_APPS (its app config registers tool_calling.tasks) and the Celery app "
            "must load the Django settings (app.config_from_object('django.conf:settings', "
            "namespace='CELERY'))."
        ) from None


def in_worker_task() -> bool:
    """Whether the caller runs inside a task on a Celery worker (not eagerly)."""
    if _celery is None:
        return False
    current = _celery.current_task
    if not current:
        return False
    request = current.request
    return bool(request.id) and not request.is_eager and not request.called_directly


@dataclass(frozen=True)
class Dispatch:
    """What sending a call needs, known to whoever recorded it (no read of the row)."""

    execution_id: int
    """The ``ToolExecution`` row: the task's only argument."""
    tool_name: str
    """For the log."""
    queue: str = ""
    """The Celery queue; blank for ``EXECUTION["QUEUE"]``."""
    timeout: int | None = None
    """The call's soft time limit; ``None`` for ``EXECUTION["TIMEOUT"]``."""
    countdown: float = 0.0
    """Seconds the broker holds the task before a worker runs it (a retry's backoff)."""

    @classmethod
    def of(cls, row: Any, countdown: float = 0.0) -> Dispatch:
        """From a ``ToolExecution`` (or anything with its ``pk``, ``tool_name``, ``queue``...)."""
        return cls(row.pk, row.tool_name, row.queue, row.timeout, countdown)


PUBLISH_RETRY_POLICY = {
    "max_retries": 1,
    "interval_start": 0.2,
    "interval_step": 0.2,
    "interval_max": 0.2,
}
"""How a publish is retried (one more try, 0.2 s later): a blip passes, a dead broker fails
fast. The sweeper sends what still did not go (R3)."""

_POOL_LIMIT = 1000
"""Broker connections one process may publish over at once. Not Celery's ``broker_pool_limit``
(10): hundreds of request and worker threads may publish together, and a pool of 10 made the
eleventh wait, then fail (``LimitExceeded``: a 503 "broker unavailable" with Redis up). The pool
opens a connection only when none is free, and keeps it."""

_pools: dict[tuple[int, int, str, float], Any] = {}
_pools_lock = threading.Lock()


def _timeout() -> float:
    return float(app_settings.EXECUTION["BROKER_TIMEOUT"])


def _connections(app: Any, timeout: float) -> Any:
    """This process's pool of broker connections whose socket operations time out.

    The project's transport options are kept; ``socket_timeout`` and ``socket_connect_timeout``
    become ``timeout`` unless the project set a shorter one. One pool per process (never shared
    across a fork), broker URL and timeout.
    """
    url = str(app.conf.broker_write_url or app.conf.broker_url or "")
    key = (os.getpid(), id(app), url, timeout)
    pool = _pools.get(key)
    if pool is None:
        with _pools_lock:
            pool = _pools.get(key)
            if pool is None:
                configured = app.conf.broker_transport_options or {}
                bounded: dict[str, float] = {}
                for option in ("socket_timeout", "socket_connect_timeout"):
                    own = configured.get(option)
                    bounded[option] = timeout
                    if isinstance(own, int | float) and not isinstance(own, bool):
                        if 0 < own < timeout:  # the project's own is shorter: keep it
                            bounded[option] = float(own)
                connection = app.connection_for_write(
                    transport_options=bounded, connect_timeout=timeout
                )
                pool = connection.Pool(limit=max(app.conf.broker_pool_limit or 0, _POOL_LIMIT))
                _pools[key] = pool
    return pool


def publish(name: str, args: list[Any], **options: Any) -> None:
    """Send task ``name`` with ``args`` over a bounded connection (raises what the broker raised).

    ``options`` are ``apply_async``'s (queue, countdown, time limits). With Celery running
    tasks eagerly (tests) the task runs here, as ``apply_async`` does then.

    Raises:
        ToolCallingError: Celery is not installed, or the task is not registered.
    """
    celery_task = task(name)
    app = celery_task.app
    if app.conf.task_always_eager:
        celery_task.apply_async(args=args, **options)
        return
    timeout = _timeout()
    with _connections(app, timeout).acquire(block=True, timeout=timeout) as connection:
        celery_task.apply_async(
            args=args,
            connection=connection,
            retry=True,
            retry_policy=PUBLISH_RETRY_POLICY,
            **options,
        )


def dispatch(call: Dispatch) -> bool:
    """Send the task of ``call`` to its queue with its time limits; False if the broker failed.

    A failure to publish (the broker is down or stalled) is logged, not raised: the row stays
    ``pending`` and the sweeper sends it again (R3).
    """
    timeout = call.timeout or int(app_settings.EXECUTION["TIMEOUT"])
    queue = call.queue or str(app_settings.EXECUTION["QUEUE"])
    options: dict[str, Any] = {}
    if call.countdown > 0:
        options["countdown"] = call.countdown
    task(EXECUTE_TOOL_CALL)  # not installed or not registered: raised, not a broker failure
    try:
        publish(
            EXECUTE_TOOL_CALL,
            [call.execution_id],
            queue=queue,
            soft_time_limit=timeout,
            time_limit=hard_time_limit(timeout),
            **options,
            **observability.task_options(),  # the sender's trace, in the task's headers
        )
    except Exception:
        logger.exception(
            "Could not send tool call %s (%r) to queue %r; the sweeper will send it again",
            call.execution_id,
            call.tool_name,
            queue,
        )
        lifecycle.mark_undispatched(call.execution_id)
        return False
    return True


def dispatch_on_commit(call: Dispatch) -> None:
    """Send ``call`` once the current transaction commits; never if it rolls back (R4)."""
    task(EXECUTE_TOOL_CALL)  # fail now, in the caller's frame, if Celery cannot send it
    transaction.on_commit(lambda: dispatch(call))


def send_run_step(run_id: object) -> None:
    """Send a step of durable run ``run_id``, bounded (raises what the broker raised)."""
    publish(
        RUN_STEP,
        [str(run_id)],
        queue=str(app_settings.EXECUTION["QUEUE"]),
        **observability.task_options(),  # the sender's trace, in the task's headers
    )
