"""Small builders for manager tests: a prompt offering callbacks and a response asking for calls."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from tool_calling import (
    AssistantMessage,
    ChatResponse,
    DefaultToolCallingManager,
    Generation,
    Message,
    Prompt,
    ToolCall,
    ToolCallback,
    ToolCallingChatOptions,
    ToolExecutionResult,
    ToolResponse,
    ToolResponseMessage,
)

_ids = itertools.count(1)


def call(name: str, arguments: str | None = "{}", id: str | None = None) -> ToolCall:
    """A tool call with a fresh id unless one is given."""
    return ToolCall(id or f"call_{next(_ids)}", name, arguments)  # type: ignore[arg-type]


def response_with(*calls: ToolCall) -> ChatResponse:
    """A chat response whose only generation asks for ``calls``."""
    return ChatResponse([Generation(AssistantMessage(tool_calls=list(calls)), "tool_calls")])


def prompt_with(
    callbacks: Sequence[ToolCallback],
    messages: str | Sequence[Message] = "go",
    *,
    tool_names: Sequence[str] = (),
    tool_context: Mapping[str, Any] | None = None,
) -> Prompt:
    """A prompt offering ``callbacks`` (and ``tool_names``) to the model."""
    options = ToolCallingChatOptions(
        tool_callbacks=callbacks, tool_names=tool_names, tool_context=tool_context
    )
    return Prompt(messages if isinstance(messages, str) else list(messages), options)


def run(
    manager: DefaultToolCallingManager,
    callbacks: Sequence[ToolCallback],
    *calls: ToolCall,
    messages: str | Sequence[Message] = "go",
    tool_context: Mapping[str, Any] | None = None,
) -> ToolExecutionResult:
    """Execute ``calls`` with ``manager`` against a prompt offering ``callbacks``."""
    prompt = prompt_with(callbacks, messages, tool_context=tool_context)
    return manager.execute_tool_calls(prompt, response_with(*calls))


def responses(result: ToolExecutionResult) -> list[ToolResponse]:
    """The tool responses of the batch (the last message of the history)."""
    last = result.conversation_history[-1]
    assert isinstance(last, ToolResponseMessage)
    return list(last.responses)


def texts(result: ToolExecutionResult) -> list[str]:
    """The response texts of the batch, in order."""
    return [r.response_data for r in responses(result)]
