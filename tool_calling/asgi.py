"""An ASGI application for projects that serve run events as Server-Sent Events, and MCP.

Use it in the project's ``asgi.py`` instead of Django's::

    from tool_calling.asgi import get_asgi_application, with_mcp

    application = get_asgi_application()
    application = with_mcp(application)  # optional: the governed tools over MCP at /mcp/

Why: Django's ASGI handler gives every request a new thread for its synchronous parts (the
middleware, a synchronous view), and keeps that thread until the response ends. Two costs follow:

- For an SSE stream that is open for minutes, that is one idle thread per connected client.
  This handler serves requests that ask for ``text/event-stream`` without that per-request
  thread: their synchronous middleware shares one thread of the handler's (short work: a
  session read, an authentication), and the stream itself (``tool_calling.api.events``) waits
  on the event loop.
- A new thread has no database connection and no cache connection of its own yet: every request
  opened both (with SQLite, the file, its WAL and Django's functions; with Redis, a TCP
  connection), and threw them away with the thread; that was most of the CPU an API request
  cost. Here every other request runs on a thread taken from a pool of threads kept for that
  (one request at a time each, as Django's own), so ``CONN_MAX_AGE`` and the cache's
  connections work under ASGI as they do under a threaded WSGI server.

The middleware runs as one synchronous chain, in one trip to the request's thread, as under a
WSGI server. Django's own handler makes the chain asynchronous from the view up to the first
middleware that is synchronous only (WhiteNoise's, for one), and each ``MiddlewareMixin`` below
it then crosses between the event loop and the thread twice per request: some fifteen crossings
for the example project's stack, a fifth of an API request's CPU.

At most ``max_threads`` requests run their synchronous code at once; the others wait on the event
loop, in order, holding no thread. With a PostgreSQL connection pool on the default database
the bound is the pool's size: a request thread holds its connection until the request ends, so
more threads than connections made the extra ones wait on the pool, and past its timeout fail
with a 500 ("couldn't get a connection") under a burst that the bound queues instead.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import django
from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core.handlers.asgi import ASGIHandler
from django.db import DEFAULT_DB_ALIAS, connections
from django.http import HttpRequest, HttpResponseBase

__all__ = [
    "EventStreamFriendlyASGIHandler",
    "get_asgi_application",
    "request_threads",
    "with_mcp",
]

_IDLE_THREADS_KEPT = 256
"""Request threads kept waiting for the next request; past that many, an idle one ends."""

DEFAULT_MAX_THREADS = 256
"""Requests running synchronous code at once when the default database has no pool."""

_PSYCOPG_POOL_MIN_SIZE = 4
"""psycopg_pool's own ``min_size`` (and so ``max_size``) when ``"pool": True`` sets neither."""


def request_threads(database: dict[str, Any] | None = None) -> int:
    """How many requests may run their synchronous code at once (the module docstring says why).

    ``database`` is a ``DATABASES`` entry (the default database's when omitted): with
    ``OPTIONS["pool"]`` (Django's PostgreSQL pool), the pool's ``max_size``; otherwise
    :data:`DEFAULT_MAX_THREADS`.
    """
    if database is None:
        database = connections.settings[DEFAULT_DB_ALIAS]
    pool = (database.get("OPTIONS") or {}).get("pool")
    if not pool:
        return DEFAULT_MAX_THREADS
    if pool is True:
        return _PSYCOPG_POOL_MIN_SIZE
    size = pool.get("max_size") or pool.get("min_size") or _PSYCOPG_POOL_MIN_SIZE
    return max(1, int(size))


class _RequestThreads:
    """Single-thread executors handed to requests one at a time, then kept for the next one."""

    def __init__(self) -> None:
        self._idle: list[ThreadPoolExecutor] = []
        self._lock = threading.Lock()

    def take(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix="django-request")

    async def give_back(self, executor: ThreadPoolExecutor) -> None:
        """Keep ``executor`` for another request once the work it was given has run.

        A request whose client went away may end while its view still runs in the thread: a
        marker queued behind that work says when the thread is free.
        """
        await asyncio.wrap_future(executor.submit(_nothing))
        with self._lock:
            if len(self._idle) < _IDLE_THREADS_KEPT:
                self._idle.append(executor)
                return
        executor.shutdown(wait=False)


def _nothing() -> None:
    """The marker a request thread runs once the request's own work is done."""


def _accepts_event_stream(scope: dict[str, Any]) -> bool:
    for name, value in scope.get("headers") or ():
        if name == b"accept" and b"text/event-stream" in value:
            return True
    return False


class EventStreamFriendlyASGIHandler(ASGIHandler):
    """Django's ``ASGIHandler``; event-stream requests share one thread, others reuse threads."""

    def __init__(self, *, max_threads: int | None = None) -> None:
        super().__init__()
        if max_threads is not None and max_threads < 1:
            raise ValueError(f"max_threads must be 1 or more, got {max_threads!r}.")
        self.max_threads = max_threads or request_threads()
        """Requests running their synchronous code at once (the module docstring)."""
        self._threads = _RequestThreads()
        self._event_stream_thread = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="django-event-streams"
        )
        # One semaphore per event loop: asyncio's bind to the loop that first waits on them.
        self._turns: weakref.WeakKeyDictionary[Any, asyncio.Semaphore] = weakref.WeakKeyDictionary()

    def _turn(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        turn = self._turns.get(loop)
        if turn is None:
            turn = self._turns[loop] = asyncio.Semaphore(self.max_threads)
        return turn

    def load_middleware(self, is_async: bool = False) -> None:
        """Build the synchronous chain, whatever ``ASGIHandler.__init__`` asks for."""
        super().load_middleware(is_async=False)

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        """The response of the synchronous middleware chain, run in one trip to the thread.

        An ``async def`` view (the run events stream) is awaited on the event loop from there,
        as Django does for one under WSGI; its streamed body is sent from the loop.
        """
        return await sync_to_async(self.get_response, thread_sensitive=True)(request)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Serve the request; SSE requests without a thread of their own (module docstring)."""
        if scope.get("type") != "http":
            await super().__call__(scope, receive, send)  # Django refuses it, as it should
            return
        # Every request enters a context of its own, with an executor: one that it inherited
        # may have exited already. uvicorn starts a pipelined request's task from inside the
        # previous request's task (and asyncio can leak context variables between tasks), so
        # the new task would inherit that request's ThreadSensitiveContext, and once that
        # request ended, its every thread-sensitive call would raise RuntimeError (a 500).
        if _accepts_event_stream(scope):
            # One thread shared by all streams' synchronous middleware, not a thread that lives
            # as long as each stream.
            async with ThreadSensitiveContext(executor=self._event_stream_thread):
                await self.handle(scope, receive, send)
            return
        async with self._turn():
            executor = self._threads.take()
            try:
                # The request's synchronous code runs on this executor's thread, as it would on
                # a new one (asgiref leaves an executor it was given running when the block ends).
                async with ThreadSensitiveContext(executor=executor):
                    await self.handle(scope, receive, send)
            finally:
                await self._threads.give_back(executor)


def get_asgi_application(*, max_threads: int | None = None) -> EventStreamFriendlyASGIHandler:
    """Set Django up and return the handler (``django.core.asgi.get_asgi_application``'s twin).

    ``max_threads``: requests running their synchronous code at once; by default
    :func:`request_threads` (the default database's pool size, else 256).
    """
    django.setup(set_prefix=False)
    return EventStreamFriendlyASGIHandler(max_threads=max_threads)


def with_mcp(application: Any, *, path: str = "/mcp/") -> Any:
    """Serve the governed tools over MCP (streamable HTTP) at ``path``; the rest by ``application``.

    Call it after :func:`get_asgi_application` (Django is set up then). The returned app owns
    the ASGI lifespan, which the MCP SDK's session manager needs and Django's handler refuses:
    it starts the manager on ``lifespan.startup`` and never forwards lifespan events to
    ``application``. Run it under an ASGI server that sends them (uvicorn's default ``auto``
    does). Every request to ``path`` is authenticated (``Authorization: Bearer <DRF token>``,
    or an OAuth access token issued for ``MCP["RESOURCE"]`` when that is set, whose protected
    resource metadata is then served too) and its ``Host`` and ``Origin`` are checked against
    ``TOOL_CALLING["MCP"]``; see ``tool_calling.mcp.serving``.
    """
    # Imported here, after django.setup(): the endpoint reads models (and the mcp SDK is
    # only needed by projects that serve MCP).
    from tool_calling.mcp.serving import http_app

    return http_app(fallback=application, path=path)
