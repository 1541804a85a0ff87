"""Deciding whether the framework should run the tool calls of a response itself."""

from __future__ import annotations

from abc import ABC, abstractmethod

from tool_calling.core.chat.prompt import ChatOptions, is_internal_tool_execution_enabled
from tool_calling.core.chat.response import ChatResponse

__all__ = ["DefaultToolExecutionEligibilityPredicate", "ToolExecutionEligibilityPredicate"]


class ToolExecutionEligibilityPredicate(ABC):
    """``(options, chat_response) -> bool``: should the framework execute these tool calls?"""

    @abstractmethod
    def test(self, options: ChatOptions | None, chat_response: ChatResponse | None) -> bool:
        """Return whether the framework runs the response's tool calls."""

    def __call__(self, options: ChatOptions | None, chat_response: ChatResponse | None) -> bool:
        """Same as :meth:`test`, so a predicate can be used as a plain function."""
        return self.test(options, chat_response)


class DefaultToolExecutionEligibilityPredicate(ToolExecutionEligibilityPredicate):
    """Internal execution is not turned off in the options, and the response has tool calls."""

    def test(self, options: ChatOptions | None, chat_response: ChatResponse | None) -> bool:
        """Return whether internal execution is on and the response asks for tools."""
        return (
            chat_response is not None
            and is_internal_tool_execution_enabled(options)
            and chat_response.has_tool_calls()
        )
