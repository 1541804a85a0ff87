"""What the API reads and writes: tools, conversations with their messages, turns and runs.

Runs show what a client needs and nothing a tool call's audit keeps back: tool executions are a
summary (tool, status, duration), never arguments, results or error details (CHECKLIST S13).
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers
from rest_framework.reverse import reverse

from tool_calling import models
from tool_calling.conf import settings as app_settings

__all__ = [
    "ConversationDetailSerializer",
    "ConversationSerializer",
    "MessageSerializer",
    "RunDetailSerializer",
    "RunSerializer",
    "ToolSerializer",
    "TurnSerializer",
    "WaitSerializer",
]


def _url(name: str, pk: object, request: Any) -> str:
    """The absolute URL of ``name`` in the namespace the API was included under."""
    match = getattr(request, "resolver_match", None)
    namespace = match.namespace if match is not None and match.namespace else "tool_calling"
    return str(reverse(f"{namespace}:{name}", kwargs={"pk": pk}, request=request))


class ToolSerializer(serializers.Serializer):
    """A tool the user may use, as the model sees it (a ``ToolDefinition``)."""

    name = serializers.CharField(read_only=True)
    description = serializers.CharField(read_only=True)
    input_schema = serializers.JSONField(read_only=True)


class MessageSerializer(serializers.ModelSerializer):
    """One stored message, tool calls and tool responses included."""

    class Meta:
        model = models.Message
        fields = ["sequence", "role", "text", "tool_calls", "tool_responses", "created_at"]
        read_only_fields = fields


class ConversationSerializer(serializers.ModelSerializer):
    """A conversation without its messages (lists, create)."""

    url = serializers.SerializerMethodField()
    messages_url = serializers.SerializerMethodField()

    class Meta:
        model = models.Conversation
        fields = ["id", "title", "created_at", "updated_at", "url", "messages_url"]
        read_only_fields = ["id", "created_at", "updated_at"]

    def get_url(self, conversation: models.Conversation) -> str:
        """The conversation's URL."""
        return _url("conversation-detail", conversation.pk, self.context.get("request"))

    def get_messages_url(self, conversation: models.Conversation) -> str:
        """Where to POST a message."""
        return _url("conversation-messages", conversation.pk, self.context.get("request"))


class ConversationDetailSerializer(ConversationSerializer):
    """A conversation with its messages in order."""

    messages = MessageSerializer(many=True, read_only=True)

    class Meta(ConversationSerializer.Meta):
        fields = [*ConversationSerializer.Meta.fields, "messages"]


class TurnSerializer(serializers.Serializer):
    """The body of ``POST conversations/{id}/messages/``: the user's message."""

    text = serializers.CharField(trim_whitespace=False, allow_blank=True)

    def validate_text(self, text: str) -> str:
        """Refuse a blank message and one longer than ``API["MAX_MESSAGE_CHARS"]``."""
        if not text.strip():
            raise serializers.ValidationError("The message is empty.", code="blank")
        limit = int(app_settings.API["MAX_MESSAGE_CHARS"])
        if len(text) > limit:
            raise serializers.ValidationError(
                f"The message is {len(text)} characters long; at most {limit} are accepted.",
                code="max_length",
            )
        return text


class WaitSerializer(serializers.Serializer):
    """The query of ``POST conversations/{id}/messages/``: ``?wait=N`` seconds."""

    wait = serializers.IntegerField(required=False, min_value=1)

    def validate_wait(self, wait: int) -> int:
        """Refuse waits longer than ``API["MAX_WAIT_SECONDS"]``."""
        limit = int(app_settings.API["MAX_WAIT_SECONDS"])
        if wait > limit:
            raise serializers.ValidationError(
                f"Wait at most {limit} seconds; poll the run's URL for longer turns.",
                code="max_value",
            )
        return wait


class RunSerializer(serializers.ModelSerializer):
    """A run's state and links (lists, the 202 of a new turn)."""

    urls = serializers.SerializerMethodField()

    class Meta:
        model = models.Run
        fields = [
            "id",
            "conversation",
            "status",
            "text",
            "answer",
            "error",
            "finish_reason",
            "rounds",
            "cancel_requested",
            "created_at",
            "started_at",
            "finished_at",
            "urls",
        ]
        read_only_fields = fields

    def get_urls(self, run: models.Run) -> dict[str, str]:
        """The run's own URL, its cancel URL and its conversation's URL."""
        request = self.context.get("request")
        return {
            "self": _url("run-detail", run.pk, request),
            "cancel": _url("run-cancel", run.pk, request),
            "conversation": _url("conversation-detail", run.conversation_id, request),
        }


class RunEventSerializer(serializers.ModelSerializer):
    """One event of a run, in order."""

    class Meta:
        model = models.RunEvent
        fields = ["sequence", "kind", "data", "created_at"]
        read_only_fields = fields


class ToolExecutionSummarySerializer(serializers.ModelSerializer):
    """One tool call of a run: which tool, how it ended; no arguments, results or errors."""

    class Meta:
        model = models.ToolExecution
        fields = [
            "tool_call_id",
            "tool_name",
            "status",
            "is_error",
            "attempt",
            "started_at",
            "finished_at",
            "duration_ms",
        ]
        read_only_fields = fields


class RunDetailSerializer(RunSerializer):
    """A run with its events and a summary of its tool calls."""

    events = RunEventSerializer(many=True, read_only=True)
    tool_executions = ToolExecutionSummarySerializer(many=True, read_only=True)

    class Meta(RunSerializer.Meta):
        fields = [*RunSerializer.Meta.fields, "events", "tool_executions"]
        read_only_fields = fields
