"""What a chat model returns: generations with their finish reasons and metadata."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tool_calling.core.chat.messages import AssistantMessage

__all__ = ["ChatResponse", "Generation"]


@dataclass(frozen=True)
class Generation:
    """One answer of the model."""

    output: AssistantMessage
    """The assistant message: text and/or tool calls."""
    finish_reason: str | None = None
    """Why the model stopped (``stop``, ``tool_calls``, ``length``, ``returnDirect``, ...)."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Extra data about this generation."""

    @property
    def text(self) -> str | None:
        """The output's text."""
        return self.output.text


@dataclass(frozen=True)
class ChatResponse:
    """The model's answer to one prompt: one or more generations plus response metadata."""

    generations: list[Generation]
    """The generations, usually exactly one."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Response data: ``id``, ``model``, ``usage`` (prompt/completion/total tokens), ..."""

    def __post_init__(self) -> None:
        if not isinstance(self.generations, list):
            object.__setattr__(self, "generations", list(self.generations))

    @property
    def result(self) -> Generation | None:
        """The first generation, or ``None`` when there is none."""
        return self.generations[0] if self.generations else None

    def has_tool_calls(self) -> bool:
        """Return whether any generation asks for tool calls."""
        return any(g.output.tool_calls for g in self.generations)

    def has_finish_reasons(self, *reasons: str) -> bool:
        """Return whether any generation finished for one of ``reasons``."""
        return any(g.finish_reason in reasons for g in self.generations)
