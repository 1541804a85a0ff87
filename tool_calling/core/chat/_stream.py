"""Helpers shared by the loop and advisors: stream aggregation and usage sums."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tool_calling.core.chat.messages import AssistantMessage, ToolCall
from tool_calling.core.chat.response import ChatResponse, Generation

USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")

FINAL_RESPONSE = "tool_calling.final_response"
"""Context key of the last chunk a ``ToolCallingAdvisor`` streams: the whole final response.

It is what the blocking call would have returned (the answer, or the return-direct or limit
result), so advisors above the loop can store or inspect it without re-aggregating chunks.
"""


def add_usage(total: Mapping[str, Any] | None, more: Mapping[str, Any] | None) -> dict[str, Any]:
    """Return the sum of two usage mappings (missing counts are zero)."""
    result = dict(total or {})
    for key, value in (more or {}).items():
        if isinstance(value, int) and not isinstance(value, bool):
            result[key] = int(result.get(key) or 0) + value
    return result


def aggregate(chunks: Iterable[ChatResponse]) -> ChatResponse:
    """Merge streamed chunks into one response: text joined, tool calls collected in order.

    Metadata merges with later chunks winning; usage comes from the chunk that carries it.
    """
    texts: list[str] = []
    saw_text = False
    tool_calls: list[ToolCall] = []
    finish_reason: str | None = None
    message_metadata: dict[str, Any] = {}
    generation_metadata: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    for chunk in chunks:
        metadata.update(chunk.metadata)
        for generation in chunk.generations[:1]:
            output = generation.output
            if output.text is not None:
                saw_text = True
                texts.append(output.text)
            tool_calls.extend(output.tool_calls)
            message_metadata.update(output.metadata)
            generation_metadata.update(generation.metadata)
            if generation.finish_reason is not None:
                finish_reason = generation.finish_reason
    message = AssistantMessage("".join(texts) if saw_text else None, tool_calls, message_metadata)
    return ChatResponse(
        [Generation(message, finish_reason=finish_reason, metadata=generation_metadata)],
        metadata=metadata,
    )
