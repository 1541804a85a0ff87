"""Content on spans: whether it goes there, redaction, and messages as GenAI JSON parts.

Arguments, results and messages are recorded only with
``TOOL_CALLING["OBSERVATIONS_INCLUDE_CONTENT"] = True`` (:func:`content_enabled`), redacted by
``AUDIT_REDACTOR`` and cut to ``AUDIT_MAX_CHARS`` as the audit is.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from tool_calling.audit import audit_text
from tool_calling.conf import settings as app_settings
from tool_calling.core.chat.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolResponseMessage,
)
from tool_calling.core.chat.response import ChatResponse
from tool_calling.observability import semconv as sc

logger = logging.getLogger("tool_calling.observability")


_warned: list[bool] = [False]


def content_enabled() -> bool:
    """``OBSERVATIONS_INCLUDE_CONTENT``: put arguments, results and messages on spans.

    The first time it is found on in a process, a warning says so (spans then carry what
    tools and users sent, redacted by ``AUDIT_REDACTOR`` only).
    """
    on = app_settings.OBSERVATIONS_INCLUDE_CONTENT is True
    if on and not _warned[0]:
        _warned[0] = True
        logger.warning(
            "TOOL_CALLING['OBSERVATIONS_INCLUDE_CONTENT'] is on: tool arguments and results and "
            "the messages of model calls are recorded on spans (redacted by AUDIT_REDACTOR). "
            "Turn it off unless your traces may hold what users and tools send."
        )
    return on


def _redacted(text: str | None, *, tool_name: str, field: str) -> str:
    """``text`` as a span may carry it: as the audit stores it (redacted, then cut).

    ``field`` is ``"arguments"``, ``"result"`` or ``"error"`` (a tool's), or ``"message"`` (the
    text of a user or assistant message, ``tool_name`` blank).
    """
    return audit_text(text, tool_name=tool_name, field=field)


def _arguments(text: str, tool_name: str) -> Any:
    redacted = _redacted(text, tool_name=tool_name, field="arguments")
    try:
        return json.loads(redacted)
    except ValueError:
        return redacted


def _parts(message: Message) -> list[dict[str, Any]]:
    """The GenAI conventions' parts of one message (redacted)."""
    parts: list[dict[str, Any]] = []
    if isinstance(message, ToolResponseMessage):
        for response in message.responses:
            field = "error" if response.is_error else "result"
            parts.append(
                {
                    "type": "tool_call_response",
                    "id": response.id,
                    "response": _redacted(
                        response.response_data, tool_name=response.name, field=field
                    ),
                }
            )
        return parts
    if message.text:
        parts.append(
            {"type": "text", "content": _redacted(message.text, tool_name="", field="message")}
        )
    if isinstance(message, AssistantMessage):
        for call in message.tool_calls:
            parts.append(
                {
                    "type": "tool_call",
                    "id": call.id,
                    "name": call.name,
                    "arguments": _arguments(call.arguments, call.name),
                }
            )
    return parts


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _input_content(messages: Sequence[Message]) -> dict[str, str]:
    system = [
        {"type": "text", "content": _redacted(m.text, tool_name="", field="message")}
        for m in messages
        if isinstance(m, SystemMessage)
    ]
    chat = [
        {"role": m.role, "parts": _parts(m)} for m in messages if not isinstance(m, SystemMessage)
    ]
    found = {sc.GEN_AI_INPUT_MESSAGES: _json(chat)}
    if system:
        found[sc.GEN_AI_SYSTEM_INSTRUCTIONS] = _json(system)
    return found


def _output_content(response: ChatResponse) -> str:
    return _json(
        [
            {
                "role": "assistant",
                "parts": _parts(generation.output),
                "finish_reason": generation.finish_reason or "",
            }
            for generation in response.generations
        ]
    )
