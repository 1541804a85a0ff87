"""McpConnection: one long-lived MCP client session, usable from sync and async code.

The SDK is async and its sessions are built from anyio cancel scopes, which must be entered and
left by one task. Each connection therefore runs its own event loop on a daemon thread, with one
*owner* task that opens the transport, initializes the session, keeps it while it is healthy and
opens a new one (with capped exponential backoff after failures) when a request needs it. Requests
are separate tasks on that loop that borrow the owner's session, each bounded by a timeout; sync
callers wait on a future, async callers on a wrapped one. Nothing ever waits without a bound.

A session is opened for a request that waits for one, in a copy of that request's context: the
MCP SDK's ``initialize`` span (OpenTelemetry) is a child of the span that caused the connection
(the tool call, the sync) instead of a trace of its own, and a session that broke while nobody
used it is reopened by the next request, not in the background.

A session breaks when a stdio server's process ends, when a transport fails, when a health check
(a ping) fails, and when a server over HTTP no longer knows it: a restarted server answers the
old session id with 404 ("Session not found"), or with another 4xx. Such an answer to a request
carrying the session makes the connection ping the session; if the ping is refused too, the
session is gone. The request that was refused never ran, so it is sent once more on the new
session; a request that was in flight when the server died has an unknown outcome and is never
sent again: it fails, and the next request reconnects.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import contextvars
import logging
import math
import os
import sys
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Literal, TextIO, TypeVar

from tool_calling.core._version import VERSION
from tool_calling.core.errors import (
    McpServerError,
    McpServerRequestError,
    McpServerTimeoutError,
    McpServerUnavailableError,
)
from tool_calling.core.mcp._sdk import (
    ClientSession,
    MCPError,
    StdioServerParameters,
    anyio,
    httpx2,
    negotiate_auto,
    stdio_client,
    streamable_http_client,
    types,
)

__all__ = ["McpConnection", "McpTransport", "StdioTransport", "StreamableHttpTransport"]

logger = logging.getLogger("tool_calling.mcp")

T = TypeVar("T")

DEFAULT_REQUEST_TIMEOUT = 30.0
"""Seconds a request (a tool call, one page of tools/list) may take, connecting included."""
DEFAULT_CONNECT_TIMEOUT = 10.0
"""Seconds to start the transport and finish the initialize handshake."""
DEFAULT_MAX_BACKOFF = 30.0
"""Longest wait between two failed connection attempts."""
_HEALTH_CHECK_TIMEOUT = 5.0
_LIST_PAGE_LIMIT = 1000  # pages of tools/list: a server that never stops paging is cut off here
_LIST_TIMEOUT_FACTOR = 10  # a whole listing may take this many page timeouts
_STABLE_SESSION = 5.0  # seconds a session must last for a reconnect to skip the backoff
_SESSION_HEADER = "mcp-session-id"  # streamable HTTP: the header that carries the session id


@dataclass(frozen=True)
class StdioTransport:
    """Start the server as a subprocess and speak MCP over its stdin and stdout."""

    command: str
    """The executable (looked up on PATH)."""
    args: Sequence[str] = ()
    """Its arguments."""
    _: KW_ONLY
    env: Mapping[str, str] | None = field(default=None, repr=False, compare=False)
    """Extra environment variables for the subprocess, merged over the SDK's small safe set
    (``HOME``, ``PATH``, ...): the server never inherits this process's environment."""
    cwd: str | None = None
    """Working directory of the subprocess."""

    def __repr__(self) -> str:
        env = sorted(self.env) if self.env else []
        return f"StdioTransport({self.command!r}, {list(self.args)!r}, env_keys={env!r})"


@dataclass(frozen=True)
class StreamableHttpTransport:
    """Speak MCP over streamable HTTP to a server's endpoint URL."""

    url: str
    """The MCP endpoint, e.g. ``http://127.0.0.1:3001/mcp``."""
    headers: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    """HTTP headers sent with every request (``Authorization``, ...); never logged."""

    def __repr__(self) -> str:
        return f"StreamableHttpTransport({self.url!r}, header_names={sorted(self.headers)!r})"


McpTransport = StdioTransport | StreamableHttpTransport
"""How to reach an MCP server."""


class _Live:
    """The state of one running loop (one per process: a fork starts a new one)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.thread: threading.Thread | None = None
        self.session: ClientSession | None = None
        self.generation = 0
        self.ready = asyncio.Event()  # set while a session is usable
        self.wake = asyncio.Event()  # set to make the owner drop the session (broken or closing)
        self.closing = False
        self.pid = os.getpid()
        self.checks: dict[int, asyncio.Task[None]] = {}  # health checks under way, by session
        self.waiting = 0  # requests waiting for a session
        self.demand = asyncio.Event()  # set when a request starts waiting (or on closing)
        # The context of a request that waits for a session: the next one is opened in it.
        self.cause: contextvars.Context | None = None


_open_connections: weakref.WeakSet[McpConnection] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:  # pragma: no cover - runs at interpreter exit
    for connection in list(_open_connections):
        connection.close(timeout=2.0)


def _after_fork_in_child() -> None:
    # The parent's loop threads do not exist in the child, and a lock another thread held at
    # the fork would stay held forever: each connection starts afresh on first use.
    for connection in list(_open_connections):
        connection._lock = threading.Lock()
        connection._live = None
    _open_connections.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


class McpConnection:
    """One MCP server session kept open in the background, reconnected when it breaks.

    Nothing starts until the first request (or :meth:`connect`). Every request is bounded by
    ``request_timeout`` (connecting included); a server that is down, slow or gone answers
    with an :class:`~tool_calling.exceptions.McpServerError` (a ``ToolFailure``), never a hang.
    After a fork (Celery's prefork pool) the child opens its own session on first use.

    Args:
        transport: how to reach the server (:class:`StdioTransport` or
            :class:`StreamableHttpTransport`).
        name: the server's name (alias) in messages and logs.
        request_timeout: seconds each request may take, connecting included.
        connect_timeout: seconds to start the transport and finish the handshake.
        initial_backoff: seconds before the second connection attempt; doubles per failure.
        max_backoff: the cap of that wait.
        errlog: where a stdio server's stderr goes (default: this process's stderr).
        protocol: ``"auto"``: the current revision (2026-07-28, sessionless) with a server
            that answers ``server/discover``, else the initialize handshake of the older one;
            ``"2025-11-25"``: always the handshake (a session), for a server that mishandles
            the probe.
    """

    def __init__(
        self,
        transport: McpTransport,
        *,
        name: str,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        initial_backoff: float = 0.5,
        max_backoff: float = DEFAULT_MAX_BACKOFF,
        errlog: TextIO | None = None,
        protocol: Literal["auto", "2025-11-25"] = "auto",
    ) -> None:
        if protocol not in ("auto", "2025-11-25"):
            raise ValueError(
                f"McpConnection {name!r}: protocol must be 'auto' or '2025-11-25', "
                f"got {protocol!r}."
            )
        for label, value in (
            ("request_timeout", request_timeout),
            ("connect_timeout", connect_timeout),
            ("initial_backoff", initial_backoff),
            ("max_backoff", max_backoff),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(
                    f"McpConnection {name!r}: {label} must be a positive number of seconds, "
                    f"got {value!r}."
                )
        if not isinstance(transport, (StdioTransport, StreamableHttpTransport)):
            raise TypeError(
                f"McpConnection {name!r}: transport must be a StdioTransport or a "
                f"StreamableHttpTransport, got {type(transport).__name__}."
            )
        self.transport = transport
        """How the server is reached."""
        self.name = name
        """The server's name (alias)."""
        self.request_timeout = float(request_timeout)
        """Seconds each request may take, connecting included."""
        self.connect_timeout = float(connect_timeout)
        """Seconds to start the transport and finish the handshake."""
        self.initial_backoff = float(initial_backoff)
        """Seconds before the second connection attempt."""
        self.max_backoff = float(max_backoff)
        """Longest wait between two connection attempts."""
        self._errlog = errlog
        self.protocol = protocol
        """``"auto"`` (the current revision when the server speaks it) or ``"2025-11-25"``."""
        self._lock = threading.Lock()
        self._live: _Live | None = None
        self._closed = False
        self._listeners: list[Callable[[str], None]] = []
        self.last_error: str | None = None
        """Why the last connection attempt failed or the session broke (``None`` while well)."""
        self.connects = 0
        """How many sessions were opened so far (1 after the first connect, +1 per reconnect)."""
        self.attempts = 0
        """How many times a session was (or is being) opened, failed attempts included."""
        self.server_info: types.Implementation | None = None
        """What the server said about itself when the session opened (``None`` if nothing)."""
        self.tools_fresh_until: float | None = None
        """``time.monotonic()`` until which the last ``tools/list`` answer is fresh, as the
        server's ``ttlMs`` said; ``None``: no hint (an older server, which announces changes
        with ``notifications/tools/list_changed`` instead)."""
        self.protocol_version: str | None = None
        """The protocol revision spoken with the server: ``"2026-07-28"`` (sessionless, found
        by ``server/discover``) or an older one (the initialize handshake); ``None`` until
        connected."""

    def __repr__(self) -> str:
        return f"<McpConnection {self.name!r} {self.transport!r}>"

    def __enter__(self) -> McpConnection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- public API ------------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """Whether a session is open right now."""
        live = self._live
        return live is not None and live.ready.is_set() and live.pid == os.getpid()

    def add_listener(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(method)`` for each server notification (``notifications/...``).

        It runs on the connection's loop thread and must return quickly.
        """
        self._listeners.append(listener)

    def connect(self, timeout: float | None = None) -> None:
        """Start the session now and wait until it is ready.

        Raises:
            McpServerUnavailableError: it could not connect within ``timeout``.
        """
        seconds = self._timeout(timeout)
        self._run(lambda live: self._await_ready(live, "connect", seconds), seconds)

    def list_tools(self, timeout: float | None = None) -> list[types.Tool]:
        """Return every tool the server lists, all pages.

        Each page is bounded by ``timeout``, the whole listing by ten times that.

        Raises:
            McpServerError: the server is unavailable, too slow or answered with an error.
        """
        seconds = self._timeout(timeout)
        return self._run(
            lambda live: self._list_tools(live, seconds), seconds * _LIST_TIMEOUT_FACTOR
        )

    async def alist_tools(self, timeout: float | None = None) -> list[types.Tool]:
        """Async twin of :meth:`list_tools`."""
        seconds = self._timeout(timeout)
        return await self._arun(lambda live: self._list_tools(live, seconds))

    def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        label: str | None = None,
    ) -> types.CallToolResult:
        """Call a tool by its name on the server and return the SDK's result.

        ``label`` is the tool's name in error messages (the name the model knows it by);
        it defaults to ``name``.

        Raises:
            McpServerError: the server is unavailable, too slow or answered with an error.
        """
        seconds = self._timeout(timeout)
        return self._run(
            lambda live: self._call_tool(live, name, arguments, meta, seconds, label), seconds
        )

    async def acall_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        label: str | None = None,
    ) -> types.CallToolResult:
        """Async twin of :meth:`call_tool`."""
        seconds = self._timeout(timeout)
        return await self._arun(
            lambda live: self._call_tool(live, name, arguments, meta, seconds, label)
        )

    def reconnect(self) -> None:
        """Drop the current session; the next request opens a new one."""
        live = self._live
        if live is not None and live.pid == os.getpid() and live.loop.is_running():
            live.loop.call_soon_threadsafe(live.wake.set)

    def close(self, timeout: float = 10.0) -> None:
        """End the session (a stdio server is stopped) and the loop thread. Idempotent."""
        with self._lock:
            self._closed = True
            live, self._live = self._live, None
        _open_connections.discard(self)
        if live is None or live.pid != os.getpid():
            return
        with contextlib.suppress(RuntimeError):  # the loop already stopped
            live.loop.call_soon_threadsafe(self._begin_close, live)
        if live.thread is not None and live.thread is not threading.current_thread():
            live.thread.join(timeout)

    # -- the loop thread -------------------------------------------------------------------------

    def _timeout(self, timeout: float | None) -> float:
        return self.request_timeout if timeout is None else float(timeout)

    def _ensure_live(self) -> _Live:
        with self._lock:
            if self._closed:
                raise McpServerUnavailableError(
                    f"MCP server {self.name!r} is closed; no request can be sent.",
                    server=self.name,
                    operation="request",
                    reason="closed",
                )
            live = self._live
            if (
                live is not None
                and live.pid == os.getpid()
                and live.thread is not None
                and live.thread.is_alive()
            ):
                return live
            # First use, or a forked child: the parent's loop thread does not exist here.
            loop = asyncio.new_event_loop()
            live = _Live(loop)
            started = threading.Event()
            thread = threading.Thread(
                target=self._thread_main,
                args=(live, started),
                name=f"mcp-{self.name}",
                daemon=True,
            )
            live.thread = thread
            self._live = live
            thread.start()
            started.wait()
            _open_connections.add(self)
            return live

    def _thread_main(self, live: _Live, started: threading.Event) -> None:
        loop = live.loop
        asyncio.set_event_loop(loop)
        owner = loop.create_task(self._own(live))
        loop.call_soon(started.set)
        try:
            loop.run_until_complete(owner)
        except BaseException:  # pragma: no cover - the owner catches everything it expects
            logger.exception("MCP server %r: the connection loop stopped", self.name)
        finally:
            pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def _begin_close(self, live: _Live) -> None:
        live.closing = True
        live.wake.set()
        live.demand.set()

    async def _own(self, live: _Live) -> None:
        """The owner task: open a session when a request waits for one, keep it, until closed."""
        failures = 0
        loop = asyncio.get_running_loop()
        while not live.closing:
            if not live.waiting:
                live.demand.clear()
                await live.demand.wait()
                continue
            # Opened in the waiting request's context: what the SDK traces while connecting
            # belongs to the request's trace.
            cause, live.cause = live.cause or contextvars.Context(), None
            live.wake.clear()
            self.attempts += 1
            opened = loop.time()
            try:
                await loop.create_task(self._hold_session(live), context=cause)
                # A session that breaks right after it opened (a server that crashes on its
                # first request) counts as a failure, so it is not reopened in a tight loop.
                failures = 0 if loop.time() - opened >= _STABLE_SESSION else failures + 1
            except Exception as exc:  # a failed attempt or a broken session: retried below
                failures += 1
                self.last_error = _describe(exc)
                logger.warning(
                    "MCP server %r: connection failed (%s); attempt %d",
                    self.name,
                    self.last_error,
                    failures,
                )
            finally:
                live.ready.clear()
                live.session = None
            if live.closing:
                break
            if failures:
                delay = min(self.max_backoff, self.initial_backoff * 2 ** (failures - 1))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(_wait_closing(live), delay)

    async def _hold_session(self, live: _Live) -> None:
        slow = f"no initialize answer within {self.connect_timeout:g} s"

        def note_slow_connect() -> None:
            # Recorded as soon as the deadline passes: unwinding a stuck transport (stopping a
            # subprocess) can take longer than the requests waiting for it.
            if not live.ready.is_set():
                self.last_error = slow

        timer = live.loop.call_later(self.connect_timeout, note_slow_connect)
        try:
            await self._open_session(live, slow)
        finally:
            timer.cancel()

    async def _open_session(self, live: _Live, slow: str) -> None:
        generation = live.generation
        try:
            await self._run_session(live, slow)
        except Exception as exc:
            if live.generation == generation:
                raise  # it never connected: a failed attempt
            # A session that was in use broke; what its transport raised while it was torn
            # down (a request it was still answering, say) changes nothing.
            logger.debug("MCP server %r: the lost session ended with %s", self.name, _describe(exc))
        if not live.closing:
            # The session broke (transport closed, failed health check, forgotten by the
            # server): the next request opens a new one.
            logger.warning("MCP server %r: connection lost; the next request reconnects", self.name)
            self.last_error = self.last_error or "connection lost"

    async def _run_session(self, live: _Live, slow: str) -> None:
        with anyio.CancelScope() as scope:
            scope.deadline = anyio.current_time() + self.connect_timeout
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._open_transport(live))
                tasks = await stack.enter_async_context(anyio.create_task_group())
                stack.callback(tasks.cancel_scope.cancel)
                forward, session_read = anyio.create_memory_object_stream[Any](0)
                tasks.start_soon(self._pump, live, read, forward)
                session = await stack.enter_async_context(
                    ClientSession(
                        session_read,
                        write,
                        message_handler=self._on_message_for(live),  # type: ignore[arg-type]
                        client_info=types.Implementation(name="tool_calling", version=VERSION),
                    )
                )
                # The current revision when the server speaks it (server/discover: no
                # handshake, no session), else the initialize handshake of the older one.
                if self.protocol == "auto":
                    await negotiate_auto(session)
                else:
                    await session.initialize()
                scope.deadline = math.inf  # connected: only the requests have deadlines now
                self.server_info = session.server_info
                self.protocol_version = session.protocol_version
                self.last_error = None
                self.connects += 1
                live.generation += 1
                live.session = session
                live.ready.set()
                info = session.server_info
                logger.info(
                    "MCP server %r: connected (%s %s, protocol %s)",
                    self.name,
                    info.name if info is not None else "?",
                    info.version if info is not None else "?",
                    session.protocol_version,
                )
                await live.wake.wait()
                live.ready.clear()
                live.session = None
        if scope.cancelled_caught:
            raise TimeoutError(slow)

    def _open_transport(self, live: _Live) -> contextlib.AbstractAsyncContextManager[Any]:
        transport = self.transport
        if isinstance(transport, StdioTransport):
            params = StdioServerParameters(
                command=transport.command,
                args=list(transport.args),
                env=dict(transport.env) if transport.env else None,
                cwd=transport.cwd,
            )
            return stdio_client(params, errlog=self._errlog or sys.stderr)
        # The session this transport is opened for is the next generation.
        on_rejected = self._on_rejected_for(live, live.generation + 1)
        return _http_transport(transport, self.connect_timeout, self.request_timeout, on_rejected)

    async def _pump(self, live: _Live, source: Any, forward: Any) -> None:
        """Forward the transport's messages to the session; its end means the session broke."""
        generation = live.generation + 1
        try:
            async with forward:
                async for item in source:
                    await forward.send(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
            pass
        if live.generation <= generation and not live.closing:
            self.last_error = "the server closed the connection"
            live.wake.set()

    def _on_message_for(self, live: _Live) -> Callable[[Any], Awaitable[None]]:
        async def on_message(message: Any) -> None:
            if isinstance(message, Exception):
                logger.warning("MCP server %r: transport error: %s", self.name, _describe(message))
                self._check_health_soon(live)
                return
            method = getattr(message, "method", None)
            if not isinstance(method, str):
                return
            for listener in list(self._listeners):
                try:
                    listener(method)
                except Exception:
                    logger.exception("MCP server %r: a notification listener failed", self.name)

        return on_message

    def _on_rejected_for(self, live: _Live, generation: int) -> Callable[[Any], Awaitable[None]]:
        """An HTTP response hook: a 4xx to a request carrying the session may mean it is gone.

        It runs in the context of the request the answer is for: a request of :meth:`_send`
        learns it was refused at the HTTP level (so it never ran); any other (the SDK's GET
        stream) makes the connection check the session.
        """

        async def on_response(response: Any) -> None:
            status = response.status_code
            # 405: a server without the optional GET stream says so, every time it is asked.
            if status < 400 or status >= 500 or status == 405:
                return
            if _SESSION_HEADER not in response.request.headers:
                return
            attempt = _attempt.get()
            if attempt is not None:
                attempt.refused = True
            elif live.generation == generation and not live.closing:
                self._check_health_soon(live)

        return on_response

    def _drop(self, live: _Live, generation: int, reason: str) -> None:
        """Stop lending session ``generation`` (if still current); the owner opens a new one."""
        if live.generation == generation and live.session is not None and not live.closing:
            self.last_error = reason
            live.ready.clear()
            live.session = None
            live.wake.set()

    def _check_health_soon(self, live: _Live) -> None:
        session, generation = live.session, live.generation
        if session is None or generation in live.checks:
            return

        async def check() -> None:
            try:
                await asyncio.wait_for(session.send_ping(), _HEALTH_CHECK_TIMEOUT)
            except Exception as exc:
                self._drop(live, generation, f"health check failed: {_describe(exc)}")
            finally:
                live.checks.pop(generation, None)

        # Kept until done: the loop holds only a weak reference to a task.
        live.checks[generation] = live.loop.create_task(check())

    # -- requests (tasks on the loop) ------------------------------------------------------------

    def _run(self, request: Callable[[_Live], Coroutine[Any, Any, T]], timeout: float | None) -> T:
        live = self._ensure_live()
        if threading.current_thread() is live.thread:
            raise RuntimeError(
                f"McpConnection {self.name!r}: the sync API cannot be used from the connection's "
                "own loop; await the async twin instead."
            )
        future = asyncio.run_coroutine_threadsafe(request(live), live.loop)
        # The coroutine bounds itself; this outer bound only guards against a wedged loop.
        limit = None if timeout is None else timeout + self.connect_timeout + 5.0
        try:
            return future.result(limit)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise McpServerTimeoutError(
                f"MCP server {self.name!r} did not answer within {timeout:g} seconds; "
                "try again later.",
                server=self.name,
                operation="request",
                timeout=timeout or 0.0,
            ) from None

    async def _arun(self, request: Callable[[_Live], Coroutine[Any, Any, T]]) -> T:
        live = self._ensure_live()
        if asyncio.get_running_loop() is live.loop:
            return await request(live)
        future = asyncio.run_coroutine_threadsafe(request(live), live.loop)
        return await asyncio.wrap_future(future)

    async def _await_ready(self, live: _Live, operation: str, timeout: float) -> ClientSession:
        if not live.ready.is_set():
            live.waiting += 1
            if live.cause is None:
                live.cause = contextvars.copy_context()
            live.demand.set()
            try:
                await asyncio.wait_for(live.ready.wait(), timeout)
            except TimeoutError:
                reason = self.last_error or "not connected yet"
                raise McpServerUnavailableError(
                    f"MCP server {self.name!r} is unavailable; {operation} was not sent. "
                    "Try again later.",
                    server=self.name,
                    operation=operation,
                    reason=reason,
                ) from None
            finally:
                live.waiting -= 1
        session = live.session
        if session is None:  # closing right now
            raise McpServerUnavailableError(
                f"MCP server {self.name!r} is closed; {operation} was not sent.",
                server=self.name,
                operation=operation,
                reason="closed",
            )
        return session

    async def _request(
        self,
        live: _Live,
        operation: str,
        timeout: float,
        send: Callable[[ClientSession, float], Awaitable[T]],
    ) -> T:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        session = await self._await_ready(live, operation, timeout)
        generation = live.generation
        try:
            return await self._send(live, session, generation, operation, timeout, deadline, send)
        except _SessionGone:
            pass
        # The server refused the request because it no longer knows the session (it restarted,
        # or expired it): the request never ran. It is sent once more, on a new session.
        logger.warning(
            "MCP server %r: the server no longer knows the session; reconnecting", self.name
        )
        self._drop(live, generation, "the server no longer knows the session")
        session = await self._await_ready(live, operation, max(0.001, deadline - loop.time()))
        try:
            return await self._send(
                live, session, live.generation, operation, timeout, deadline, send
            )
        except _SessionGone as gone:
            raise gone.error from None

    async def _send(
        self,
        live: _Live,
        session: ClientSession,
        generation: int,
        operation: str,
        timeout: float,
        deadline: float,
        send: Callable[[ClientSession, float], Awaitable[T]],
    ) -> T:
        """Send one request on ``session`` (raises ``_SessionGone`` if the server forgot it)."""
        remaining = max(0.001, deadline - asyncio.get_running_loop().time())
        attempt = _Attempt()
        token = _attempt.set(attempt)
        try:
            # The SDK bounds the wait for the answer; wait_for also bounds a blocked write.
            return await asyncio.wait_for(send(session, remaining), remaining + 1.0)
        except TimeoutError:
            raise self._timed_out(live, operation, timeout) from None
        except MCPError as exc:
            if exc.code == types.REQUEST_TIMEOUT:
                raise self._timed_out(live, operation, timeout) from None
            if exc.code == types.CONNECTION_CLOSED:
                logger.warning("MCP server %r: connection closed during %s", self.name, operation)
                self._drop(live, generation, "connection closed")
                lost = McpServerUnavailableError(
                    f"MCP server {self.name!r} closed the connection during {operation}; "
                    "its outcome is unknown. Try again later.",
                    server=self.name,
                    operation=operation,
                    reason="connection closed",
                )
                if attempt.refused:
                    # Refused at the HTTP level before the session was torn down (a check
                    # found it forgotten): the request never ran.
                    raise _SessionGone(lost) from None
                raise lost from None
            refusal = McpServerRequestError(
                f"MCP server {self.name!r} refused {operation}: {_short(exc.message)}",
                server=self.name,
                operation=operation,
                code=exc.code,
            )
            # Refused over HTTP with a 4xx: a server that lost the session refuses a ping too.
            if attempt.refused and await self._session_gone(session, deadline):
                raise _SessionGone(refusal) from None
            raise refusal from None
        except McpServerError:
            raise
        except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            self._drop(live, generation, _describe(exc))
            raise McpServerUnavailableError(
                f"MCP server {self.name!r} closed the connection during {operation}; "
                "its outcome is unknown. Try again later.",
                server=self.name,
                operation=operation,
                reason=_describe(exc),
            ) from None
        except Exception as exc:
            # An answer the SDK rejected: a result that fails the protocol's types, or
            # structured content that fails the tool's own output schema.
            logger.warning(
                "MCP server %r: invalid answer to %s: %s", self.name, operation, _describe(exc)
            )
            raise McpServerRequestError(
                f"MCP server {self.name!r} sent an invalid answer to {operation}.",
                server=self.name,
                operation=operation,
                code=None,
            ) from exc
        finally:
            _attempt.reset(token)

    async def _session_gone(self, session: ClientSession, deadline: float) -> bool:
        """Whether ``session`` fails a ping (within the request's time, at most 5 s).

        The current revision has no ping (and no session to lose): a ``server/discover`` at
        the spoken revision tells whether the server still answers.
        """
        remaining = deadline - asyncio.get_running_loop().time()
        version = session.protocol_version
        probe = (
            session.send_discover(version)
            if session.discover_result is not None and version is not None
            else session.send_ping()
        )
        try:
            await asyncio.wait_for(probe, max(0.001, min(_HEALTH_CHECK_TIMEOUT, remaining)))
        except Exception:
            return True
        return False

    def _timed_out(self, live: _Live, operation: str, timeout: float) -> McpServerTimeoutError:
        logger.warning("MCP server %r: %s timed out after %g s", self.name, operation, timeout)
        self._check_health_soon(live)  # a server that stopped answering at all is reopened
        return McpServerTimeoutError(
            f"MCP server {self.name!r} did not answer {operation} within {timeout:g} seconds; "
            "its outcome is unknown. Try again later or use another tool.",
            server=self.name,
            operation=operation,
            timeout=timeout,
        )

    async def _list_tools(self, live: _Live, timeout: float) -> list[types.Tool]:
        tools: list[types.Tool] = []
        cursor: str | None = None
        seen: set[str] = set()
        ttl: int | None = None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout * _LIST_TIMEOUT_FACTOR
        for _ in range(_LIST_PAGE_LIMIT):
            if loop.time() > deadline:
                raise self._timed_out(live, "tools/list", timeout * _LIST_TIMEOUT_FACTOR)

            async def send(
                session: ClientSession, remaining: float, cursor: str | None = cursor
            ) -> types.ListToolsResult:
                params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
                return await asyncio.wait_for(session.list_tools(params=params), remaining)

            page = await self._request(live, "tools/list", timeout, send)
            if "ttl_ms" in page.model_fields_set:  # a cache hint (revision 2026-07-28)
                ttl = page.ttl_ms if ttl is None else min(ttl, page.ttl_ms)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                self.tools_fresh_until = None if ttl is None else time.monotonic() + ttl / 1000
                return tools
            if cursor in seen:
                break
            seen.add(cursor)
        raise McpServerRequestError(
            f"MCP server {self.name!r} sent tools/list pages that never end.",
            server=self.name,
            operation="tools/list",
            code=None,
        )

    async def _call_tool(
        self,
        live: _Live,
        name: str,
        arguments: Mapping[str, Any] | None,
        meta: Mapping[str, Any] | None,
        timeout: float,
        label: str | None,
    ) -> types.CallToolResult:
        async def send(session: ClientSession, remaining: float) -> types.CallToolResult:
            return await session.call_tool(
                name,
                dict(arguments) if arguments is not None else None,
                read_timeout_seconds=remaining,
                meta=dict(meta) if meta else None,  # type: ignore[arg-type]
            )

        return await self._request(live, f"tool {(label or name)!r}", timeout, send)


class _SessionGone(Exception):
    """The server refused a request because it no longer knows the session."""

    def __init__(self, error: McpServerError) -> None:
        super().__init__(str(error))
        self.error = error
        """What the caller is told if the request is refused again on a new session."""


class _Attempt:
    """One sending of a request (:meth:`McpConnection._send`), as its HTTP answers saw it."""

    __slots__ = ("refused",)

    def __init__(self) -> None:
        self.refused = False
        """An HTTP answer to it (or to the ping that checks its session) was a 4xx."""


# The request being sent. The SDK sends a request's HTTP POST in a copy of the sender's context,
# so the response hook (``_on_rejected_for``) finds the attempt it answers.
_attempt: contextvars.ContextVar[_Attempt | None] = contextvars.ContextVar(
    "tool_calling_mcp_attempt", default=None
)


async def _wait_closing(live: _Live) -> None:
    while not live.closing:
        live.wake.clear()
        await live.wake.wait()


@contextlib.asynccontextmanager
async def _http_transport(
    transport: StreamableHttpTransport,
    connect_timeout: float,
    request_timeout: float,
    on_response: Callable[[Any], Awaitable[None]],
) -> Any:
    # The read timeout covers an SSE stream that stays open between events; each request has
    # its own deadline.
    timeout = httpx2.Timeout(
        request_timeout, connect=connect_timeout, read=max(request_timeout, 300)
    )
    async with httpx2.AsyncClient(
        headers=dict(transport.headers),
        timeout=timeout,
        event_hooks={"response": [on_response]},
    ) as client:
        async with streamable_http_client(transport.url, http_client=client) as streams:
            yield streams


def _short(text: object, limit: int = 300) -> str:
    value = " ".join(str(text).split())
    return value if len(value) <= limit else value[:limit] + "..."


def _describe(exc: BaseException) -> str:
    """``Type: message`` of an exception, unwrapping single-exception groups."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    message = _short(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
