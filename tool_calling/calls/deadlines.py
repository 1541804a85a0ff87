"""Time limits of tool calls on worker pools where Celery enforces none (threads, gevent, solo).

Celery's soft and hard time limits exist only under the prefork pool: its main process raises
``SoftTimeLimitExceeded`` in the child at the soft limit and kills the child at the hard one.
A thread cannot be killed, so on every other pool a call runs in a thread of its own, and:

- at its soft limit, the exception Celery would raise (``SoftTimeLimitExceeded``) is raised
  inside the tool, so a tool written for prefork cleans up the same way. Python raises it at the
  tool's next line of Python; a tool blocked in C code or a system call (``time.sleep``, a socket
  read without a timeout) feels it when that call returns. An ``async def`` tool, or an MCP tool,
  waits on the process's event loop: its coroutine is cancelled.
- at its hard limit (soft + ``EXECUTION["TIMEOUT_GRACE"]``), the call is given up on: it ends
  ``timed_out`` and the model is told, the worker's thread goes on with its next task, and the
  tool's thread is abandoned. It keeps running until the tool returns (a thread stuck in C code
  forever stays stuck, holding its memory); whatever it returns is discarded, and it counts in
  :func:`abandoned`. Route such a tool to a prefork queue, where the hard limit kills the process.

``tool_calling.apps`` tells this module which pool the worker runs (Celery's ``worker_init``
signal), so calls on prefork keep Celery's own limits and pay for no thread.
"""

from __future__ import annotations

import contextvars
import ctypes
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from django.db import connections

__all__ = [
    "HardTimeLimitExceeded",
    "abandoned",
    "needed",
    "run_with_deadline",
    "set_pool",
    "soft_exception",
]

logger = logging.getLogger("tool_calling.calls")

T = TypeVar("T")


class HardTimeLimitExceeded(Exception):
    """A call passed its hard time limit on a pool that cannot kill it; it was given up on."""


_pool: str | None = None
"""The pool of this worker process, once ``worker_init`` told; ``None`` outside a worker."""
_abandoned: set[threading.Thread] = set()
_abandoned_lock = threading.Lock()


_soft_exception: type[BaseException] | None = None


def set_pool(pool_cls: Any, soft_exception: type[BaseException]) -> None:
    """Record the pool of this worker process and the exception of a soft time limit.

    ``pool_cls`` is the pool's class (or Celery's name for it); ``soft_exception`` is what a
    tool gets at its soft limit (Celery's ``SoftTimeLimitExceeded``, so that a tool written for
    prefork behaves the same on every pool). ``tool_calling.tasks`` tells it at ``worker_init``.
    """
    global _pool, _soft_exception
    _pool = str(getattr(pool_cls, "__module__", "") or pool_cls)
    _soft_exception = soft_exception


def soft_exception() -> type[BaseException] | None:
    """What a call gets at its soft time limit in this worker; ``None`` outside a worker."""
    return _soft_exception


def needed() -> bool:
    """Whether calls here need this module's limits: a worker whose pool enforces none.

    False under prefork (Celery's own limits apply), and outside a worker (a task run eagerly
    runs in its caller, as any function would).
    """
    return _pool is not None and _pool not in ("celery.concurrency.prefork", "prefork")


def abandoned() -> int:
    """How many tool threads of this process passed their hard limit and still run."""
    with _abandoned_lock:
        _abandoned.difference_update([t for t in _abandoned if not t.is_alive()])
        return len(_abandoned)


def _raise_in(thread: threading.Thread, exception: type[BaseException]) -> bool:
    ident = thread.ident
    if ident is None or not thread.is_alive():
        return False
    done = ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(ident), ctypes.py_object(exception)
    )
    return bool(done == 1)


class _Call:
    """A call running in its own thread; the caller waits on ``done``."""

    def __init__(self, function: Callable[[], Any]) -> None:
        self.function = function
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self.finished = False
        """Set once the tool returned or raised (before ``done``): no exception may land then."""
        self.lock = threading.Lock()

    def run(self) -> None:
        try:
            try:
                self.result = self.function()
            except BaseException as exc:  # handed to the waiting caller
                self.error = exc
            finally:
                with self.lock:
                    self.finished = True
        except BaseException as exc:  # an injected exception that landed after the tool ended
            self.error = self.error or exc
        finally:
            connections.close_all()  # the tool's own queries: the thread ends here
            self.done.set()


def run_with_deadline(
    function: Callable[[], T],
    *,
    soft: float,
    grace: float,
    soft_exception: type[BaseException],
    name: str = "",
) -> T:
    """Run ``function`` in a thread of its own, within ``soft`` (+ ``grace``) seconds.

    Args:
        function: The tool call (its context variables go with it).
        soft: Seconds until ``soft_exception`` is raised inside the tool.
        grace: Seconds after that until the call is given up on.
        soft_exception: What the tool gets at the soft limit (Celery's
            ``SoftTimeLimitExceeded``, so tools behave as under prefork).
        name: The tool's name, for the log and the thread's name.

    Returns:
        What ``function`` returned.

    Raises:
        HardTimeLimitExceeded: the call did not end within ``soft + grace`` seconds.
        BaseException: what ``function`` raised (``soft_exception`` at the soft limit).
    """
    call = _Call(function)
    thread = threading.Thread(
        target=contextvars.copy_context().run,
        args=(call.run,),
        name=f"tool-call {name}"[:64],
        daemon=True,
    )
    thread.start()
    if not call.done.wait(soft):
        with call.lock:
            if not call.finished:
                _raise_in(thread, soft_exception)
        if not call.done.wait(grace):
            with _abandoned_lock:
                _abandoned.add(thread)
            logger.warning(
                "Tool %r still runs %s s after its soft time limit (%s s): given up on; its "
                "thread goes on until the tool returns (a thread cannot be killed: route a tool "
                "that blocks in C code to a prefork queue)",
                name,
                grace,
                soft,
            )
            raise HardTimeLimitExceeded(
                f"Tool {name!r} did not end within {soft + grace:g} s and was given up on."
            )
    if call.error is not None:
        raise call.error
    return call.result  # type: ignore[no-any-return]
