"""Tool call limits per turn: the only place limits are counted, checked and reported."""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tool_calling.core.chat.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResponse,
    ToolResponseMessage,
    UserMessage,
)
from tool_calling.core.chat.response import Generation
from tool_calling.core.errors import ToolCallingError
from tool_calling.core.execution.result import ToolExecutionResult

__all__ = [
    "ToolCallLimitBehavior",
    "ToolCallLimitExceededException",
    "ToolCallLimits",
    "breach_text",
    "count_turn_calls",
    "find_breaches",
]


class ToolCallLimitBehavior(str, enum.Enum):  # noqa: UP042 - str-mixin keeps "THROW" == member
    """What happens when a call would exceed a limit."""

    THROW = "THROW"
    """Raise ``ToolCallLimitExceededException`` with the partial result."""
    RETURN_ERROR_RESPONSE = "RETURN_ERROR_RESPONSE"
    """Skip the call, answer it with the breach text (``is_error=True``), go on with the batch."""


def _check_limit(name: str, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer or None (unlimited), got {value!r}")


@dataclass(frozen=True, kw_only=True)
class ToolCallLimits:
    """How many tool calls one turn may make. ``None`` means unlimited.

    A turn is everything after the last user message of the prompt.
    """

    max_calls_per_tool: int | None = 40
    """Calls allowed per tool per turn, unless ``per_tool`` or ``excluded_tools`` says otherwise."""
    per_tool: Mapping[str, int | None] = field(default_factory=dict)
    """Per-tool overrides of ``max_calls_per_tool``; ``None`` exempts that tool."""
    excluded_tools: Iterable[str] = ()
    """Tools with no per-tool limit; they still count toward ``max_total_tool_calls``."""
    max_total_tool_calls: int | None = 150
    """Calls allowed across all tools per turn."""
    on_limit_exceeded: ToolCallLimitBehavior = ToolCallLimitBehavior.THROW
    """Raise, or answer the breaching call with an error response and go on."""
    # Derived once, read for every batch (find_breaches).
    _unlimited: bool = field(default=False, init=False, repr=False, compare=False)
    _uniform: bool = field(default=False, init=False, repr=False, compare=False)
    _smallest: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_limit("max_calls_per_tool", self.max_calls_per_tool)
        _check_limit("max_total_tool_calls", self.max_total_tool_calls)
        per_tool = dict(self.per_tool)
        for name, value in per_tool.items():
            _check_limit(f"per_tool[{name!r}]", value)
        object.__setattr__(self, "per_tool", per_tool)
        excluded = self.excluded_tools
        if isinstance(excluded, str):
            excluded = (excluded,)
        object.__setattr__(self, "excluded_tools", tuple(excluded))
        try:
            behavior = ToolCallLimitBehavior(self.on_limit_exceeded)
        except ValueError:
            choices = ", ".join(b.value for b in ToolCallLimitBehavior)
            raise ValueError(
                f"on_limit_exceeded must be one of {choices}, got {self.on_limit_exceeded!r}"
            ) from None
        object.__setattr__(self, "on_limit_exceeded", behavior)
        unlimited = (
            self.max_total_tool_calls is None
            and self.max_calls_per_tool is None
            and all(v is None for v in per_tool.values())
        )
        object.__setattr__(self, "_unlimited", unlimited)
        # Every tool has the same per-tool limit: no overrides, no exclusions.
        object.__setattr__(self, "_uniform", not per_tool and not self.excluded_tools)
        # A turn with at most this many calls breaches nothing.
        limits = [self.max_calls_per_tool, self.max_total_tool_calls, *per_tool.values()]
        object.__setattr__(self, "_smallest", min((n for n in limits if n is not None), default=0))

    def limit_for(self, tool_name: str) -> int | None:
        """Return the per-turn limit of ``tool_name``, or ``None`` when it has none."""
        if tool_name in self.excluded_tools:
            return None
        if tool_name in self.per_tool:
            return self.per_tool[tool_name]
        return self.max_calls_per_tool

    @property
    def is_unlimited(self) -> bool:
        """True when no limit can ever be reached."""
        return self._unlimited


def breach_text(tool_name: str | None, limit: int) -> str:
    """Return the text the model sees when a call breaches a limit."""
    if tool_name is None:
        return (
            f"Total tool call limit ({limit}) exceeded for this turn. "
            "No further tool calls are allowed."
        )
    return (
        f"Tool call limit ({limit}) exceeded for tool '{tool_name}'. "
        "No further calls to this tool are allowed in this turn."
    )


def _turn_counts(messages: Sequence[Message]) -> dict[str, int]:
    counts: dict[str, int] = {}
    # Walk back to the last user message: a turn is short even when the history is long.
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, UserMessage):
            break
        if isinstance(message, ToolResponseMessage):
            for response in message.responses:
                counts[response.name] = counts.get(response.name, 0) + 1
    return counts


def count_turn_calls(messages: Sequence[Message]) -> Counter[str]:
    """Count the tool responses of the current turn (after the last user message), by tool name."""
    return Counter(_turn_counts(messages))


def find_breaches(
    limits: ToolCallLimits, history: Sequence[Message], calls: Sequence[ToolCall]
) -> list[tuple[str | None, int] | None] | None:
    """Count a batch's calls, in order, on top of the turn so far; report the breaching ones.

    Returns ``None`` when no call breaches a limit (the common case), else one entry per call:
    ``None`` for a call within the limits, ``(tool_name or None for the total, limit)`` for one
    that breaches. Every call is counted, breaching or not; the per-tool limit is checked before
    the total, and the N-th call is allowed while the N+1-th breaches.
    """
    if limits._unlimited:
        return None
    if history and isinstance(history[-1], UserMessage):  # the turn's first batch
        if len(calls) <= limits._smallest:
            return None
        counts: dict[str, int] = {}
    else:
        counts = _turn_counts(history)
    total = sum(counts.values()) if counts else 0
    if total + len(calls) <= limits._smallest:
        return None  # no count can reach the smallest limit
    max_total = limits.max_total_tool_calls
    per_tool = limits.max_calls_per_tool
    uniform = limits._uniform
    breaches: list[tuple[str | None, int] | None] | None = None
    for position, call in enumerate(calls):
        name = call.name
        count = counts[name] = counts.get(name, 0) + 1
        total += 1
        if not uniform:
            per_tool = limits.limit_for(name)
        if per_tool is not None and count > per_tool:
            breach: tuple[str | None, int] = (name, per_tool)
        elif max_total is not None and total > max_total:
            breach = (None, max_total)
        else:
            continue
        if breaches is None:
            breaches = [None] * len(calls)
        breaches[position] = breach
    return breaches


class ToolCallLimitExceededException(ToolCallingError):
    """A tool call limit of the current turn was exceeded.

    ``tool_name`` is ``None`` when the total limit was exceeded. ``partial_result`` holds the
    conversation history with the calls that already ran plus the breach response.
    """

    FINISH_REASON: ClassVar[str] = "toolCallLimitExceeded"
    """Finish reason of the generation built by :meth:`build_generation`."""
    METADATA_PARTIAL_TOOL_RESPONSES: ClassVar[str] = "partialToolResponses"
    """Metadata key under which the batch's earlier successful responses are kept."""

    def __init__(
        self,
        tool_name: str | None,
        limit: int,
        partial_result: ToolExecutionResult | None = None,
        message: str | None = None,
    ) -> None:
        if message is None:
            message = (
                f"Tool call limit ({limit}) exceeded for tool '{tool_name}'"
                if tool_name is not None
                else f"Total tool call limit ({limit}) exceeded for this turn"
            )
        super().__init__(message)
        self.tool_name = tool_name
        """The tool whose limit was exceeded, or ``None`` for the total limit."""
        self.limit = limit
        """The limit that was exceeded."""
        self.partial_result = partial_result
        """History with what already ran plus the breach response."""

    @property
    def breach_text(self) -> str:
        """The text the model would see for this breach."""
        return breach_text(self.tool_name, self.limit)

    def build_generation(self) -> Generation:
        """Return one generation carrying the breach text and the batch's successful responses."""
        partial: list[ToolResponse] = []
        if self.partial_result is not None:
            last = self.partial_result.conversation_history[-1]
            responses = last.responses if isinstance(last, ToolResponseMessage) else []
            partial = [r for r in responses if not r.is_error]
        return Generation(
            AssistantMessage(self.breach_text),
            finish_reason=self.FINISH_REASON,
            metadata={self.METADATA_PARTIAL_TOOL_RESPONSES: partial},
        )
