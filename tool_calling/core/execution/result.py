"""ToolExecutionResult: the conversation after one batch of tool calls ran."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from tool_calling.core.chat.messages import AssistantMessage, Message, ToolResponseMessage
from tool_calling.core.chat.response import Generation

__all__ = ["ToolExecutionResult"]


@dataclass(frozen=True, init=False)
class ToolExecutionResult:
    """The history after a batch of tool calls, and whether its results go straight back."""

    FINISH_REASON: ClassVar[str] = "returnDirect"
    """Finish reason of generations built from return-direct results."""
    METADATA_TOOL_ID: ClassVar[str] = "toolId"
    """Generation metadata key holding the tool call id."""
    METADATA_TOOL_NAME: ClassVar[str] = "toolName"
    """Generation metadata key holding the tool name."""

    conversation_history: list[Message]
    """Prompt messages, the assistant message with the calls, and one tool response message."""
    return_direct: bool = False
    """True only when every executed tool is return-direct."""

    # Built for every batch of tool calls; written like ToolResponse.__init__ (one dict write per
    # field instead of object.__setattr__), and the instance stays frozen.
    def __init__(
        self, conversation_history: Sequence[Message], return_direct: bool = False
    ) -> None:
        fields = self.__dict__
        fields["conversation_history"] = (
            conversation_history
            if isinstance(conversation_history, list)
            else list(conversation_history)
        )
        fields["return_direct"] = return_direct

    @staticmethod
    def build_generations(result: ToolExecutionResult) -> list[Generation]:
        """Return one generation per tool response of the last message (for return-direct)."""
        last = result.conversation_history[-1] if result.conversation_history else None
        if not isinstance(last, ToolResponseMessage):
            return []
        return [
            Generation(
                AssistantMessage(response.response_data),
                finish_reason=ToolExecutionResult.FINISH_REASON,
                metadata={
                    ToolExecutionResult.METADATA_TOOL_ID: response.id,
                    ToolExecutionResult.METADATA_TOOL_NAME: response.name,
                },
            )
            for response in last.responses
        ]

    @property
    def tool_responses(self) -> ToolResponseMessage | None:
        """The tool response message of this batch, if the history ends with one."""
        last = self.conversation_history[-1] if self.conversation_history else None
        return last if isinstance(last, ToolResponseMessage) else None
