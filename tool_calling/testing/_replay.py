"""ReplayServer: an OpenAI-compatible HTTP server that replays scripted answers or plays a demo.

Standard library only. From tests::

    steps = [{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 1}}]}, {"text": "2"}]
    with ReplayServer(steps) as server:
        model = OpenAIChatModel(base_url=server.base_url + "/v1")

From a shell (the demo answers rule-based when no real model is configured)::

    python -m tool_calling.testing.server --host 127.0.0.1 --port 8765 [--script FILE.json]
        [--mode scripted|demo] [--delay SECONDS] [--chunk-delay SECONDS]

One asyncio event loop in one daemon thread serves every connection: an answer waiting out a
delay costs a coroutine, not a thread, so the server answers hundreds of slow requests at once
(a model simulator must not be the bottleneck of the load it is used to measure). Connections
are HTTP/1.1 and kept alive between non-streamed answers; a streamed answer closes its own.

Script steps (JSON), one consumed per chat completion request:

- ``{"text": "..."}``: an answer.
- ``{"tool_calls": [{"name": "...", "arguments": {...} or "raw text", "id": "optional"}]}``:
  tool calls (``"text"`` may accompany them); ids default to ``call_1``, ``call_2``, ...
- ``{"status": 500, "body": {...}, "headers": {...}}``: an HTTP error (default OpenAI-style body).
- ``{"malformed": true}``: a 200 whose body is not valid JSON (a string sends that text).
- ``{"delay": seconds, ...}``: wait before answering with the rest of the step.
- ``{"chunk_delay": seconds, ...}``: when the answer is streamed, wait this long between its
  chunks, so that clients see the text arrive in pieces over time (ignored unless streamed).
- ``{"words_per_chunk": 1, ...}``: words per streamed text chunk (default 3); the demo answers
  word by word.
- ``{"finish_reason": "length", ...}``: overrides the finish reason of an answer.
- ``{"usage": {"prompt_tokens": 52, "completion_tokens": 2}, ...}``: the token counts the answer
  reports (``total_tokens`` is their sum unless given); by default the words of the request's
  messages and of the answer are counted.

In tests a step may also be a callable ``(request_body) -> step``, or an object with a
``to_replay_step()`` method (the builders of ``tool_calling.testing``). A callable runs on the
server's event loop: it must not block (a slow answer is a step with a ``"delay"``).

Latency, for demos and load tests: ``delay=`` (``--delay``) makes every answer whose step has no
``"delay"`` of its own wait that many seconds before its first byte, as a model takes time
before it answers; in demo mode that is every answer. A streamed answer then sends all its
chunks at once, so a streamed and a non-streamed answer take the same time (``delay``), unless
``chunk_delay=`` (``--chunk-delay``) spreads them: it waits that long before each chunk after
the first, as ``"chunk_delay"`` does for one step (and a step's own value wins).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import http.client
import io
import json
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus
from typing import Any

from tool_calling.testing._chunks import (
    WORDS_PER_CHUNK,
    count_words,
    split_arguments,
    split_text,
)
from tool_calling.testing._demo import content_text as _content_text
from tool_calling.testing._demo import demo_step as _demo_step

__all__ = ["CREATED", "ReplayServer", "main"]

CREATED = 1_700_000_000
"""The ``created`` timestamp of every answer, fixed so that tests can compare whole bodies."""

_STEP_KEYS = frozenset(
    {
        "text",
        "tool_calls",
        "status",
        "body",
        "headers",
        "malformed",
        "delay",
        "chunk_delay",
        "words_per_chunk",
        "finish_reason",
        "usage",
    }
)
_MODES = ("scripted", "demo")
_MALFORMED_BODY = '{"id": "chatcmpl-broken", "object": "chat.completion", "choices": ['
_SERVER_HEADER = "ReplayServer/1.0"
_BACKLOG = 2048
"""Pending connections the kernel queues (capped by net.core.somaxconn): a load test opens
hundreds at the same moment, and a short queue (socketserver's is 5) makes clients wait for
SYN retries, seconds each, that the server never caused."""
_MAX_HEAD = 64 * 1024
"""Longest request line plus headers; a longer head answers 431."""
_IDLE_SECONDS = 120.0
"""A kept-alive connection that sends no new request for this long is closed."""
_STARTUP_SECONDS = 10.0


def _seconds(value: Any, what: str) -> float:
    """``value`` as a number of seconds (0 or more), or a ``ValueError`` naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(
            f"ReplayServer {what} must be a number of seconds (0 or more), got {value!r}."
        )
    return float(value)


class ReplayServer:
    """An OpenAI-compatible Chat Completions server on the standard library, for tests and demos.

    In ``"scripted"`` mode every ``POST /v1/chat/completions`` consumes one step of the script
    (see the module docstring for the step format); an exhausted script answers 500 with an
    explanation. In ``"demo"`` mode the answers follow simple rules: after tool results, a text
    summarising them; a tool named in the last user message gets called; otherwise an echo
    saying the answers are scripted.

    It also serves ``GET /v1/models`` and ``GET /_requests`` (what it received, as JSON). The
    ``Authorization`` header is accepted without checking; whether one was sent is recorded.
    Every connection is served by one asyncio event loop in one daemon thread, so a delayed
    answer holds no thread of its own.
    """

    def __init__(
        self,
        steps: Iterable[Any] = (),
        *,
        mode: str = "scripted",
        host: str = "127.0.0.1",
        port: int = 0,
        model: str = "replay-model",
        log_requests: bool = False,
        delay: float = 0.0,
        chunk_delay: float = 0.0,
    ) -> None:
        """Create the server; :meth:`start` (or ``with``) runs it in a daemon thread.

        Args:
            steps: The script (ignored in demo mode).
            mode: ``"scripted"`` or ``"demo"``.
            host: Interface to bind.
            port: Port to bind; 0 picks a free one.
            model: Model name listed by ``/v1/models`` when requests name none.
            log_requests: Print one line per request to stderr.
            delay: Seconds every answer waits before its first byte, unless its step says
                otherwise (``"delay"``): a model's latency, for demos and load tests.
            chunk_delay: Seconds between the chunks of a streamed answer, unless its step says
                otherwise (``"chunk_delay"``); 0 sends them together after ``delay``.

        Raises:
            ValueError: unknown mode, a malformed step, or a delay that is not 0 or more.
        """
        if mode not in _MODES:
            raise ValueError(f"ReplayServer mode must be 'scripted' or 'demo', got {mode!r}.")
        self.mode = mode
        self.host = host
        self.model = model
        self.log_requests = log_requests
        self.delay = _seconds(delay, "delay")
        self.chunk_delay = _seconds(chunk_delay, "chunk_delay")
        self._steps = [_normalise_step(step, f"step {n}") for n, step in enumerate(steps, 1)]
        self._requested_port = port
        self._port = port
        self._position = 0
        self._bodies: list[Any] = []
        self._authorization: list[bool] = []
        self._used_ids = {
            call["id"]
            for step in self._steps
            if isinstance(step, Mapping)
            for call in step.get("tool_calls") or []
            if call.get("id")
        }
        self._next_id = 1
        # The answers are made on the loop's thread; the lock guards what other threads read.
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[asyncio.Task[None]] = set()

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> ReplayServer:
        """Bind and serve in a daemon thread; return ``self``.

        Raises:
            OSError: the address cannot be bound (raised here, in the caller's thread).
            RuntimeError: the server is already running.
        """
        if self._thread is not None:
            raise RuntimeError("ReplayServer is already running.")
        sock = self._bind()
        loop = asyncio.new_event_loop()
        started: concurrent.futures.Future[None] = concurrent.futures.Future()
        thread = threading.Thread(
            target=self._run_loop,
            args=(loop, sock, started),
            name=f"ReplayServer:{self.port}",
            daemon=True,
        )
        thread.start()
        try:
            started.result(timeout=_STARTUP_SECONDS)
        except BaseException:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=5)
            sock.close()
            raise
        self._loop, self._thread = loop, thread
        return self

    def stop(self) -> None:
        """Stop serving, close every open connection and release the port."""
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        if loop is None or thread is None:
            return
        # A loop blocked by a callable step that never returns cannot be closed in time: the
        # thread is a daemon, and the port is released when the process ends.
        with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
            asyncio.run_coroutine_threadsafe(self._close(), loop).result(timeout=5)
        with contextlib.suppress(RuntimeError):  # the loop already closed
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)

    def __enter__(self) -> ReplayServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _bind(self) -> socket.socket:
        # Bound here, in the caller's thread, so that a port in use raises where start() was
        # called and the port is known before start() returns.
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET)
        try:
            # As socketserver's allow_reuse_address: a test restarting on the same port does not
            # wait for the previous server's connections in TIME_WAIT.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self._requested_port))
            sock.listen(_BACKLOG)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        self._port = int(sock.getsockname()[1])
        return sock

    def _run_loop(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        started: concurrent.futures.Future[None],
    ) -> None:
        asyncio.set_event_loop(loop)
        try:
            try:
                self._server = loop.run_until_complete(
                    asyncio.start_server(self._serve_connection, sock=sock, limit=_MAX_HEAD)
                )
            except BaseException as exc:
                started.set_exception(exc)
                return
            started.set_result(None)
            loop.run_forever()
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()  # closes the listening socket: the port is free from here on
        connections = list(self._connections)
        for task in connections:
            task.cancel()
        await asyncio.gather(*connections, return_exceptions=True)
        if server is not None:
            await server.wait_closed()

    # -- inspection ----------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The bound port (the requested one before the server first starts)."""
        return self._port

    @property
    def base_url(self) -> str:
        """``http://host:port``; OpenAI clients want ``base_url + "/v1"``."""
        return f"http://{self.host}:{self.port}"

    @property
    def requests(self) -> list[Any]:
        """The JSON bodies of the chat completion requests received, in order."""
        with self._lock:
            return list(self._bodies)

    @property
    def authorization(self) -> list[bool]:
        """For each request, whether it carried an ``Authorization`` header."""
        with self._lock:
            return list(self._authorization)

    @property
    def remaining_steps(self) -> int:
        """How many script steps are left."""
        with self._lock:
            return len(self._steps) - self._position

    # -- answering -----------------------------------------------------------------------------

    def _record(self, body: Any, authorization: bool) -> int:
        with self._lock:
            self._bodies.append(body)
            self._authorization.append(authorization)
            return len(self._bodies)

    def _step_for(self, body: Any, number: int) -> Mapping[str, Any]:
        if self.mode == "demo":
            return _demo_step(body if isinstance(body, Mapping) else {})
        with self._lock:
            if self._position >= len(self._steps):
                return {
                    "status": 500,
                    "headers": {"x-should-retry": "false"},
                    "body": _error_body(
                        f"ReplayServer script exhausted: request {number} arrived but the script "
                        f"has only {len(self._steps)} step(s).",
                        "replay_script_exhausted",
                    ),
                }
            step = self._steps[self._position]
            self._position += 1
        if callable(step):
            step = _normalise_step(step(body), f"the callable step of request {number}")
        result: Mapping[str, Any] = step
        return result

    def _new_id(self) -> str:
        with self._lock:
            while f"call_{self._next_id}" in self._used_ids:
                self._next_id += 1
            new_id = f"call_{self._next_id}"
            self._used_ids.add(new_id)
            return new_id

    def _answer(self, step: Mapping[str, Any], body: Mapping[str, Any], number: int) -> _Answer:
        """Return the message of a text or tool-call step, with ids assigned."""
        calls: list[dict[str, Any]] = [
            {
                "id": call.get("id") or self._new_id(),
                "type": "function",
                "function": {"name": call["name"], "arguments": _arguments_text(call)},
            }
            for call in step.get("tool_calls") or []
        ]
        text = step.get("text")
        finish = step.get("finish_reason") or ("tool_calls" if calls else "stop")
        reported = step.get("usage") or {}
        completion_tokens = reported.get("completion_tokens")
        if completion_tokens is None:
            completion_tokens = count_words(text) + count_words(
                *(f"{c['function']['name']} {c['function']['arguments']}" for c in calls)
            )
        prompt_tokens = reported.get("prompt_tokens")
        if prompt_tokens is None:
            prompt_tokens = _prompt_words(body)
        total_tokens = reported.get("total_tokens", prompt_tokens + completion_tokens)
        return _Answer(
            completion_id=f"chatcmpl-replay-{number}",
            model=str(body.get("model") or self.model),
            text=text,
            tool_calls=calls,
            finish_reason=finish,
            words_per_chunk=int(step.get("words_per_chunk") or WORDS_PER_CHUNK),
            usage={
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": total_tokens,
            },
        )

    # -- HTTP ----------------------------------------------------------------------------------

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Serve the requests of one connection, one after another, until either side closes."""
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        peer = writer.get_extra_info("peername")
        client = str(peer[0]) if isinstance(peer, tuple) and peer else "-"
        try:
            while True:
                try:
                    request = await _read_request(reader)
                except _BadRequest as bad:
                    exchange = _Exchange(self, writer, client, None)
                    await exchange.send_json(bad.status, _error_body(bad.message, "bad_request"))
                    return
                if request is None:
                    return
                exchange = _Exchange(self, writer, client, request)
                await self._handle(exchange)
                if not exchange.keep_alive:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):  # the client went away
            pass
        finally:
            if task is not None:
                self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _handle(self, exchange: _Exchange) -> None:
        request = exchange.request
        assert request is not None
        path = request.target.split("?", 1)[0].rstrip("/")
        if request.method == "GET":
            await self._get(exchange, path)
        elif request.method == "POST":
            try:
                await self._post(exchange, path)
            except (ConnectionError, asyncio.CancelledError):
                raise
            except Exception as exc:
                # An answer says what went wrong; without one the client would retry until it
                # reported a timeout. The traceback goes to stderr, as socketserver printed it.
                exchange.keep_alive = False
                print(
                    f"ReplayServer: exception while answering {request.line!r} from "
                    f"{exchange.client}:",
                    file=sys.stderr,
                )
                traceback.print_exc()
                if not exchange.started:
                    with contextlib.suppress(OSError):
                        await exchange.send_json(
                            500,
                            _error_body(f"ReplayServer failed: {exc!r}", "replay_server_error"),
                        )
        else:
            exchange.keep_alive = False
            await exchange.send_json(
                501, _error_body(f"Unsupported method {request.method!r}", "not_implemented")
            )

    async def _get(self, exchange: _Exchange, path: str) -> None:
        """Serve the model list and the recorded requests."""
        if path in ("/v1/models", "/models"):
            await exchange.send_json(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": self.model,
                            "object": "model",
                            "created": CREATED,
                            "owned_by": "tool_calling-replay",
                        }
                    ],
                },
            )
        elif path == "/_requests":
            await exchange.send_json(
                200, {"requests": self.requests, "authorization": self.authorization}
            )
        else:
            await exchange.send_json(404, _error_body(f"No route for GET {path}", "not_found"))

    async def _post(self, exchange: _Exchange, path: str) -> None:
        """Answer a chat completion request."""
        if path not in ("/v1/chat/completions", "/chat/completions"):
            await exchange.send_json(404, _error_body(f"No route for POST {path}", "not_found"))
            return
        request = exchange.request
        assert request is not None
        authorized = "Authorization" in request.headers
        try:
            body = json.loads(request.body or b"null")
        except (ValueError, RecursionError):
            number = self._record(None, authorized)
            message = "The request body is not JSON (or is nested too deeply to parse)."
            await exchange.send_json(
                400, _error_body(message, "invalid_request_error"), number=number
            )
            return
        number = self._record(body, authorized)
        if not isinstance(body, Mapping):
            await exchange.send_json(
                400,
                _error_body("The request body must be a JSON object.", "invalid_request_error"),
                number=number,
            )
            return
        try:
            step = self._step_for(body, number)
        except (TypeError, ValueError) as exc:
            await exchange.send_json(
                500, _error_body(f"ReplayServer: {exc}", "replay_step_error"), number=number
            )
            return
        delay = step.get("delay")
        delay = self.delay if delay is None else float(delay)
        if delay:
            await asyncio.sleep(delay)
        stream = bool(body.get("stream"))
        if "status" in step:
            status = int(step["status"])
            payload = step.get("body")
            if payload is None:
                payload = _error_body(
                    f"Scripted {status} {_phrase(status)}",
                    "server_error" if status >= 500 else "invalid_request_error",
                )
            await exchange.send_json(status, payload, step.get("headers"), number=number)
            return
        if step.get("malformed"):
            bad = step["malformed"] if isinstance(step["malformed"], str) else _MALFORMED_BODY
            if stream:
                await exchange.send_events([bad], number, pause=0.0)
            else:
                await exchange.send_json(200, bad, step.get("headers"), number=number)
            return
        answer = self._answer(step, body, number)
        if not stream:
            await exchange.send_json(200, answer.completion(), step.get("headers"), number=number)
            return
        options = body.get("stream_options")
        include_usage = isinstance(options, Mapping) and bool(options.get("include_usage"))
        pause = step.get("chunk_delay")
        pause = self.chunk_delay if pause is None else float(pause)
        events = [json.dumps(chunk) for chunk in answer.chunks(include_usage)] + ["[DONE]"]
        await exchange.send_events(events, number, pause=pause)


@dataclass(frozen=True, kw_only=True)
class _Answer:
    completion_id: str
    model: str
    text: str | None
    tool_calls: list[dict[str, Any]]
    finish_reason: str
    words_per_chunk: int
    usage: dict[str, int]

    def completion(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.text, "refusal": None}
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        return {
            "id": self.completion_id,
            "object": "chat.completion",
            "created": CREATED,
            "model": self.model,
            "system_fingerprint": "fp_replay",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": self.finish_reason,
                }
            ],
            "usage": self.usage,
        }

    def chunks(self, include_usage: bool) -> Iterator[dict[str, Any]]:
        """Stream chunks: role, text in pieces, interleaved tool-call pieces, finish, usage."""
        base = {
            "id": self.completion_id,
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": self.model,
            "system_fingerprint": "fp_replay",
        }

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            extra = {"usage": None} if include_usage else {}
            return {**base, "choices": [choice], **extra}

        yield chunk({"role": "assistant", "content": ""})
        for piece in split_text(self.text or "", self.words_per_chunk):
            yield chunk({"content": piece})
        # Each call: a first piece with id and name, then its arguments in pieces. The calls'
        # pieces are interleaved (round robin) so clients must join them by index.
        per_call: list[list[dict[str, Any]]] = []
        for index, call in enumerate(self.tool_calls):
            function = call["function"]
            pieces = [
                {
                    "index": index,
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": function["name"], "arguments": ""},
                }
            ]
            pieces += [
                {"index": index, "function": {"arguments": part}}
                for part in split_arguments(function["arguments"])
            ]
            per_call.append(pieces)
        for round_ in range(max((len(p) for p in per_call), default=0)):
            for pieces in per_call:
                if round_ < len(pieces):
                    yield chunk({"tool_calls": [pieces[round_]]})
        yield chunk({}, self.finish_reason)
        if include_usage:
            yield {**base, "choices": [], "usage": self.usage}


# -- HTTP/1.1 on asyncio streams -------------------------------------------------------------------


class _BadRequest(Exception):
    """A request that cannot be parsed: answered with ``status`` and the connection closed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class _Request:
    line: str
    method: str
    target: str
    headers: http.client.HTTPMessage
    body: bytes
    keep_alive: bool


async def _read_request(reader: asyncio.StreamReader) -> _Request | None:
    """The next request of a connection; ``None`` when the client closed it or stayed idle."""
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _IDLE_SECONDS)
    except asyncio.IncompleteReadError as closed:
        if closed.partial.strip():
            raise _BadRequest(400, "The request ended before its headers did.") from None
        return None
    except TimeoutError:
        return None
    except asyncio.LimitOverrunError:
        raise _BadRequest(431, "The request line and headers are too large.") from None
    head = head.lstrip(b"\r\n")  # RFC 9112: a server ignores empty lines before a request
    line_bytes, _, header_bytes = head.partition(b"\r\n")
    line = line_bytes.decode("latin-1")
    parts = line.split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _BadRequest(400, f"Bad request line {line!r}.")
    method, target, version = parts
    try:
        headers = http.client.parse_headers(io.BytesIO(header_bytes))
    except http.client.HTTPException as exc:
        raise _BadRequest(400, f"Bad request headers: {exc}") from None
    if "chunked" in (headers.get("Transfer-Encoding") or "").lower():
        body = await _read_chunked(reader)
    else:
        raw_length = (headers.get("Content-Length") or "0").strip()
        if not raw_length.isdigit():
            raise _BadRequest(400, f"Bad Content-Length {raw_length!r}.")
        length = int(raw_length)
        body = await reader.readexactly(length) if length else b""
    connection = (headers.get("Connection") or "").lower()
    if version == "HTTP/1.0":
        keep_alive = "keep-alive" in connection
    else:
        keep_alive = "close" not in connection
    return _Request(line, method, target, headers, body, keep_alive)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    """A body sent with ``Transfer-Encoding: chunked``, joined (trailers read and dropped)."""
    parts: list[bytes] = []
    while True:
        size_line = await reader.readuntil(b"\r\n")
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise _BadRequest(400, "Bad chunk size in a chunked body.") from None
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


class _Exchange:
    """One request and its answer on a connection."""

    def __init__(
        self,
        replay: ReplayServer,
        writer: asyncio.StreamWriter,
        client: str,
        request: _Request | None,
    ) -> None:
        self.replay = replay
        self.writer = writer
        self.client = client
        self.request = request
        self.keep_alive = request is not None and request.keep_alive
        self.started = False
        """Whether anything of the answer was written (an error can then no longer be sent)."""

    def _head(
        self, status: int, headers: Sequence[tuple[str, object]], number: int | None
    ) -> bytes:
        lines = [
            f"HTTP/1.1 {status} {_phrase(status)}",
            f"Server: {_SERVER_HEADER}",
            f"Date: {formatdate(usegmt=True)}",
        ]
        lines += [f"{name}: {value}" for name, value in headers]
        if number is not None:
            lines.append(f"x-request-id: req_replay_{number}")
        return ("\r\n".join(lines) + "\r\n").encode("latin-1")

    def _log(self, status: int) -> None:
        if self.replay.log_requests:
            line = self.request.line if self.request is not None else "-"
            sys.stderr.write(f'[replay] {self.client} "{line}" {status} -\n')

    async def send_json(
        self,
        status: int,
        payload: object,
        headers: Mapping[str, str] | None = None,
        *,
        number: int | None = None,
    ) -> None:
        """Answer with a JSON body (a string is sent as it is)."""
        data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
        fields: list[tuple[str, object]] = [
            ("Content-Type", "application/json"),
            ("Content-Length", len(data)),
        ]
        fields += list((headers or {}).items())
        fields.append(("Connection", "keep-alive" if self.keep_alive else "close"))
        self.started = True
        self.writer.write(self._head(status, fields, number) + b"\r\n" + data)
        self._log(status)
        await self.writer.drain()

    async def send_events(self, events: Sequence[str], number: int, *, pause: float) -> None:
        """Answer with a Server-Sent Events stream of ``events``, then close the connection.

        With ``pause`` each event after the first waits that long; without, all go in one write.
        """
        self.keep_alive = False
        fields: list[tuple[str, object]] = [
            ("Content-Type", "text/event-stream"),
            ("Cache-Control", "no-cache"),
            ("Connection", "close"),
        ]
        self.started = True
        self.writer.write(self._head(200, fields, number) + b"\r\n")
        self._log(200)
        if not pause:
            self.writer.write(b"".join(f"data: {data}\n\n".encode() for data in events))
            await self.writer.drain()
            return
        await self.writer.drain()
        for index, data in enumerate(events):
            if index:
                await asyncio.sleep(pause)
            self.writer.write(f"data: {data}\n\n".encode())
            await self.writer.drain()


# -- steps -----------------------------------------------------------------------------------------


def _normalise_step(step: Any, where: str) -> Any:
    """Return ``step`` as a JSON step (or a callable to call per request); raise if malformed."""
    if hasattr(step, "to_replay_step"):
        step = step.to_replay_step()
    elif callable(step):
        return step
    if not isinstance(step, Mapping):
        raise TypeError(f"ReplayServer {where} must be a JSON object, got {step!r}.")
    unknown = sorted(set(step) - _STEP_KEYS)
    if unknown:
        raise ValueError(
            f"ReplayServer {where} has unknown key(s) {', '.join(map(repr, unknown))}; "
            f"the keys are {', '.join(sorted(_STEP_KEYS))}."
        )
    for key in ("delay", "chunk_delay"):
        seconds = step.get(key)
        if seconds is not None and (
            isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0
        ):
            raise ValueError(
                f"ReplayServer {where}: {key!r} must be a number of seconds (0 or more), "
                f"got {seconds!r}."
            )
    words = step.get("words_per_chunk")
    if words is not None and (isinstance(words, bool) or not isinstance(words, int) or words < 1):
        raise ValueError(
            f"ReplayServer {where}: 'words_per_chunk' must be a whole number (1 or more), "
            f"got {words!r}."
        )
    usage = step.get("usage")
    if usage is not None and (
        not isinstance(usage, Mapping)
        or set(usage) - {"prompt_tokens", "completion_tokens", "total_tokens"}
        or any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in usage.values())
    ):
        raise ValueError(
            f"ReplayServer {where}: 'usage' must map prompt_tokens, completion_tokens and "
            f"total_tokens to counts (0 or more), got {usage!r}."
        )
    calls = step.get("tool_calls")
    if calls is not None:
        if not isinstance(calls, list) or not calls:
            raise ValueError(f"ReplayServer {where}: 'tool_calls' must be a non-empty list.")
        for call in calls:
            if not isinstance(call, Mapping) or not isinstance(call.get("name"), str):
                raise ValueError(f"ReplayServer {where}: every tool call needs a 'name'.")
    if not {"text", "tool_calls", "status", "malformed"} & set(step):
        step = {**step, "text": ""}
    return dict(step)


def _arguments_text(call: Mapping[str, Any]) -> str:
    arguments = call.get("arguments")
    if arguments is None:
        return "{}"
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, separators=(",", ":"), ensure_ascii=False)


def _error_body(message: str, error_type: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": None, "code": None}}


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def _prompt_words(body: Mapping[str, Any]) -> int:
    words = 0
    for message in body.get("messages") or []:
        if not isinstance(message, Mapping):
            continue
        words += count_words(_content_text(message.get("content")))
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            words += count_words(f"{function.get('name', '')} {function.get('arguments', '')}")
    return words


# -- command line --------------------------------------------------------------------------------


def _load_script(path: str) -> list[Any]:
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    if isinstance(data, Mapping):
        data = data.get("steps")
    if not isinstance(data, list):
        raise SystemExit(f"{path}: expected a JSON list of steps or an object with 'steps'.")
    return data


def _seconds_argument(text: str) -> float:
    try:
        return _seconds(float(text), "delay")
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds (0 or more), got {text!r}"
        ) from None


def _banner(server: ReplayServer) -> str:
    line = "=" * 78
    lines = [
        line,
        f"  tool_calling REPLAY SERVER ({server.mode} mode)",
        "  THE ANSWERS ARE SCRIPTED. THEY DO NOT COME FROM A REAL MODEL.",
        f"  OpenAI-compatible API at {server.base_url}/v1",
        f"  e.g. OPENAI_BASE_URL={server.base_url}/v1",
    ]
    if server.delay or server.chunk_delay:
        lines.append(
            f"  Simulated latency: {server.delay:g} s before each answer, "
            f"{server.chunk_delay:g} s between the chunks of a streamed one"
        )
    return "\n".join([*lines, line])


def main(argv: Sequence[str] | None = None) -> int:
    """Run the replay server from the command line until interrupted."""
    parser = argparse.ArgumentParser(
        prog="python -m tool_calling.testing.server",
        description="OpenAI-compatible server answering with scripted or rule-based replies.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    parser.add_argument("--script", help="JSON file: a list of steps (scripted mode)")
    parser.add_argument("--mode", choices=_MODES, help="default: scripted with --script, else demo")
    parser.add_argument("--model", default="replay-model", help="model name in /v1/models")
    parser.add_argument(
        "--delay",
        type=_seconds_argument,
        default=0.0,
        metavar="SECONDS",
        help="wait this long before each answer (a model's latency; a step's own 'delay' wins)",
    )
    parser.add_argument(
        "--chunk-delay",
        type=_seconds_argument,
        default=0.0,
        metavar="SECONDS",
        help="wait this long between the chunks of a streamed answer (default 0: sent together)",
    )
    parser.add_argument("--quiet", action="store_true", help="do not log requests")
    args = parser.parse_args(argv)
    steps = _load_script(args.script) if args.script else []
    mode = args.mode or ("scripted" if args.script else "demo")
    server = ReplayServer(
        steps,
        mode=mode,
        host=args.host,
        port=args.port,
        model=args.model,
        log_requests=not args.quiet,
        delay=args.delay,
        chunk_delay=args.chunk_delay,
    )
    # Stop on SIGINT and SIGTERM even when started from a background job, which inherits
    # SIGINT ignored (a supervisor such as scripts/devserver.py stops it with SIGINT).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    server.start()
    try:
        print(_banner(server), flush=True)
        print(f"Listening on {server.base_url}/v1", flush=True)
        while True:  # the server runs in its thread; this one waits for a signal
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0
