"""Test doubles: ScriptedChatModel with its step builders, and the OpenAI-compatible ReplayServer.

Pure Python: nothing here imports Django, so tests of the core can use it without settings::

    model = ScriptedChatModel([tool_call("get_weather", city="Oslo"), text("Sunny")])
    reply = ChatClient.create(model).prompt("Weather in Oslo?").tools(get_weather).call().content()
    assert reply == "Sunny"
    model.assert_consumed()
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Union

from tool_calling.core.chat.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResponseMessage,
)
from tool_calling.core.chat.model import ChatModel
from tool_calling.core.chat.prompt import Prompt, ToolCallingChatOptions
from tool_calling.core.chat.response import ChatResponse, Generation
from tool_calling.testing._chunks import count_words, split_text
from tool_calling.testing._replay import ReplayServer

__all__ = [
    "ReplayServer",
    "ScriptedChatModel",
    "UnconsumedModelSteps",
    "UnexpectedModelCall",
    "text",
    "tool_call",
    "tool_calls",
]

_MAX_SHOWN = 200


class UnexpectedModelCall(AssertionError):
    """The code under test called the scripted model more often than its script allows."""


class UnconsumedModelSteps(AssertionError):
    """The scripted model still had steps left when the test expected it to be done."""


@dataclass(frozen=True)
class _ScriptedCall:
    name: str
    arguments: str
    id: str | None = None


@dataclass(frozen=True)
class _ToolCallsStep:
    """One assistant message that asks for one or more tool calls."""

    calls: tuple[_ScriptedCall, ...]

    def to_replay_step(self) -> dict[str, Any]:
        """Return this step in ReplayServer's JSON step format."""
        calls = []
        for call in self.calls:
            entry: dict[str, Any] = {"name": call.name, "arguments": call.arguments}
            if call.id is not None:
                entry["id"] = call.id
            calls.append(entry)
        return {"tool_calls": calls}

    def __repr__(self) -> str:
        inner = ", ".join(f"tool_call({c.name!r}, arguments={c.arguments})" for c in self.calls)
        return inner if len(self.calls) == 1 else f"tool_calls({inner})"


@dataclass(frozen=True)
class _TextStep:
    """One assistant message with text only."""

    content: str

    def to_replay_step(self) -> dict[str, Any]:
        """Return this step in ReplayServer's JSON step format."""
        return {"text": self.content}

    def __repr__(self) -> str:
        return f"text({_shorten(self.content)!r})"


_Step = Union[  # noqa: UP007 - a runtime alias; X | Y of a string forward reference fails
    _TextStep, _ToolCallsStep, ChatResponse, AssistantMessage, Callable[[Prompt], "_Step"]
]
"""What a script holds: a builder's result, a ready response or message, or a callable."""


def tool_call(name: str, /, *, id: str | None = None, **arguments: Any) -> _ToolCallsStep:
    """Return a step where the model calls tool ``name`` with ``arguments``.

    Args:
        name: The tool to call.
        id: The call id. Without it, calls get ``call_1``, ``call_2``, ... in the order the
            model answers, skipping ids the script sets explicitly.
        **arguments: The call's arguments, sent as compact JSON. A tool parameter called
            ``id`` cannot be passed here; script such a call as an ``AssistantMessage``.

    Returns:
        A step holding one assistant message with one tool call.
    """
    encoded = json.dumps(arguments, separators=(",", ":"), ensure_ascii=False)
    return _ToolCallsStep((_ScriptedCall(name, encoded, id),))


def tool_calls(*steps: _ToolCallsStep) -> _ToolCallsStep:
    """Return a step where the model asks for several tool calls at once, in the given order.

    Raises:
        ValueError: no step was given.
        TypeError: a step is not the result of :func:`tool_call`.
    """
    if not steps:
        raise ValueError("tool_calls() needs at least one tool_call(...) step.")
    calls: list[_ScriptedCall] = []
    for step in steps:
        if not isinstance(step, _ToolCallsStep):
            raise TypeError(f"tool_calls() takes tool_call(...) steps, got {step!r}.")
        calls.extend(step.calls)
    return _ToolCallsStep(tuple(calls))


def text(content: str) -> _TextStep:
    """Return a step where the model answers with ``content``."""
    return _TextStep(content)


class ScriptedChatModel(ChatModel):
    """A chat model that replays a script, one step per call, for tests and offline demos.

    A step is what :func:`tool_call`, :func:`tool_calls` or :func:`text` returns, a ready
    ``AssistantMessage`` or ``ChatResponse``, or a callable ``(prompt) -> step`` for answers that
    depend on the prompt. Every call (and every stream) consumes one step; a call past the end
    raises :class:`UnexpectedModelCall`. Responses carry usage metadata with deterministic counts
    (whitespace-separated words stand in for tokens).

    Attributes:
        requests: Every prompt received, in order (including the one that overran the script).
        tool_names_seen: For each request, the names of the tools it offered.
    """

    def __init__(self, steps: Sequence[_Step], *, name: str = "scripted") -> None:
        """Create the model with its script.

        Raises:
            TypeError: a step is not a step.
        """
        self._steps = list(steps)
        for index, step in enumerate(self._steps):
            _check_step(step, f"Step {index + 1} of the script")
        self.name = name
        """The model name reported in response metadata."""
        self.requests: list[Prompt] = []
        self.tool_names_seen: list[list[str]] = []
        self._position = 0
        self._used_ids = {
            call.id
            for step in self._steps
            if isinstance(step, _ToolCallsStep)
            for call in step.calls
            if call.id is not None
        }
        self._next_id = 1
        self._lock = threading.Lock()

    @property
    def remaining_steps(self) -> int:
        """How many steps are left in the script."""
        return len(self._steps) - self._position

    def assert_consumed(self) -> None:
        """Raise :class:`UnconsumedModelSteps` unless every step of the script was used."""
        remaining = self.remaining_steps
        if remaining:
            raise UnconsumedModelSteps(
                f"ScriptedChatModel {self.name!r} has {remaining} unconsumed step(s) of "
                f"{len(self._steps)}; the next one is "
                f"{_describe_step(self._steps[self._position])}."
            )

    def call(self, prompt: Prompt) -> ChatResponse:
        """Consume one step and return it as a response."""
        number, answer = self._consume(prompt)
        if isinstance(answer, ChatResponse):
            return answer
        return ChatResponse(
            [Generation(answer, finish_reason=_finish_reason(answer))],
            metadata={**self._metadata(number), "usage": _usage(prompt, answer)},
        )

    def stream(self, prompt: Prompt) -> Iterator[ChatResponse]:
        """Consume one step and yield it as OpenAIChatModel streams.

        Text comes in chunks of a few words (each chunk holds only its new text); the last chunk
        has no text, the tool calls, the finish reason and the usage. A ``ChatResponse`` step is
        yielded as it is.
        """
        number, answer = self._consume(prompt)
        if isinstance(answer, ChatResponse):
            yield answer
            return
        metadata = self._metadata(number)
        message_metadata = {"id": metadata["id"], "role": "assistant"}
        for piece in split_text(answer.text or ""):
            yield ChatResponse(
                [Generation(AssistantMessage(piece, metadata=message_metadata))],
                metadata=dict(metadata),
            )
        yield ChatResponse(
            [
                Generation(
                    AssistantMessage(None, list(answer.tool_calls), dict(answer.metadata)),
                    finish_reason=_finish_reason(answer),
                )
            ],
            metadata={**metadata, "usage": _usage(prompt, answer)},
        )

    def _consume(self, prompt: Prompt) -> tuple[int, AssistantMessage | ChatResponse]:
        with self._lock:
            self.requests.append(prompt)
            self.tool_names_seen.append(_tool_names(prompt))
            number = len(self.requests)
            if self._position >= len(self._steps):
                raise UnexpectedModelCall(
                    f"ScriptedChatModel {self.name!r} got call {number} but its script has only "
                    f"{len(self._steps)} step(s). The last message of the prompt was "
                    f"{_describe_last_message(prompt)}."
                )
            step = self._steps[self._position]
            self._position += 1
        if not isinstance(step, (_TextStep, _ToolCallsStep, ChatResponse, AssistantMessage)):
            step = step(prompt)
            _check_step(step, f"The callable step of call {number}", allow_callable=False)
        if isinstance(step, ChatResponse):
            return number, step
        if isinstance(step, AssistantMessage):
            return number, step
        message_metadata = {"id": self._metadata(number)["id"], "role": "assistant"}
        if isinstance(step, _TextStep):
            return number, AssistantMessage(step.content, metadata=message_metadata)
        assert isinstance(step, _ToolCallsStep)
        with self._lock:
            calls = [
                ToolCall(call.id or self._new_id(), call.name, call.arguments)
                for call in step.calls
            ]
        return number, AssistantMessage(None, calls, message_metadata)

    def _new_id(self) -> str:
        while f"call_{self._next_id}" in self._used_ids:
            self._next_id += 1
        new_id = f"call_{self._next_id}"
        self._used_ids.add(new_id)
        return new_id

    def _metadata(self, number: int) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-scripted-{number}",
            "model": self.name,
            "created": 0,
            "system_fingerprint": None,
        }

    def __repr__(self) -> str:
        return (
            f"ScriptedChatModel(name={self.name!r}, steps={len(self._steps)}, "
            f"remaining={self.remaining_steps})"
        )


def _check_step(step: object, where: str, *, allow_callable: bool = True) -> None:
    if isinstance(step, (_TextStep, _ToolCallsStep, ChatResponse, AssistantMessage)):
        return
    if allow_callable and callable(step):
        return
    expected = "tool_call(...), tool_calls(...), text(...), an AssistantMessage, a ChatResponse"
    raise TypeError(
        f"{where} is {step!r}; expected {expected}"
        + (" or a callable (prompt) -> step." if allow_callable else ".")
    )


def _finish_reason(message: AssistantMessage) -> str:
    return "tool_calls" if message.tool_calls else "stop"


def _message_words(message: Message) -> int:
    if isinstance(message, ToolResponseMessage):
        return count_words(*(response.response_data for response in message.responses))
    words = count_words(message.text)
    if isinstance(message, AssistantMessage):
        words += count_words(*(f"{call.name} {call.arguments}" for call in message.tool_calls))
    return words


def _usage(prompt: Prompt, answer: AssistantMessage) -> dict[str, int]:
    prompt_tokens = sum(_message_words(message) for message in prompt.messages)
    completion_tokens = _message_words(answer)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _tool_names(prompt: Prompt) -> list[str]:
    options = prompt.options
    if not isinstance(options, ToolCallingChatOptions):
        return []
    names = [callback.definition.name for callback in options.tool_callbacks]
    return names + [name for name in options.tool_names if name not in names]


def _shorten(value: str) -> str:
    return value if len(value) <= _MAX_SHOWN else value[: _MAX_SHOWN - 3] + "..."


def _describe_step(step: object) -> str:
    if isinstance(step, (_TextStep, _ToolCallsStep)):
        return repr(step)
    if isinstance(step, (ChatResponse, AssistantMessage)):
        return _shorten(repr(step))
    return f"the callable step {getattr(step, '__qualname__', repr(step))}"


def _describe_last_message(prompt: Prompt) -> str:
    if not prompt.messages:
        return "(none: the prompt is empty)"
    message = prompt.messages[-1]
    if isinstance(message, ToolResponseMessage):
        parts = ", ".join(f"{r.name}: {r.response_data!r}" for r in message.responses)
        return _shorten(f"tool responses [{parts}]")
    if isinstance(message, AssistantMessage) and message.tool_calls:
        calls = ", ".join(f"{c.name}({c.arguments})" for c in message.tool_calls)
        return _shorten(f"assistant tool calls [{calls}]")
    return f"{message.role} {_shorten(message.text or '')!r}"
