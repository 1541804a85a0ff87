"""OpenAIChatModel: Chat Completions over the official ``openai`` SDK (OpenAI and compatible APIs).

This is the only module that imports ``openai``. Requests are built and responses parsed by
module-level helpers shared by the sync and async paths, so the two never drift apart.
"""

from __future__ import annotations

import contextlib
import email.utils
import functools
import http
import inspect
import json
import math
import os
import re
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

try:
    import openai
except ImportError as exc:  # pragma: no cover - exercised only without the dependency
    raise ImportError("OpenAIChatModel needs the 'openai' package: pip install openai") from exc

from tool_calling.core._settings import core_settings
from tool_calling.core.chat.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolResponseMessage,
    UserMessage,
)
from tool_calling.core.chat.model import ChatModel
from tool_calling.core.chat.prompt import ChatOptions, Prompt, ToolCallingChatOptions
from tool_calling.core.chat.response import ChatResponse, Generation
from tool_calling.core.errors import (
    ChatModelAuthenticationError,
    ChatModelError,
    ChatModelNotFoundError,
    ChatModelRateLimitError,
    ChatModelResponseError,
    ChatModelTimeoutError,
    ToolResolutionError,
)
from tool_calling.core.tools.schema import to_strict_json_schema

if TYPE_CHECKING:
    from tool_calling.core.execution.manager import ToolCallingManager
    from tool_calling.core.tools.definition import ToolDefinition

__all__ = ["DEFAULT_MODEL", "LOCAL_SERVER_API_KEY", "OpenAIChatModel"]

DEFAULT_MODEL = "gpt-4o-mini"
"""The model used when neither the constructor, the settings nor ``OPENAI_MODEL`` name one."""

LOCAL_SERVER_API_KEY = "not-needed"
"""API key sent to a custom ``base_url`` when none is configured (local servers ignore it)."""

_Json = dict[str, Any]

# Options this adapter consumes itself; they are never sent to the API.
_ADAPTER_OPTIONS = frozenset({"strict"})
# Options that only mean something when the request offers tools.
_TOOL_OPTIONS = frozenset({"tool_choice", "parallel_tool_calls"})
# Request keys the adapter owns; options cannot replace them.
_OWNED_KEYS = frozenset({"model", "messages", "tools", "stream"})
_MAX_SERVER_MESSAGE = 300
_SECRET_PATTERNS = (
    (re.compile(r"sk-[A-Za-z0-9*_\-]{3,}"), "sk-***"),
    (re.compile(r"(?i)\bbearer\s+\S+"), "Bearer ***"),
)


_shared_clients: dict[tuple[Any, ...], openai.OpenAI] = {}
_shared_clients_lock = threading.Lock()


def _shared_client(kwargs: dict[str, Any]) -> openai.OpenAI:
    """One ``openai.OpenAI`` client per configuration and process, shared by every model.

    A governed turn builds its chat model anew, and each client builds an SSL context (the CA
    bundle read and parsed: about 10 ms of CPU) and a connection pool of its own. Shared, a
    process pays that once and keeps its connections to the server between turns. The client
    is thread-safe; a forked process builds its own (sockets are never shared across a fork).
    """
    key = (os.getpid(), *sorted((name, repr(value)) for name, value in kwargs.items()))
    client = _shared_clients.get(key)
    if client is None:
        with _shared_clients_lock:
            client = _shared_clients.get(key)
            if client is None:
                client = _shared_clients[key] = openai.OpenAI(**kwargs)
    return client


class OpenAIChatModel(ChatModel):
    """A chat model speaking OpenAI Chat Completions through the official ``openai`` SDK.

    Works with OpenAI and with OpenAI-compatible servers (vLLM, Ollama, LM Studio, the
    ``tool_calling.testing`` replay server). Tool definitions go out as functions, tool calls
    come back as :class:`ToolCall`, and streamed tool-call deltas are aggregated.

    Configuration is resolved per value, first match wins: the constructor's arguments, then
    ``TOOL_CALLING["CHAT_MODEL"]`` (``MODEL``, ``BASE_URL``, ``API_KEY``, ``TIMEOUT``,
    ``MAX_RETRIES``, ``OPTIONS``), then the ``OPENAI_MODEL``, ``OPENAI_BASE_URL`` and
    ``OPENAI_API_KEY`` environment variables, then the defaults (model ``gpt-4o-mini``, the SDK's
    timeout and retries). The SDK client is built on the first call, so constructing the model
    never fails for a missing key; connection settings are read at that moment.

    Keyword arguments not listed below are default model options (``temperature``,
    ``max_tokens``, ``tool_choice``, ``parallel_tool_calls``, ``strict``, ...); they sit under
    ``TOOL_CALLING["CHAT_MODEL"]["OPTIONS"]``'s and under the prompt's options. ``strict=True``
    sends tools in OpenAI strict mode. Options the SDK does not know go in the request body as
    they are (``top_k`` for vLLM, for instance); an option set to ``None`` is not sent.
    """

    def __init__(
        self,
        model: str | None = None,
        client: openai.OpenAI | None = None,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float | None = None,
        max_retries: int | None = None,
        tool_calling_manager: ToolCallingManager | None = None,
        async_client: openai.AsyncOpenAI | None = None,
        **defaults: Any,
    ) -> None:
        """Create the model; no network access and no client is built yet.

        Args:
            model: Model name; see the class docstring for the fallbacks.
            client: A ready ``openai.OpenAI`` client (its own key, URL, timeout and retries
                apply). Cannot be combined with ``api_key``, ``base_url``, ``timeout`` or
                ``max_retries``.
            api_key: API key; a custom ``base_url`` without a key uses a placeholder key.
            base_url: Base URL of an OpenAI-compatible API, e.g. ``http://localhost:11434/v1``.
            timeout: Seconds before a request times out.
            max_retries: Retries the SDK makes on connection errors, 408, 409, 429 and 5xx.
            tool_calling_manager: Resolves the request's tool definitions (``tool_names``
                included). Without one, only ``tool_callbacks`` can be offered.
            async_client: A ready ``openai.AsyncOpenAI`` client for :meth:`acall` and
                :meth:`astream`. Without it, one is built from the same configuration, unless a
                sync ``client`` was given, in which case the async methods run the sync ones in
                a worker thread.
            **defaults: Default model options.

        Raises:
            TypeError: ``client`` or ``async_client`` was combined with connection arguments.
        """
        connection = {
            "api_key": api_key,
            "base_url": base_url,
            "timeout": timeout,
            "max_retries": max_retries,
        }
        given = sorted(name for name, value in connection.items() if value is not None)
        if (client is not None or async_client is not None) and given:
            raise TypeError(
                f"OpenAIChatModel: pass either a client or {', '.join(given)}, not both; "
                "the client already carries its own configuration."
            )
        self._model = model
        self._connection = connection
        self._tool_calling_manager = tool_calling_manager
        self._defaults = dict(defaults)
        self._client = client
        self._client_given = client is not None
        self._async_client = async_client
        self._lock = threading.Lock()

    # -- configuration -------------------------------------------------------------------------

    @property
    def model(self) -> str:
        """The default model name of this chat model (the prompt's options may override it)."""
        return self._model or _setting("MODEL") or os.environ.get("OPENAI_MODEL") or DEFAULT_MODEL

    @property
    def default_options(self) -> ToolCallingChatOptions:
        """The model and the default model options applied under every prompt's options."""
        return ToolCallingChatOptions(self.model, **self._default_model_options())

    def _default_model_options(self) -> dict[str, Any]:
        configured = _setting("OPTIONS") or {}
        return {**dict(configured), **self._defaults}

    def _client_kwargs(self) -> dict[str, Any]:
        base_url = (
            self._connection["base_url"]
            or _setting("BASE_URL")
            or os.environ.get("OPENAI_BASE_URL")
            or None
        )
        api_key = (
            self._connection["api_key"]
            or _setting("API_KEY")
            or os.environ.get("OPENAI_API_KEY")
            or None
        )
        if api_key is None:
            if base_url is None or "api.openai.com" in str(base_url):
                raise ChatModelAuthenticationError(
                    f"No API key configured for model {self.model!r}: pass api_key=..., set "
                    "TOOL_CALLING['CHAT_MODEL']['API_KEY'] or the OPENAI_API_KEY environment "
                    "variable, or set BASE_URL to a local OpenAI-compatible server."
                )
            api_key = LOCAL_SERVER_API_KEY
        kwargs: dict[str, Any] = {"api_key": api_key, "base_url": base_url}
        for name, key in (("timeout", "TIMEOUT"), ("max_retries", "MAX_RETRIES")):
            value = self._connection[name]
            if value is None:
                value = _setting(key)
            if value is not None:
                kwargs[name] = value
        return kwargs

    @property
    def client(self) -> openai.OpenAI:
        """The ``openai.OpenAI`` client, built from the configuration on first use.

        Raises:
            ChatModelAuthenticationError: no API key is configured for the OpenAI API.
        """
        return self._sync_client()

    def _sync_client(self) -> openai.OpenAI:
        with self._lock:
            if self._client is None:
                self._client = _shared_client(self._client_kwargs())
            return self._client

    def _async_client_or_none(self) -> openai.AsyncOpenAI | None:
        with self._lock:
            if self._async_client is None and not self._client_given:
                self._async_client = openai.AsyncOpenAI(**self._client_kwargs())
            return self._async_client

    # -- requests ------------------------------------------------------------------------------

    def _tool_definitions(self, options: ChatOptions | None) -> list[ToolDefinition]:
        if not isinstance(options, ToolCallingChatOptions):
            return []
        if self._tool_calling_manager is not None:
            return list(self._tool_calling_manager.resolve_tool_definitions(options))
        if options.tool_names:
            raise ToolResolutionError(
                f"OpenAIChatModel cannot resolve the tool names {options.tool_names!r}: it has no "
                "tool calling manager. Pass tool_calling_manager=... or offer the tools as "
                "tool_callbacks."
            )
        return [callback.definition for callback in options.tool_callbacks]

    def _build_request(self, prompt: Prompt, *, stream: bool) -> _Request:
        options = prompt.options
        model = (options.model if options is not None else None) or self.model
        values = self._default_model_options()
        if options is not None:
            values.update(options.model_options)
        values = {key: value for key, value in values.items() if value is not None}
        strict = bool(values.get("strict", False))
        definitions = self._tool_definitions(options)

        body: dict[str, Any] = {
            key: value
            for key, value in values.items()
            if key not in _ADAPTER_OPTIONS
            and key not in _OWNED_KEYS
            and (definitions or key not in _TOOL_OPTIONS)
        }
        body["model"] = model
        body["messages"] = _message_params(prompt.messages)
        if definitions:
            body["tools"] = [_tool_param(definition, strict=strict) for definition in definitions]
        if stream:
            body["stream"] = True
            body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
        else:
            body.pop("stream_options", None)

        known = _create_parameters()
        kwargs = {key: value for key, value in body.items() if key in known}
        extra = {key: value for key, value in body.items() if key not in known}
        if extra:
            kwargs["extra_body"] = {**extra, **(kwargs.get("extra_body") or {})}
        return _Request(model=model, kwargs=kwargs)

    # -- calls ---------------------------------------------------------------------------------

    def call(self, prompt: Prompt) -> ChatResponse:
        """Send ``prompt`` and return the model's answer.

        Raises:
            ChatModelError: the API failed after the SDK's retries; the subclass says how.
            ToolResolutionError: the options name tools and there is no tool calling manager.
        """
        request = self._build_request(prompt, stream=False)
        client = self._sync_client()
        with _translated_errors(_Call(request.model, client)) as call:
            raw = client.chat.completions.with_raw_response.create(**request.kwargs)
            call.request_id = raw.request_id
            return _parse_completion(_as_dict(raw.parse()))

    def stream(self, prompt: Prompt) -> Iterator[ChatResponse]:
        """Yield one response per text delta, then one carrying tool calls, finish reason and usage.

        Text chunks hold only the new text; the last chunk has no text, the complete tool calls
        of each choice, its finish reason and the usage in the response metadata.

        Raises:
            ChatModelError: as :meth:`call`, also when the stream breaks off or is malformed.
        """
        request = self._build_request(prompt, stream=True)
        client = self._sync_client()
        with _translated_errors(_Call(request.model, client)) as call:
            chunks = client.post(_PATH, **_streamed(request, openai.Stream[object]))
            call.request_id = chunks.response.headers.get("x-request-id")
            accumulator = _StreamAccumulator()
            try:
                for chunk in chunks:
                    yield from accumulator.add(_as_dict(chunk))
            finally:
                chunks.close()
            yield accumulator.finish()

    async def acall(self, prompt: Prompt) -> ChatResponse:
        """Async twin of :meth:`call`, over ``openai.AsyncOpenAI`` when one is available."""
        client = self._async_client_or_none()
        if client is None:
            return await super().acall(prompt)
        request = self._build_request(prompt, stream=False)
        with _translated_errors(_Call(request.model, client)) as call:
            raw = await client.chat.completions.with_raw_response.create(**request.kwargs)
            call.request_id = raw.request_id
            return _parse_completion(_as_dict(raw.parse()))

    async def astream(self, prompt: Prompt) -> AsyncIterator[ChatResponse]:
        """Async twin of :meth:`stream`, over ``openai.AsyncOpenAI`` when one is available."""
        client = self._async_client_or_none()
        if client is None:
            async for response in super().astream(prompt):
                yield response
            return
        request = self._build_request(prompt, stream=True)
        with _translated_errors(_Call(request.model, client)) as call:
            chunks = await client.post(_PATH, **_streamed(request, openai.AsyncStream[object]))
            call.request_id = chunks.response.headers.get("x-request-id")
            accumulator = _StreamAccumulator()
            try:
                async for chunk in chunks:
                    for response in accumulator.add(_as_dict(chunk)):
                        yield response
            finally:
                await chunks.close()
            yield accumulator.finish()

    def __repr__(self) -> str:
        return f"OpenAIChatModel(model={self.model!r})"


def _setting(key: str) -> Any:
    return core_settings().chat_model.get(key)


_PATH = "/chat/completions"

_OPTION_KEYS = {"extra_headers": "headers", "extra_query": "params", "timeout": "timeout"}
"""``create``'s keyword arguments that are options of the request, not part of its body."""


def _streamed(request: _Request, stream_cls: Any) -> dict[str, Any]:
    """``client.post`` arguments for ``request`` streamed, its chunks left as the JSON they are.

    What ``chat.completions.create`` sends, without its two costly passes: the body is already
    JSON-ready (its request-parameter transform walked every message and tool again), and the
    accumulator reads each chunk as JSON (parsed into SDK models, chunks were turned back into
    dicts). Together a few ms of CPU per model call.
    """
    body = dict(request.kwargs)
    options: dict[str, Any] = {"security": {"bearer_auth": True}}
    for key, option in _OPTION_KEYS.items():
        if key in body:
            options[option] = body.pop(key)
    body.update(body.pop("extra_body", None) or {})
    return {
        "body": body,
        "cast_to": object,
        "options": options,
        "stream": True,
        "stream_cls": stream_cls,
    }


@functools.cache
def _create_parameters() -> frozenset[str]:
    """Keyword arguments of ``chat.completions.create``; other options go in ``extra_body``."""
    from openai.resources.chat.completions import Completions

    return frozenset(inspect.signature(Completions.create).parameters) - {"self"}


@dataclass
class _Request:
    model: str
    kwargs: dict[str, Any]


# -- our types -> Chat Completions ---------------------------------------------------------------


def _message_params(messages: Sequence[Message]) -> list[_Json]:
    """Return Chat Completions ``messages`` for our messages, tool responses one per call."""
    params: list[_Json] = []
    for message in messages:
        if isinstance(message, SystemMessage):
            params.append({"role": "system", "content": message.text})
        elif isinstance(message, UserMessage):
            params.append({"role": "user", "content": message.text})
        elif isinstance(message, AssistantMessage):
            param: _Json = {"role": "assistant"}
            if message.tool_calls:
                param["content"] = message.text or None
                param["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments or "{}"},
                    }
                    for call in message.tool_calls
                ]
            else:
                param["content"] = message.text or ""
            params.append(param)
        elif isinstance(message, ToolResponseMessage):
            params.extend(
                {"role": "tool", "tool_call_id": response.id, "content": response.response_data}
                for response in message.responses
            )
        else:
            raise TypeError(
                f"OpenAIChatModel cannot send a {type(message).__name__}: expected a system, user, "
                "assistant or tool response message."
            )
    return params


def _tool_param(definition: ToolDefinition, *, strict: bool = False) -> _Json:
    """Return the Chat Completions ``tools`` entry for one tool definition."""
    function: _Json = {"name": definition.name, "description": definition.description}
    if strict:
        function["parameters"] = to_strict_json_schema(definition.input_schema)
        function["strict"] = True
    else:
        function["parameters"] = definition.input_schema
    return {"type": "function", "function": function}


# -- Chat Completions -> our types ---------------------------------------------------------------


class _MalformedResponseError(ValueError):
    """The server answered 2xx with something that is not a chat completion."""


def _as_dict(value: object) -> _Json:
    if isinstance(value, dict):
        return value
    if isinstance(value, openai.BaseModel):
        return value.to_dict(warnings=False)
    if value is None:
        raise _MalformedResponseError("the body is empty")
    raise _MalformedResponseError("the body is not a JSON object")


def _usage(value: object) -> dict[str, int] | None:
    if not isinstance(value, Mapping):
        return None
    usage = {}
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        count = value.get(key) or 0
        if not isinstance(count, int) or isinstance(count, bool):
            raise _MalformedResponseError(f"'usage.{key}' is not an integer")
        usage[key] = count
    return usage


def _response_metadata(data: Mapping[str, Any]) -> _Json:
    return {key: data.get(key) for key in ("id", "model", "created", "system_fingerprint")}


def _text(content: object, where: str) -> str | None:
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):  # some compatible servers answer with content parts
        return "".join(
            part.get("text") or ""
            for part in content
            if isinstance(part, Mapping) and part.get("type") == "text"
        )
    raise _MalformedResponseError(f"{where} 'content' is neither text nor null")


def _arguments(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    # Some compatible servers send the arguments as an object rather than as JSON text.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _parse_completion(data: Mapping[str, Any]) -> ChatResponse:
    """Return the :class:`ChatResponse` for a Chat Completions response body.

    Raises:
        ValueError: the body is not a chat completion.
    """
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise _MalformedResponseError("'choices' is missing or empty")
    generations = []
    for position, choice in enumerate(choices):
        message = choice.get("message") if isinstance(choice, Mapping) else None
        if not isinstance(message, Mapping):
            raise _MalformedResponseError(f"choice {position} has no 'message' object")
        raw_calls = message.get("tool_calls") or []
        if not isinstance(raw_calls, list):
            raise _MalformedResponseError(f"choice {position} 'tool_calls' is not a list")
        tool_calls = []
        for index, raw_call in enumerate(raw_calls):
            function = raw_call.get("function") if isinstance(raw_call, Mapping) else None
            if not isinstance(function, Mapping):
                function = {}
            name = function.get("name")
            if not isinstance(name, str) or not name:
                raise _MalformedResponseError(
                    f"choice {position} tool call {index} has no function name"
                )
            call_id = raw_call.get("id") or f"call_{index}"
            tool_calls.append(ToolCall(str(call_id), name, _arguments(function.get("arguments"))))
        metadata: _Json = {"id": data.get("id"), "role": message.get("role") or "assistant"}
        if message.get("refusal"):
            metadata["refusal"] = message["refusal"]
        generations.append(
            Generation(
                AssistantMessage(
                    _text(message.get("content"), f"choice {position}"), tool_calls, metadata
                ),
                finish_reason=choice.get("finish_reason"),
            )
        )
    return ChatResponse(
        generations, metadata={**_response_metadata(data), "usage": _usage(data.get("usage"))}
    )


@dataclass
class _StreamedToolCall:
    id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)


@dataclass
class _StreamedChoice:
    tool_calls: dict[int, _StreamedToolCall] = field(default_factory=dict)
    refusal: list[str] = field(default_factory=list)
    role: str = "assistant"
    finish_reason: str | None = None

    def add_tool_call_pieces(self, pieces: object) -> None:
        if not isinstance(pieces, list):
            raise _MalformedResponseError("a stream chunk's 'tool_calls' is not a list")
        for piece in pieces:
            if not isinstance(piece, Mapping):
                raise _MalformedResponseError("a streamed tool call is not an object")
            index = piece.get("index")
            if not isinstance(index, int):
                # Servers that send whole calls without an index: a new id starts a new call.
                last = max(self.tool_calls, default=-1)
                starts_new = last < 0 or (
                    piece.get("id") and piece.get("id") != self.tool_calls[last].id
                )
                index = last + 1 if starts_new else last
            call = self.tool_calls.setdefault(index, _StreamedToolCall())
            if piece.get("id") and call.id is None:
                call.id = str(piece["id"])
            function = piece.get("function") or {}
            if not isinstance(function, Mapping):
                raise _MalformedResponseError("a streamed tool call's 'function' is not an object")
            if function.get("name") and call.name is None:
                call.name = str(function["name"])
            arguments = function.get("arguments")
            if arguments:
                call.arguments.append(_arguments(arguments))

    def complete_tool_calls(self) -> list[ToolCall]:
        calls = []
        for index, call in sorted(self.tool_calls.items()):
            if not call.name:
                raise _MalformedResponseError(f"streamed tool call {index} has no function name")
            calls.append(ToolCall(call.id or f"call_{index}", call.name, "".join(call.arguments)))
        return calls


class _StreamAccumulator:
    """Turns Chat Completions stream chunks into :class:`ChatResponse` chunks.

    :meth:`add` returns a response for each chunk that carries text (the new text only);
    :meth:`finish` returns the last response: per choice, the complete tool calls (tool-call
    pieces are joined by ``index``, in whatever order they arrive) and the finish reason, with the
    usage in the response metadata whether it came before or after the finish reason.
    """

    def __init__(self) -> None:
        self._choices: dict[int, _StreamedChoice] = {}
        self._metadata: _Json = dict.fromkeys(("id", "model", "created", "system_fingerprint"))
        self._usage: dict[str, int] | None = None

    def add(self, chunk: Mapping[str, Any]) -> list[ChatResponse]:
        """Take one stream chunk; return the text response it produces, if any."""
        for key in self._metadata:
            if self._metadata[key] is None and chunk.get(key) is not None:
                self._metadata[key] = chunk[key]
        usage = _usage(chunk.get("usage"))
        if usage is not None:
            self._usage = usage
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise _MalformedResponseError("a stream chunk's 'choices' is not a list")
        generations = []
        for choice in choices:
            if not isinstance(choice, Mapping):
                raise _MalformedResponseError("a stream chunk's choice is not an object")
            index = choice.get("index") or 0
            state = self._choices.setdefault(index, _StreamedChoice())
            delta = choice.get("delta") or {}
            if not isinstance(delta, Mapping):
                raise _MalformedResponseError("a stream chunk's 'delta' is not an object")
            if delta.get("role"):
                state.role = str(delta["role"])
            text = _text(delta.get("content"), "a stream chunk's delta")
            if text:
                generations.append(
                    Generation(AssistantMessage(text, metadata=self._message_metadata(state)))
                )
            if delta.get("refusal"):
                state.refusal.append(str(delta["refusal"]))
            if delta.get("tool_calls"):
                state.add_tool_call_pieces(delta["tool_calls"])
            if choice.get("finish_reason"):
                state.finish_reason = str(choice["finish_reason"])
        if not generations:
            return []
        return [ChatResponse(generations, metadata=dict(self._metadata))]

    def finish(self) -> ChatResponse:
        """Return the last response: tool calls, finish reasons and usage; no text."""
        states = sorted(self._choices.items()) or [(0, _StreamedChoice())]
        generations = []
        for _, state in states:
            metadata = self._message_metadata(state)
            if state.refusal:
                metadata["refusal"] = "".join(state.refusal)
            generations.append(
                Generation(
                    AssistantMessage(None, state.complete_tool_calls(), metadata),
                    finish_reason=state.finish_reason,
                )
            )
        return ChatResponse(generations, metadata={**self._metadata, "usage": self._usage})

    def _message_metadata(self, state: _StreamedChoice) -> _Json:
        return {"id": self._metadata["id"], "role": state.role}


# -- errors --------------------------------------------------------------------------------------


@dataclass
class _Call:
    model: str
    client: openai.OpenAI | openai.AsyncOpenAI
    request_id: str | None = None


@contextlib.contextmanager
def _translated_errors(call: _Call) -> Iterator[_Call]:
    """Raise the SDK's failures (after its own retries) as our ``ChatModelError`` subclasses."""
    try:
        yield call
    except openai.APIStatusError as exc:
        raise _status_error(exc, call) from exc
    except openai.APITimeoutError as exc:
        raise ChatModelTimeoutError(
            f"OpenAI-compatible API at {_public_url(call.client)} timed out for model "
            f"{call.model!r}."
        ) from exc
    except openai.APIConnectionError as exc:
        cause = type(exc.__cause__).__name__ if exc.__cause__ is not None else exc.message
        raise ChatModelTimeoutError(
            f"Could not connect to the OpenAI-compatible API at {_public_url(call.client)} for "
            f"model {call.model!r} ({cause})."
        ) from exc
    except openai.APIResponseValidationError as exc:
        raise _malformed_error(call, "the body does not match the chat completion schema") from exc
    except openai.APIError as exc:  # an error event inside a stream
        detail = _server_message(getattr(exc, "body", None), call) or "no details"
        raise ChatModelResponseError(
            f"OpenAI-compatible API reported an error for model {call.model!r}"
            f"{_request_id_text(call.request_id)}: {detail}",
            request_id=call.request_id,
        ) from exc
    except _MalformedResponseError as exc:
        raise _malformed_error(call, str(exc)) from exc
    except ValueError as exc:  # invalid JSON in the body or in a stream event
        raise _malformed_error(call, "the body is not valid JSON") from exc


def _malformed_error(call: _Call, reason: str) -> ChatModelResponseError:
    return ChatModelResponseError(
        f"OpenAI-compatible API returned a malformed response for model {call.model!r}"
        f"{_request_id_text(call.request_id)}: {reason}.",
        request_id=call.request_id,
    )


def _status_error(exc: openai.APIStatusError, call: _Call) -> ChatModelError:
    status = exc.status_code
    error_class: type[ChatModelError]
    if status in (401, 403):
        error_class = ChatModelAuthenticationError
    elif status == 404:
        error_class = ChatModelNotFoundError
    elif status == 429:
        error_class = ChatModelRateLimitError
    elif status >= 500:
        error_class = ChatModelResponseError
    else:
        error_class = ChatModelError
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = exc.response.reason_phrase or "Error"
    message = (
        f"OpenAI-compatible API returned {status} {phrase} for model {call.model!r}"
        f"{_request_id_text(exc.request_id)}"
    )
    detail = _server_message(exc.body, call)
    if detail:
        message += f": {detail}"
    return error_class(
        message,
        status_code=status,
        request_id=exc.request_id,
        retry_after=_retry_after(exc.response.headers),
    )


def _request_id_text(request_id: str | None) -> str:
    return f" (request id {request_id})" if request_id else ""


def _server_message(body: object, call: _Call) -> str:
    """Return the server's error message, short, on one line, with anything key-like masked."""
    if isinstance(body, Mapping):
        body = body.get("message")
    if not isinstance(body, str):
        return ""
    text = " ".join(body.split())
    api_key = getattr(call.client, "api_key", None)
    if isinstance(api_key, str) and len(api_key) >= 4:
        text = text.replace(api_key, "***")
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    if len(text) > _MAX_SERVER_MESSAGE:
        text = text[: _MAX_SERVER_MESSAGE - 1] + "…"
    return text


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """Return the wait the server asked for, from ``retry-after-ms`` or ``retry-after``."""
    for header, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(header)
        if value is None:
            continue
        try:
            seconds = float(value) / divisor
        except ValueError:
            continue
        if math.isfinite(seconds) and seconds >= 0:
            return seconds
    value = headers.get("retry-after")
    if value:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        return max(0.0, when.timestamp() - time.time())
    return None


def _public_url(client: openai.OpenAI | openai.AsyncOpenAI) -> str:
    """The client's base URL without credentials or query string."""
    url = client.base_url
    return f"{url.scheme}://{url.host}{f':{url.port}' if url.port else ''}{url.path}".rstrip("/")
