"""ReplayServer: an OpenAI-compatible HTTP server that replays scripted answers or plays a demo.

Standard library only. From tests::

    steps = [{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 1}}]}, {"text": "2"}]
    with ReplayServer(steps) as server:
        model = OpenAIChatModel(base_url=server.base_url + "/v1")

From a shell (the demo answers rule-based when no real model is configured)::

    python -m tool_calling.testing.server --host 127.0.0.1 --port 8765 [--script FILE.json]
        [--mode scripted|demo]

Script steps (JSON), one consumed per chat completion request:

- ``{"text": "..."}``: an answer.
- ``{"tool_calls": [{"name": "...", "arguments": {...} or "raw text", "id": "optional"}]}``:
  tool calls (``"text"`` may accompany them); ids default to ``call_1``, ``call_2``, ...
- ``{"status": 500, "body": {...}, "headers": {...}}``: an HTTP error (default OpenAI-style body).
- ``{"malformed": true}``: a 200 whose body is not valid JSON (a string sends that text).
- ``{"delay": seconds, ...}``: wait before answering with the rest of the step.
- ``{"chunk_delay": seconds, ...}``: when the answer is streamed, wait this long between its
  chunks, so that clients see the text arrive in pieces over time (ignored unless streamed).
- ``{"finish_reason": "length", ...}``: overrides the finish reason of an answer.

In tests a step may also be a callable ``(request_body) -> step``, or an object with a
``to_replay_step()`` method (the builders of ``tool_calling.testing``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tool_calling.testing._chunks import count_words, split_arguments, split_text

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
        "finish_reason",
    }
)
_MODES = ("scripted", "demo")
_MALFORMED_BODY = '{"id": "chatcmpl-broken", "object": "chat.completion", "choices": ['
_STOPWORDS = frozenset(
    """a an and are as at be by can could do does for from give how i in is it me my of on or
    please show tell that the this to use call run what whats what's when where which who with
    would you your get set find about named called""".split()
)
_PREPOSITIONS = frozenset({"in", "for", "of", "at", "to", "from", "about", "named", "called"})


class ReplayServer:
    """An OpenAI-compatible Chat Completions server on the standard library, for tests and demos.

    In ``"scripted"`` mode every ``POST /v1/chat/completions`` consumes one step of the script
    (see the module docstring for the step format); an exhausted script answers 500 with an
    explanation. In ``"demo"`` mode the answers follow simple rules: after tool results, a text
    summarising them; a tool named in the last user message gets called; otherwise an echo
    saying the answers are scripted.

    It also serves ``GET /v1/models`` and ``GET /_requests`` (what it received, as JSON). The
    ``Authorization`` header is accepted without checking; whether one was sent is recorded.
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
    ) -> None:
        """Create the server; :meth:`start` (or ``with``) runs it in a daemon thread.

        Args:
            steps: The script (ignored in demo mode).
            mode: ``"scripted"`` or ``"demo"``.
            host: Interface to bind.
            port: Port to bind; 0 picks a free one.
            model: Model name listed by ``/v1/models`` when requests name none.
            log_requests: Print one line per request to stderr.

        Raises:
            ValueError: unknown mode or a malformed step.
        """
        if mode not in _MODES:
            raise ValueError(f"ReplayServer mode must be 'scripted' or 'demo', got {mode!r}.")
        self.mode = mode
        self.host = host
        self.model = model
        self.log_requests = log_requests
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
        self._lock = threading.Lock()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> ReplayServer:
        """Bind and serve in a daemon thread; return ``self``."""
        if self._httpd is not None:
            raise RuntimeError("ReplayServer is already running.")
        self._httpd = self._bind()
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"ReplayServer:{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port."""
        httpd, thread = self._httpd, self._thread
        self._httpd = self._thread = None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> ReplayServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _bind(self) -> _HTTPServer:
        httpd = _HTTPServer((self.host, self._requested_port), _Handler)
        httpd.replay = self
        self._port = int(httpd.server_address[1])
        return httpd

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
        completion_tokens = count_words(text) + count_words(
            *(f"{c['function']['name']} {c['function']['arguments']}" for c in calls)
        )
        prompt_tokens = _prompt_words(body)
        return _Answer(
            completion_id=f"chatcmpl-replay-{number}",
            model=str(body.get("model") or self.model),
            text=text,
            tool_calls=calls,
            finish_reason=finish,
            usage={
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        )


@dataclass(frozen=True, kw_only=True)
class _Answer:
    completion_id: str
    model: str
    text: str | None
    tool_calls: list[dict[str, Any]]
    finish_reason: str
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
        for piece in split_text(self.text or ""):
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


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    replay: ReplayServer


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
    server_version = "ReplayServer/1.0"

    # -- plumbing ------------------------------------------------------------------------------

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        if self.server.replay.log_requests:
            sys.stderr.write(f"[replay] {self.address_string()} {format % args}\n")

    def _send_json(
        self,
        status: int,
        payload: object,
        headers: Mapping[str, str] | None = None,
        *,
        number: int | None = None,
    ) -> None:
        data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if number is not None:
            self.send_header("x-request-id", f"req_replay_{number}")
        for name, value in (headers or {}).items():
            self.send_header(name, str(value))
        self.end_headers()
        self.wfile.write(data)

    def _start_events(self, number: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.send_header("x-request-id", f"req_replay_{number}")
        self.end_headers()

    def _send_event(self, data: str) -> None:
        self.wfile.write(f"data: {data}\n\n".encode())
        self.wfile.flush()

    # -- routes --------------------------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        """Serve the model list and the recorded requests."""
        path = self.path.split("?", 1)[0].rstrip("/")
        replay = self.server.replay
        if path in ("/v1/models", "/models"):
            self._send_json(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": replay.model,
                            "object": "model",
                            "created": CREATED,
                            "owned_by": "tool_calling-replay",
                        }
                    ],
                },
            )
        elif path == "/_requests":
            self._send_json(
                200, {"requests": replay.requests, "authorization": replay.authorization}
            )
        else:
            self._send_json(404, _error_body(f"No route for GET {path}", "not_found"))

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        """Answer chat completion requests; a failure of the server itself answers 500."""
        try:
            self._post()
        except (BrokenPipeError, ConnectionResetError):  # the client went away
            pass
        except Exception as exc:
            # Without this the thread dies, the connection drops unanswered and the client
            # retries until it reports a timeout; an answer says what went wrong.
            with contextlib.suppress(OSError):
                self._send_json(
                    500, _error_body(f"ReplayServer failed: {exc!r}", "replay_server_error")
                )
            raise  # socketserver prints the traceback

    def _post(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path not in ("/v1/chat/completions", "/chat/completions"):
            self._send_json(404, _error_body(f"No route for POST {path}", "not_found"))
            return
        replay = self.server.replay
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw or b"null")
        except (ValueError, RecursionError):
            number = replay._record(None, "Authorization" in self.headers)
            message = "The request body is not JSON (or is nested too deeply to parse)."
            self._send_json(400, _error_body(message, "invalid_request_error"), number=number)
            return
        number = replay._record(body, "Authorization" in self.headers)
        if not isinstance(body, Mapping):
            self._send_json(
                400,
                _error_body("The request body must be a JSON object.", "invalid_request_error"),
                number=number,
            )
            return
        try:
            step = replay._step_for(body, number)
        except (TypeError, ValueError) as exc:
            self._send_json(
                500, _error_body(f"ReplayServer: {exc}", "replay_step_error"), number=number
            )
            return
        if step.get("delay"):
            time.sleep(float(step["delay"]))
        stream = bool(body.get("stream"))
        if "status" in step:
            status = int(step["status"])
            payload = step.get("body")
            if payload is None:
                payload = _error_body(
                    f"Scripted {status} {_phrase(status)}",
                    "server_error" if status >= 500 else "invalid_request_error",
                )
            self._send_json(status, payload, step.get("headers"), number=number)
            return
        if step.get("malformed"):
            bad = step["malformed"] if isinstance(step["malformed"], str) else _MALFORMED_BODY
            if stream:
                self._start_events(number)
                self._send_event(bad)
            else:
                self._send_json(200, bad, step.get("headers"), number=number)
            return
        answer = replay._answer(step, body, number)
        if not stream:
            self._send_json(200, answer.completion(), step.get("headers"), number=number)
            return
        options = body.get("stream_options")
        include_usage = isinstance(options, Mapping) and bool(options.get("include_usage"))
        pause = float(step.get("chunk_delay") or 0)
        self._start_events(number)
        try:
            for index, chunk in enumerate(answer.chunks(include_usage)):
                if pause and index:
                    time.sleep(pause)
                self._send_event(json.dumps(chunk))
            self._send_event("[DONE]")
        except (BrokenPipeError, ConnectionResetError):  # the client went away mid-stream
            pass


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


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            str(part.get("text") or "") for part in content if isinstance(part, Mapping)
        )
    return ""


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


# -- demo mode -------------------------------------------------------------------------------------


def _demo_step(body: Mapping[str, Any]) -> dict[str, Any]:
    """Return the rule-based answer of demo mode for a chat completion request body."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, Mapping)]
    if messages and messages[-1].get("role") == "tool":
        return {"text": _summarise_tool_results(messages)}
    user_text = next(
        (_content_text(m.get("content")) for m in reversed(messages) if m.get("role") == "user"),
        "",
    )
    tools = [
        tool["function"]
        for tool in body.get("tools") or []
        if isinstance(tool, Mapping)
        and isinstance(tool.get("function"), Mapping)
        and isinstance(tool["function"].get("name"), str)
    ]
    matching = [tool for tool in tools if _mentions(user_text, tool["name"])]
    if matching:
        explicit = _json_object_in(user_text)
        return {
            "tool_calls": [
                {
                    "name": tool["name"],
                    "arguments": explicit
                    if explicit is not None
                    else _fill_arguments(tool.get("parameters") or {}, user_text, tool["name"]),
                }
                for tool in matching
            ]
        }
    return {
        "text": f"[scripted demo answer, not a real model] You said: {user_text!r}. "
        "Name one of the offered tools in your message and this demo server will call it."
    }


def _summarise_tool_results(messages: Sequence[Mapping[str, Any]]) -> str:
    names: dict[str, str] = {}
    for message in messages:
        for call in message.get("tool_calls") or []:
            if isinstance(call, Mapping):
                names[str(call.get("id"))] = str((call.get("function") or {}).get("name"))
    results = []
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        name = names.get(str(message.get("tool_call_id")), "tool")
        results.append(f"{name}: {_content_text(message.get('content'))}")
    return "Here is what the tools returned: " + "; ".join(reversed(results))


# Words of a tool name that say nothing about what it is for ("get_weather" is about weather).
_GENERIC_WORDS = {"get", "set", "list", "fetch", "find", "current", "lookup", "look", "up", "do"}


def _has_word(text: str, word: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text, re.IGNORECASE) is not None


def _mentions(text: str, name: str) -> bool:
    """True when ``text`` names the tool, or uses every meaningful word of its name."""
    if _has_word(text, name) or _has_word(text, name.replace("_", " ")):
        return True
    words = [w for w in re.split(r"[_.\-]+", name.lower()) if w and w not in _GENERIC_WORDS]
    return bool(words) and all(_has_word(text, w) for w in words)


def _json_object_in(text: str) -> dict[str, Any] | None:
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return None
    try:
        value = json.loads(text[start : end + 1])
        json.dumps(value)  # the answer must be able to carry it
    except (ValueError, RecursionError):  # not JSON, or nested too deeply for Python's parser
        return None
    return value if isinstance(value, dict) else None


def _schema_types(schema: Mapping[str, Any]) -> list[str]:
    declared = schema.get("type")
    types = [declared] if isinstance(declared, str) else list(declared or [])
    for option in schema.get("anyOf") or []:
        if isinstance(option, Mapping):
            types += _schema_types(option)
    return types


def _fill_arguments(schema: Mapping[str, Any], text: str, tool_name: str) -> dict[str, Any]:
    """Best-effort arguments for the required parameters, from the words of ``text``."""
    properties = schema.get("properties") or {}
    numbers = iter(re.findall(r"-?\d+(?:\.\d+)?", text))
    words = iter(_candidate_words(text, tool_name))
    arguments: dict[str, Any] = {}
    for name in schema.get("required") or []:
        spec = properties.get(name) or {}
        types = _schema_types(spec)
        if "null" in types:
            arguments[name] = None
        elif spec.get("enum"):
            options = list(spec["enum"])
            arguments[name] = next(
                (o for o in options if isinstance(o, str) and _mentions(text, o)), options[0]
            )
        elif "integer" in types or "number" in types:
            number = next(numbers, "0")
            value = float(number)
            arguments[name] = int(value) if "integer" in types or value.is_integer() else value
        elif "boolean" in types:
            arguments[name] = True
        elif "array" in types:
            arguments[name] = []
        elif "object" in types:
            arguments[name] = {}
        else:
            arguments[name] = next(words, "")
    return arguments


def _candidate_words(text: str, tool_name: str) -> list[str]:
    """Words likely to be argument values: quoted text, words after prepositions, names."""
    skip = _STOPWORDS | {part.lower() for part in re.split(r"[_\W]+", tool_name) if part}
    tokens = re.findall(r"[^\W\d_][\w'-]*", text)
    ordered = re.findall(r'"([^"]+)"', text)
    ordered += [
        token
        for previous, token in zip(tokens, tokens[1:], strict=False)
        if previous.lower() in _PREPOSITIONS
    ]
    ordered += [token for token in tokens[1:] if token[0].isupper()]
    ordered += [token for token in tokens if len(token) > 2]
    seen: set[str] = set()
    result = []
    for word in ordered:
        if word.lower() not in skip and word not in seen:
            seen.add(word)
            result.append(word)
    return result


# -- command line --------------------------------------------------------------------------------


def _load_script(path: str) -> list[Any]:
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    if isinstance(data, Mapping):
        data = data.get("steps")
    if not isinstance(data, list):
        raise SystemExit(f"{path}: expected a JSON list of steps or an object with 'steps'.")
    return data


def _banner(server: ReplayServer) -> str:
    line = "=" * 78
    return "\n".join(
        [
            line,
            f"  tool_calling REPLAY SERVER ({server.mode} mode)",
            "  THE ANSWERS ARE SCRIPTED. THEY DO NOT COME FROM A REAL MODEL.",
            f"  OpenAI-compatible API at {server.base_url}/v1",
            f"  e.g. OPENAI_BASE_URL={server.base_url}/v1",
            line,
        ]
    )


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
    )
    # Stop on SIGINT and SIGTERM even when started from a background job, which inherits
    # SIGINT ignored (a supervisor such as scripts/devserver.py stops it with SIGINT).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    server._httpd = server._bind()
    print(_banner(server), flush=True)
    print(f"Listening on {server.base_url}/v1", flush=True)
    try:
        server._httpd.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server._httpd.server_close()
    return 0
