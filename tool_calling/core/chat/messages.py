"""The messages of a conversation: system, user, assistant (with tool calls) and tool responses."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

__all__ = [
    "AssistantMessage",
    "Message",
    "SystemMessage",
    "ToolCall",
    "ToolResponse",
    "ToolResponseMessage",
    "UserMessage",
]


@dataclass(frozen=True)
class ToolCall:
    """One tool call requested by the model."""

    id: str
    """The call id the model chose; its response carries the same id."""
    name: str
    """The name of the tool to call."""
    arguments: str
    """The arguments as the model sent them: a JSON object, as text."""


@dataclass(frozen=True, init=False)
class ToolResponse:
    """The result of one tool call, as text for the model."""

    id: str
    """The id of the tool call this answers."""
    name: str
    """The name of the tool that was called."""
    response_data: str
    """The text the model sees."""
    is_error: bool = False
    """True when the response reports a failure (bad arguments, unknown tool, exception, limit)."""

    # Every tool call builds one. A frozen dataclass's own __init__ sets each field through
    # object.__setattr__, which costs more than the rest of the call's bookkeeping; writing the
    # instance dict once is half the price, and the instance stays frozen (__setattr__ raises).
    def __init__(self, id: str, name: str, response_data: str, is_error: bool = False) -> None:
        fields = self.__dict__
        fields["id"] = id
        fields["name"] = name
        fields["response_data"] = response_data
        fields["is_error"] = is_error


class Message:
    """Base class of every message; ``role`` is ``system``, ``user``, ``assistant`` or ``tool``."""

    role: ClassVar[str] = ""
    text: str | None


@dataclass(frozen=True)
class SystemMessage(Message):
    """Instructions for the model."""

    role: ClassVar[str] = "system"
    text: str
    """The instructions."""


@dataclass(frozen=True)
class UserMessage(Message):
    """What the user said."""

    role: ClassVar[str] = "user"
    text: str
    """The user's text."""


@dataclass(frozen=True)
class AssistantMessage(Message):
    """What the model answered: text, tool calls, or both."""

    role: ClassVar[str] = "assistant"
    text: str | None = None
    """The answer text, or ``None`` when the model only called tools."""
    tool_calls: list[ToolCall] = field(default_factory=list)
    """The tool calls the model asked for, in order."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Provider data about the message (ids, refusal, ...)."""

    def __post_init__(self) -> None:
        if not isinstance(self.tool_calls, list):
            object.__setattr__(self, "tool_calls", list(self.tool_calls))
        if not isinstance(self.metadata, dict):
            object.__setattr__(self, "metadata", dict(self.metadata))

    def has_tool_calls(self) -> bool:
        """Return whether the model asked for at least one tool call."""
        return bool(self.tool_calls)


@dataclass(frozen=True, init=False)
class ToolResponseMessage(Message):
    """The responses to every tool call of one assistant message, in call order."""

    role: ClassVar[str] = "tool"
    responses: list[ToolResponse] = field(default_factory=list)
    """One response per tool call, in call order."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Extra data about the responses."""

    # Built for every batch of tool calls: written like ToolResponse.__init__, for the same reason.
    def __init__(
        self,
        responses: Sequence[ToolResponse] = (),
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        fields = self.__dict__
        fields["responses"] = responses if isinstance(responses, list) else list(responses)
        if metadata is None:
            metadata = {}
        fields["metadata"] = metadata if isinstance(metadata, dict) else dict(metadata)

    @property
    def text(self) -> str | None:  # type: ignore[override]
        """Tool response messages have no text of their own."""
        return None


def as_messages(messages: str | Message | Sequence[Message] | Mapping[str, Any]) -> list[Message]:
    """Normalise a string, one message or a sequence of messages into a list of messages."""
    if isinstance(messages, str):
        return [UserMessage(messages)]
    if isinstance(messages, Message):
        return [messages]
    result: list[Message] = []
    for item in messages:
        if not isinstance(item, Message):
            raise TypeError(
                f"Prompt messages must be Message instances or a string, got {type(item).__name__}"
            )
        result.append(item)
    return result
