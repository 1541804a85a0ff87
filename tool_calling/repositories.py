"""DjangoChatMemoryRepository: chat memory stored in the Conversation and Message tables."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.db.models import Max, QuerySet, TextField
from django.db.models.functions import Cast
from django.utils import timezone

from tool_calling import models
from tool_calling.core.chat.memory import ChatMemoryRepository
from tool_calling.core.chat.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolResponse,
    ToolResponseMessage,
    UserMessage,
)

__all__ = [
    "MESSAGE_FIELDS",
    "DjangoChatMemoryRepository",
    "conversation_pk",
    "message_from_columns",
    "message_from_row",
    "message_from_values",
    "stored_messages",
    "message_to_fields",
]


def message_to_fields(message: Message) -> dict[str, Any]:
    """Return the ``Message`` model fields that store ``message``."""
    if isinstance(message, AssistantMessage):
        metadata = dict(message.metadata)
        usage = metadata.get("usage") if isinstance(metadata.get("usage"), dict) else {}
        return {
            "role": models.MessageRole.ASSISTANT,
            "text": message.text,
            "tool_calls": [
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls
            ],
            "metadata": metadata,
            "usage": usage,
        }
    if isinstance(message, ToolResponseMessage):
        return {
            "role": models.MessageRole.TOOL,
            "text": None,
            "tool_responses": [
                {
                    "id": r.id,
                    "name": r.name,
                    "response_data": r.response_data,
                    "is_error": r.is_error,
                }
                for r in message.responses
            ],
            "metadata": dict(message.metadata),
        }
    if isinstance(message, SystemMessage):
        return {"role": models.MessageRole.SYSTEM, "text": message.text}
    if isinstance(message, UserMessage):
        return {"role": models.MessageRole.USER, "text": message.text}
    raise TypeError(f"Cannot store a {type(message).__name__}")


def message_from_row(row: models.Message) -> Message:
    """Return the chat message a ``Message`` row stores (identical to what was saved)."""
    return message_from_values(row.role, row.text, row.tool_calls, row.tool_responses, row.metadata)


MESSAGE_FIELDS = ("role", "text", "tool_calls", "tool_responses", "metadata")
"""The ``Message`` fields a chat message is built from (``message_from_values``)."""


def message_from_values(
    role: str,
    text: str | None,
    tool_calls: list[dict[str, Any]],
    tool_responses: list[dict[str, Any]],
    metadata: dict[str, Any],
) -> Message:
    """Return the chat message stored as these ``MESSAGE_FIELDS`` values."""
    if role == models.MessageRole.ASSISTANT:
        return AssistantMessage(
            text,
            [ToolCall(c["id"], c["name"], c["arguments"]) for c in tool_calls],
            dict(metadata),
        )
    if role == models.MessageRole.TOOL:
        return ToolResponseMessage(
            [
                ToolResponse(r["id"], r["name"], r["response_data"], bool(r.get("is_error")))
                for r in tool_responses
            ],
            dict(metadata),
        )
    if role == models.MessageRole.SYSTEM:
        return SystemMessage(text or "")
    return UserMessage(text or "")


def stored_messages(rows: QuerySet[models.Message], *fields: str) -> QuerySet[Any]:
    """``rows`` as tuples of ``fields``, then the message's columns, JSON left as its text.

    Decoding every JSON column of a window costs more than the query does; most messages need
    none of them (a user's text) or one (an assistant's calls), so :func:`message_from_columns`
    decodes only those.
    """
    return rows.annotate(
        _calls=Cast("tool_calls", TextField()),
        _responses=Cast("tool_responses", TextField()),
        _metadata=Cast("metadata", TextField()),
    ).values_list(*fields, "role", "text", "_calls", "_responses", "_metadata")


def _json(text: str | None, empty: Any) -> Any:
    if not text or text in ("[]", "{}"):
        return empty
    return json.loads(text)


def message_from_columns(
    role: str,
    text: str | None,
    tool_calls: str | None,
    tool_responses: str | None,
    metadata: str | None,
) -> Message:
    """The chat message of the columns :func:`stored_messages` returns (JSON as text)."""
    if role == models.MessageRole.ASSISTANT:
        return message_from_values(role, text, _json(tool_calls, []), [], _json(metadata, {}))
    if role == models.MessageRole.TOOL:
        return message_from_values(role, text, [], _json(tool_responses, []), _json(metadata, {}))
    return message_from_values(role, text, [], [], {})


def conversation_pk(conversation_id: str | uuid.UUID) -> uuid.UUID:
    """Return ``conversation_id`` as the UUID that names a stored conversation.

    Raises:
        ValueError: it is not a UUID.
    """
    if isinstance(conversation_id, uuid.UUID):
        return conversation_id
    try:
        return uuid.UUID(str(conversation_id))
    except ValueError:
        raise ValueError(
            f"Conversation id {conversation_id!r} is not a UUID; conversations stored in the "
            "database are identified by their UUID (Conversation.id)."
        ) from None


class DjangoChatMemoryRepository(ChatMemoryRepository):
    """Stores every message (tool calls and responses included) in order, one row each.

    Appending locks the conversation row, so two turns on one conversation never interleave
    their sequence numbers. Conversations named by an unknown UUID are created on first write
    (without an owner).
    """

    def find_conversation_ids(self) -> list[str]:
        """Return every conversation id (as text)."""
        return [str(pk) for pk in models.Conversation.objects.values_list("pk", flat=True)]

    def find_by_conversation_id(
        self, conversation_id: str, limit: int | None = None
    ) -> list[Message]:
        """Return the conversation's messages, oldest first (only the last ``limit`` if given)."""
        rows = models.Message.objects.filter(conversation_id=conversation_pk(conversation_id))
        # Only the fields a message needs, as tuples: model instances cost more than the query.
        if limit:
            latest = list(rows.order_by("-sequence").values_list(*MESSAGE_FIELDS)[:limit])
            latest.reverse()
            return [message_from_values(*values) for values in latest]
        return [
            message_from_values(*values)
            for values in rows.order_by("sequence").values_list(*MESSAGE_FIELDS)
        ]

    def add(self, conversation_id: str, messages: Sequence[Message]) -> None:
        """Append ``messages`` after the conversation's last message."""
        self.append(conversation_id, messages)

    def append(
        self, conversation_id: str | uuid.UUID, messages: Sequence[Message]
    ) -> list[models.Message]:
        """Append ``messages`` after the conversation's last message; returns the new rows."""
        if not messages:
            return []
        pk = conversation_pk(conversation_id)
        with transaction.atomic():
            # The UPDATE both touches updated_at (lists sort by activity) and locks the row
            # until commit, so concurrent appends take their sequence numbers one after another.
            touched = models.Conversation.objects.filter(pk=pk).update(updated_at=timezone.now())
            if not touched:
                models.Conversation.objects.select_for_update().get_or_create(pk=pk)
            last = (
                models.Message.objects.filter(conversation_id=pk).aggregate(last=Max("sequence"))[
                    "last"
                ]
                or 0
            )
            return models.Message.objects.bulk_create(
                models.Message(conversation_id=pk, sequence=last + offset, **fields)
                for offset, fields in enumerate((message_to_fields(m) for m in messages), start=1)
            )

    def save_all(self, conversation_id: str, messages: Sequence[Message]) -> None:
        """Replace the conversation's messages with ``messages``."""
        pk = conversation_pk(conversation_id)
        with transaction.atomic():
            models.Conversation.objects.select_for_update().get_or_create(pk=pk)
            models.Message.objects.filter(conversation_id=pk).delete()
            self.add(conversation_id, messages)

    def delete_by_conversation_id(self, conversation_id: str) -> None:
        """Delete the conversation's messages (the conversation row stays)."""
        models.Message.objects.filter(conversation_id=conversation_pk(conversation_id)).delete()
