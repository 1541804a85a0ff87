"""ChatClient: the fluent entry point that builds a prompt, runs the advisors and the model."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from typing import Any

from tool_calling.core._settings import core_settings
from tool_calling.core.chat.advisors.base import (
    Advisor,
    AdvisorChain,
    ChatClientRequest,
    ChatClientResponse,
    sort_advisors,
)
from tool_calling.core.chat.advisors.memory import MessageChatMemoryAdvisor
from tool_calling.core.chat.advisors.tool_calling import ToolCallingAdvisor
from tool_calling.core.chat.memory import ChatMemory
from tool_calling.core.chat.messages import Message, SystemMessage, UserMessage
from tool_calling.core.chat.model import ChatModel
from tool_calling.core.chat.prompt import ChatOptions, Prompt, ToolCallingChatOptions
from tool_calling.core.chat.response import ChatResponse
from tool_calling.core.errors import ToolResolutionError
from tool_calling.core.execution.manager import DefaultToolCallingManager, ToolCallingManager
from tool_calling.core.execution.resolvers import ToolCallbackResolver
from tool_calling.core.tools.callback import (
    FunctionToolCallback,
    ToolCallback,
    _callbacks_of,
    check_unique_names,
)

__all__ = ["CallResponseSpec", "ChatClient", "ChatClientBuilder", "ChatClientRequestSpec"]


def _flatten(items: tuple[Any, ...]) -> list[Any]:
    flat: list[Any] = []
    for item in items:
        if isinstance(item, (list, tuple)):
            flat.extend(_flatten(tuple(item)))
        else:
            flat.append(item)
    return flat


def _identity(callback: ToolCallback) -> object:
    # The same function offered twice (defaults and request) is one tool, not a duplicate; the
    # same function wrapped under another name or description is another tool. The instance of
    # a bound method counts by identity: it may be unhashable (a dataclass) or compare equal to
    # another instance whose tool must still run on its own data.
    if isinstance(callback, FunctionToolCallback):
        function = callback.function
        return (
            id(getattr(function, "__self__", None)),
            getattr(function, "__func__", function),
            callback.definition,
            callback.metadata,
        )
    return callback


class _Settings:
    """Defaults of a client or the values of one request (same shape, merged per request)."""

    __slots__ = (
        "advisors",
        "auto_register",
        "conversation_id",
        "messages",
        "options",
        "system",
        "tool_context",
        "tools",
        "user",
    )

    def __init__(self) -> None:
        self.system: str | None = None
        self.user: str | None = None
        self.messages: list[Message] = []
        self.tools: list[Any] = []
        self.tool_context: dict[str, Any] = {}
        self.advisors: list[Advisor] = []
        self.options: ChatOptions | None = None
        self.conversation_id: str | None = None
        self.auto_register: bool | None = None

    def copy(self) -> _Settings:
        other = _Settings()
        for name in self.__slots__:
            value = getattr(self, name)
            setattr(other, name, value.copy() if isinstance(value, (list, dict)) else value)
        return other


class ChatClient:
    """Builds prompts fluently and runs them through the advisors and the model.

    ``ChatClient.create(model)`` or ``ChatClient.builder(model)...build()``; then
    ``client.prompt("Hi").tools(get_weather).call().content()``.
    """

    def __init__(
        self,
        model: ChatModel,
        *,
        defaults: _Settings | None = None,
        resolver: ToolCallbackResolver | None = None,
        tool_calling_manager: ToolCallingManager | None = None,
    ) -> None:
        self.model = model
        """The chat model every request goes to."""
        self._defaults = defaults or _Settings()
        self._resolver = resolver
        self._manager = tool_calling_manager

    @classmethod
    def create(cls, model: ChatModel) -> ChatClient:
        """Return a client with no defaults."""
        return cls(model)

    @classmethod
    def builder(cls, model: ChatModel) -> ChatClientBuilder:
        """Return a builder for a client with defaults."""
        return ChatClientBuilder(model)

    def mutate(self) -> ChatClientBuilder:
        """Return a builder starting from this client's defaults."""
        builder = ChatClientBuilder(self.model)
        builder._defaults = self._defaults.copy()
        builder._resolver = self._resolver
        builder._manager = self._manager
        return builder

    def prompt(self, text: str | Prompt | None = None) -> ChatClientRequestSpec:
        """Start a request: ``text`` is the user message, or a whole ``Prompt``."""
        spec = ChatClientRequestSpec(self)
        if isinstance(text, Prompt):
            spec.messages(*text.messages)
            if text.options is not None:
                spec.options(text.options)
        elif text is not None:
            spec.user(text)
        return spec

    # -- request execution (used by the specs) ----------------------------------------------

    def _tool_callbacks(self, request: _Settings) -> list[ToolCallback]:
        callbacks: list[ToolCallback] = []
        seen: dict[object, ToolCallback] = {}
        for item in _flatten(tuple(self._defaults.tools)) + _flatten(tuple(request.tools)):
            if isinstance(item, str):
                callback = self._resolver.resolve(item) if self._resolver is not None else None
                if callback is None:
                    raise ToolResolutionError(
                        f"No tool named {item!r} could be resolved"
                        + ("" if self._resolver is not None else " (the client has no resolver)")
                    )
                found = [callback]
            else:
                found = _callbacks_of(item)
            for callback in found:
                key = _identity(callback)
                if key not in seen:
                    seen[key] = callback
                    callbacks.append(callback)
        check_unique_names(callbacks)
        return callbacks

    def _options(self, request: _Settings, callbacks: list[ToolCallback]) -> ToolCallingChatOptions:
        merged: dict[str, Any] = {}
        model: str | None = None
        internal: bool | None = None
        tool_names: list[str] = []
        for options in (self._defaults.options, request.options):
            if options is None:
                continue
            model = options.model or model
            merged.update(options.model_options)
            if isinstance(options, ToolCallingChatOptions):
                callbacks = callbacks + [
                    cb
                    for cb in options.tool_callbacks
                    if _identity(cb) not in map(_identity, callbacks)
                ]
                tool_names += [n for n in options.tool_names if n not in tool_names]
                if options.internal_tool_execution_enabled is not None:
                    internal = options.internal_tool_execution_enabled
        check_unique_names(callbacks)
        # Per-call values win over the client's defaults; within each, .tool_context() entries
        # win over the options' tool_context.
        context: dict[str, Any] = {}
        for settings in (self._defaults, request):
            if isinstance(settings.options, ToolCallingChatOptions):
                context.update(settings.options.tool_context)
            context.update(settings.tool_context)
        return ToolCallingChatOptions(
            model,
            tool_callbacks=callbacks,
            tool_names=tool_names,
            tool_context=context,
            internal_tool_execution_enabled=internal,
            **merged,
        )

    def _advisors(self, request: _Settings) -> list[Advisor]:
        advisors = [*self._defaults.advisors, *request.advisors]
        tool_advisors = [a for a in advisors if isinstance(a, ToolCallingAdvisor)]
        if len(tool_advisors) > 1:
            names = ", ".join(a.name for a in tool_advisors)
            raise ValueError(
                f"A request can have at most one tool calling advisor; got {len(tool_advisors)} "
                f"({names})."
            )
        auto = request.auto_register
        if auto is None:
            auto = self._defaults.auto_register
        if auto is None:
            auto = core_settings().tool_calling_advisor_auto_register
        if not tool_advisors and auto:
            order = ToolCallingAdvisor.order
            memory_inside = any(
                isinstance(a, MessageChatMemoryAdvisor) and a.order > order for a in advisors
            )
            manager = self._manager or DefaultToolCallingManager(resolver=self._resolver)
            advisors.append(
                ToolCallingAdvisor(manager, conversation_history_enabled=not memory_inside)
            )
        return sort_advisors(advisors)

    def _request(self, request: _Settings) -> tuple[ChatClientRequest, AdvisorChain]:
        messages: list[Message] = []
        system = request.system if request.system is not None else self._defaults.system
        if system:
            messages.append(SystemMessage(system))
        messages += self._defaults.messages + request.messages
        user = request.user if request.user is not None else self._defaults.user
        if user is not None:
            messages.append(UserMessage(user))
        if not messages:
            raise ValueError("The prompt is empty: give a user message, messages or a system text.")
        options = self._options(request, self._tool_callbacks(request))
        context: dict[str, Any] = {}
        conversation_id = request.conversation_id or self._defaults.conversation_id
        if conversation_id is not None:
            context[ChatMemory.CONVERSATION_ID] = conversation_id
        chain = AdvisorChain(self._advisors(request), self._call_model, self._stream_model)
        return ChatClientRequest(Prompt(messages, options), context), chain

    def _call_model(self, request: ChatClientRequest) -> ChatClientResponse:
        return ChatClientResponse(self.model.call(request.prompt), request.context)

    def _stream_model(self, request: ChatClientRequest) -> Iterator[ChatClientResponse]:
        for chunk in self.model.stream(request.prompt):
            yield ChatClientResponse(chunk, request.context)


class ChatClientBuilder:
    """Collects a client's defaults: ``ChatClient.builder(model).default_tools(...).build()``."""

    def __init__(self, model: ChatModel) -> None:
        self._model = model
        self._defaults = _Settings()
        self._resolver: ToolCallbackResolver | None = None
        self._manager: ToolCallingManager | None = None

    def default_system(self, text: str) -> ChatClientBuilder:
        """Set the system text of every request."""
        self._defaults.system = text
        return self

    def default_user(self, text: str) -> ChatClientBuilder:
        """Set a user text used when a request gives none."""
        self._defaults.user = text
        return self

    def default_tools(self, *tools: Any) -> ChatClientBuilder:
        """Add tools offered in every request (same kinds as ``ChatClientRequestSpec.tools``)."""
        self._defaults.tools.extend(tools)
        return self

    def default_tool_context(self, context: Mapping[str, Any]) -> ChatClientBuilder:
        """Add tool context entries passed to every request's tools."""
        self._defaults.tool_context.update(context)
        return self

    def default_advisors(self, *advisors: Advisor) -> ChatClientBuilder:
        """Add advisors applied to every request."""
        self._defaults.advisors.extend(_flatten(advisors))
        return self

    def default_conversation_id(self, conversation_id: str) -> ChatClientBuilder:
        """Set the conversation id of every request that names none (``.conversation_id()``)."""
        self._defaults.conversation_id = str(conversation_id)
        return self

    def default_options(self, options: ChatOptions) -> ChatClientBuilder:
        """Set options every request starts from."""
        self._defaults.options = options
        return self

    def tool_callback_resolver(self, resolver: ToolCallbackResolver) -> ChatClientBuilder:
        """Resolve tool names given to ``.tools("name")`` (and by the automatic tool advisor)."""
        self._resolver = resolver
        return self

    def tool_calling_manager(self, manager: ToolCallingManager) -> ChatClientBuilder:
        """Use ``manager`` in the automatically registered ``ToolCallingAdvisor``."""
        self._manager = manager
        return self

    def tool_calling_advisor_auto_register(self, enabled: bool) -> ChatClientBuilder:
        """Register a ``ToolCallingAdvisor`` when a request has none (default: the setting)."""
        self._defaults.auto_register = enabled
        return self

    def build(self) -> ChatClient:
        """Return the client."""
        return ChatClient(
            self._model,
            defaults=self._defaults.copy(),
            resolver=self._resolver,
            tool_calling_manager=self._manager,
        )


class ChatClientRequestSpec:
    """One request being built: ``.system().user().tools().call()``."""

    def __init__(self, client: ChatClient) -> None:
        self._client = client
        self._request = _Settings()

    def system(self, text: str) -> ChatClientRequestSpec:
        """Set the system text (replaces the client's default)."""
        self._request.system = text
        return self

    def user(self, text: str) -> ChatClientRequestSpec:
        """Set the user message."""
        self._request.user = text
        return self

    def messages(self, *messages: Message) -> ChatClientRequestSpec:
        """Add messages (history) before the user message."""
        self._request.messages.extend(_flatten(messages))
        return self

    def tools(self, *tools: Any) -> ChatClientRequestSpec:
        """Add tools to the client's defaults.

        Accepts ``@tool`` functions, plain functions, bound methods, instances and classes with
        ``@tool`` methods, modules, ``ToolCallback``s, ``ToolCallbackProvider``s, tool names
        (resolved through the client's resolver) and lists of these.
        """
        self._request.tools.extend(tools)
        return self

    def tool_context(self, context: Mapping[str, Any]) -> ChatClientRequestSpec:
        """Add tool context entries (passed to tools, never sent to the model)."""
        self._request.tool_context.update(context)
        return self

    def advisors(self, *advisors: Advisor) -> ChatClientRequestSpec:
        """Add advisors for this request."""
        self._request.advisors.extend(_flatten(advisors))
        return self

    def options(self, options: ChatOptions) -> ChatClientRequestSpec:
        """Set this request's options (merged over the client's default options)."""
        self._request.options = options
        return self

    def conversation_id(self, conversation_id: str) -> ChatClientRequestSpec:
        """Name the conversation whose memory the memory advisor uses."""
        self._request.conversation_id = str(conversation_id)
        return self

    def tool_calling_advisor_auto_register(self, enabled: bool) -> ChatClientRequestSpec:
        """Turn the automatic ``ToolCallingAdvisor`` on or off for this request."""
        self._request.auto_register = enabled
        return self

    def call(self) -> CallResponseSpec:
        """Run the request now and return its response spec."""
        request, chain = self._client._request(self._request)
        return CallResponseSpec(chain.next_call(request))

    async def acall(self) -> CallResponseSpec:
        """Async twin of :meth:`call` (runs it in a worker thread)."""
        return await asyncio.to_thread(self.call)

    def stream(self) -> StreamResponseSpec:
        """Return a spec whose iterators stream the answer."""
        request, chain = self._client._request(self._request)
        return StreamResponseSpec(chain, request)


class CallResponseSpec:
    """The result of ``.call()``."""

    def __init__(self, response: ChatClientResponse) -> None:
        self._response = response

    def chat_client_response(self) -> ChatClientResponse:
        """The response with the advisor context."""
        return self._response

    def chat_response(self) -> ChatResponse | None:
        """The model's (or the loop's) response."""
        return self._response.chat_response

    def content(self) -> str | None:
        """The answer text of the first generation."""
        response = self._response.chat_response
        if response is None or response.result is None:
            return None
        return response.result.output.text


class StreamResponseSpec:
    """The result of ``.stream()``: iterate ``content()`` or ``chat_response()``."""

    def __init__(self, chain: AdvisorChain, request: ChatClientRequest) -> None:
        self._chain = chain
        self._request = request

    def chat_client_response(self) -> Iterator[ChatClientResponse]:
        """Yield the chunks with the advisor context."""
        return self._chain.next_stream(self._request)

    def chat_response(self) -> Iterator[ChatResponse]:
        """Yield the response chunks."""
        for chunk in self.chat_client_response():
            if chunk.chat_response is not None:
                yield chunk.chat_response

    def content(self) -> Iterator[str]:
        """Yield the answer's text pieces."""
        for response in self.chat_response():
            for generation in response.generations[:1]:
                if generation.output.text:
                    yield generation.output.text
