"""What the API reads and writes: tools, conversations with their messages, turns and runs.

Runs show what a client needs and nothing a tool call's audit keeps back: tool executions are a
summary (tool, status, duration), never arguments, results or error details (S13).
"""

from __future__ import annotations

from typing import Any

from django.db import models as db_models
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field, inline_serializer
from rest_framework import serializers
from rest_framework.reverse import reverse

from tool_calling import models
from tool_calling.api._digits import whole_number
from tool_calling.api.errors import json_type
from tool_calling.calls import approvals
from tool_calling.conf import settings as app_settings
from tool_calling.search import discovered_tools

__all__ = [
    "ApproveSerializer",
    "ConversationDetailSerializer",
    "DenySerializer",
    "ConversationSerializer",
    "MessageSerializer",
    "RunDetailSerializer",
    "RunSerializer",
    "ReviewedToolExecutionSerializer",
    "StrictCharField",
    "ToolExecutionSerializer",
    "ToolSerializer",
    "TurnSerializer",
    "WaitSerializer",
]


def _url(name: str, pk: object, request: Any) -> str:
    """The absolute URL of ``name`` in the namespace the API was included under."""
    match = getattr(request, "resolver_match", None)
    namespace = match.namespace if match is not None and match.namespace else "tool_calling"
    return str(reverse(f"{namespace}:{name}", kwargs={"pk": pk}, request=request))


class StrictCharField(serializers.CharField):
    """DRF's ``CharField`` for JSON strings only: ``123`` is refused, not stored as ``"123"``."""

    default_error_messages = {"not_a_string": "Expected a string, got {kind}."}

    def to_internal_value(self, data: Any) -> str:
        """The string; anything else (a number, a boolean, an array...) fails validation."""
        if not isinstance(data, str):
            self.fail("not_a_string", kind=json_type(data))
        return str(super().to_internal_value(data))


class _SecondsField(serializers.IntegerField):
    """A number of seconds in a query, ASCII digits only (``int()`` takes ``٣``, ``1_0``)."""

    default_error_messages = {
        "not_digits": "Expected a number of seconds (digits 0-9), got {value!r}."
    }

    def to_internal_value(self, data: Any) -> int:
        """The number; anything but ASCII digits (``whole_number``) fails validation."""
        if whole_number(data) is None:
            self.fail("not_digits", value=data)
        return int(super().to_internal_value(data))


class _StrictModelSerializer(serializers.ModelSerializer):
    """A ``ModelSerializer`` whose text fields take JSON strings only."""

    serializer_field_mapping = {
        **serializers.ModelSerializer.serializer_field_mapping,
        db_models.CharField: StrictCharField,
        db_models.TextField: StrictCharField,
    }


class ToolSerializer(serializers.Serializer):
    """A tool the user may use, as the model sees it (a ``ToolDefinition``), and its gate."""

    name = serializers.CharField(read_only=True)
    description = serializers.CharField(read_only=True)
    input_schema = serializers.JSONField(read_only=True)
    requires_approval = serializers.BooleanField(
        read_only=True,
        help_text="Each call waits for a person's approval before it runs (background runs).",
    )


class MessageSerializer(serializers.ModelSerializer):
    """One stored message, tool calls and tool responses included."""

    class Meta:
        model = models.Message
        fields = ["sequence", "role", "text", "tool_calls", "tool_responses", "created_at"]
        read_only_fields = fields


class ConversationSerializer(_StrictModelSerializer):
    """A conversation without its messages (lists, create)."""

    url = serializers.SerializerMethodField()
    messages_url = serializers.SerializerMethodField()

    class Meta:
        model = models.Conversation
        fields = ["id", "title", "created_at", "updated_at", "url", "messages_url"]
        read_only_fields = ["id", "created_at", "updated_at"]

    @extend_schema_field(OpenApiTypes.URI)
    def get_url(self, conversation: models.Conversation) -> str:
        """The conversation's URL."""
        return _url("conversation-detail", conversation.pk, self.context.get("request"))

    @extend_schema_field(OpenApiTypes.URI)
    def get_messages_url(self, conversation: models.Conversation) -> str:
        """Where to POST a message."""
        return _url("conversation-messages", conversation.pk, self.context.get("request"))


class ConversationDetailSerializer(ConversationSerializer):
    """A conversation with its messages in order, and the tools its searches found."""

    messages = MessageSerializer(many=True, read_only=True)
    discovered_tools = serializers.SerializerMethodField(
        help_text="With tool search: the tools the conversation's searches found, oldest "
        "first; they are offered to the model in its next turns without a search."
    )

    class Meta(ConversationSerializer.Meta):
        fields = [*ConversationSerializer.Meta.fields, "messages", "discovered_tools"]

    def get_discovered_tools(self, conversation: models.Conversation) -> list[str]:
        """The names the conversation's tool searches found, oldest first."""
        return discovered_tools(conversation)


class TurnSerializer(serializers.Serializer):
    """The body of ``POST conversations/{id}/messages/``: the user's message (and tools).

    The view passes the names of the tools the user may use as ``context["available_tools"]``.
    """

    text = StrictCharField(trim_whitespace=False, allow_blank=True)
    tools = serializers.ListField(
        child=StrictCharField(max_length=64),
        required=False,
        allow_empty=False,
        max_length=128,
        help_text="Offer only these of your tools in this turn (default: all of them).",
    )

    def validate_tools(self, tools: list[str]) -> list[str]:
        """Refuse names that are not among the user's tools, listing the ones that are."""
        available = list(self.context.get("available_tools") or [])
        unknown = [name for name in tools if name not in available]
        if unknown:
            listed = ", ".join(available) or "none"
            raise serializers.ValidationError(
                f"Unknown or unavailable tool(s): {', '.join(unknown)}. Your tools: {listed}.",
                code="unknown_tool",
            )
        return list(dict.fromkeys(tools))

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

    wait = _SecondsField(required=False, min_value=1)

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

    @extend_schema_field(
        inline_serializer(
            "RunUrls",
            {
                "self": serializers.URLField(help_text="The run."),
                "events": serializers.URLField(help_text="Its events (SSE or JSON polling)."),
                "cancel": serializers.URLField(help_text="Where to POST to cancel it."),
                "retry": serializers.URLField(help_text="Where to POST to retry it (failed)."),
                "conversation": serializers.URLField(help_text="Its conversation."),
            },
        )
    )
    def get_urls(self, run: models.Run) -> dict[str, str]:
        """The run's own URL, its cancel URL and its conversation's URL."""
        request = self.context.get("request")
        return {
            "self": _url("run-detail", run.pk, request),
            "events": _url("run-events", run.pk, request),
            "cancel": _url("run-cancel", run.pk, request),
            "retry": _url("run-retry", run.pk, request),
            "conversation": _url("conversation-detail", run.conversation_id, request),
        }


class RunEventSerializer(serializers.ModelSerializer):
    """One event of a run, in order."""

    class Meta:
        model = models.RunEvent
        fields = ["sequence", "kind", "data", "created_at"]
        read_only_fields = fields


_AUGMENTED_HELP = (
    "Why the model called the tool: the fields argument augmentation asked it for (by default "
    "inner_thought and confidence), as it filled them in; {} when the call had none."
)


class ToolExecutionSummarySerializer(serializers.ModelSerializer):
    """One tool call of a run: which tool, how it ended, why the model called it.

    No arguments, results or errors.
    """

    augmented_arguments = serializers.DictField(read_only=True, help_text=_AUGMENTED_HELP)

    class Meta:
        model = models.ToolExecution
        fields = [
            "id",
            "tool_call_id",
            "tool_name",
            "status",
            "is_error",
            "attempt",
            "approval",
            "augmented_arguments",
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


class ToolExecutionSerializer(serializers.ModelSerializer):
    """One tool call with its approval state (``tool-executions/``).

    ``arguments`` (as the audit keeps them: redacted, capped) and ``original_arguments`` are
    shown to approvers only, who need them to decide; results and errors never are.
    """

    decided_by = serializers.SlugRelatedField(
        slug_field="username",
        read_only=True,
        allow_null=True,  # for the schema: null until someone decides
        help_text="Who approved or denied the call (their username); null until decided.",
    )
    requested_by = serializers.SlugRelatedField(
        source="user",
        slug_field="username",
        read_only=True,
        allow_null=True,
        help_text="Whose turn made the call (their username); null for calls made without a user.",
    )
    augmented_arguments = serializers.DictField(read_only=True, help_text=_AUGMENTED_HELP)
    confirmed_by = serializers.SlugRelatedField(
        slug_field="username",
        read_only=True,
        allow_null=True,
        help_text="Who confirmed the call before an approver decided it (their username).",
    )
    can_decide = serializers.SerializerMethodField(
        help_text="Whether the requesting user may approve (or confirm) the call now."
    )
    conversation_title = serializers.CharField(
        source="conversation.title",
        read_only=True,
        allow_null=True,
        help_text="The title of the call's conversation.",
    )
    user_message = serializers.SerializerMethodField(
        help_text="What the user wrote in the turn that made the call (null outside a run)."
    )
    stage = serializers.SerializerMethodField(
        help_text="Whose decision a waiting call waits for now: `user` (the confirmation of the "
        "person whose turn made it; they approve it themselves) or `approver`; null when it "
        "does not wait."
    )
    urls = serializers.SerializerMethodField()

    class Meta:
        model = models.ToolExecution
        fields = [
            "id",
            "run",
            "conversation",
            "tool_call_id",
            "tool_name",
            "status",
            "is_error",
            "attempt",
            "approval",
            "augmented_arguments",
            "approval_expires_at",
            "deciders",
            "stage",
            "can_decide",
            "conversation_title",
            "user_message",
            "requested_by",
            "confirmed_by",
            "confirmed_at",
            "decided_by",
            "decided_at",
            "decision_reason",
            "created_at",
            "started_at",
            "finished_at",
            "duration_ms",
            "urls",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.ChoiceField(choices=["user", "approver"], allow_null=True))
    def get_can_decide(self, execution: models.ToolExecution) -> bool:
        """Whether the requesting user may approve (or confirm) it now."""
        if execution.status != models.ExecutionStatus.AWAITING_APPROVAL:
            return False
        request = self.context.get("request")
        return request is not None and approvals.may_decide(request.user, execution)

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_user_message(self, execution: models.ToolExecution) -> str | None:
        """The text of the user's message that started the call's run."""
        run = execution.run
        message = run.user_message if run is not None else None
        return message.text if message is not None else None

    def get_stage(self, execution: models.ToolExecution) -> str | None:
        """``user`` or ``approver`` while the call waits; ``None`` otherwise."""
        if execution.status != models.ExecutionStatus.AWAITING_APPROVAL:
            return None
        return approvals.stage(execution)

    @extend_schema_field(
        inline_serializer(
            "ToolExecutionUrls",
            {
                "self": serializers.URLField(help_text="The call."),
                "approve": serializers.URLField(help_text="Where to POST to approve it."),
                "deny": serializers.URLField(help_text="Where to POST to deny it."),
                "run": serializers.URLField(
                    allow_null=True, help_text="Its run; null for a call outside a run."
                ),
            },
        )
    )
    def get_urls(self, execution: models.ToolExecution) -> dict[str, str | None]:
        """The call's URL, where to approve or deny it, and its run."""
        request = self.context.get("request")
        return {
            "self": _url("tool-execution-detail", execution.pk, request),
            "approve": _url("tool-execution-approve", execution.pk, request),
            "deny": _url("tool-execution-deny", execution.pk, request),
            "run": _url("run-detail", execution.run_id, request) if execution.run_id else None,
        }


class ReviewedToolExecutionSerializer(ToolExecutionSerializer):
    """What an approver sees: the call with the arguments it would run with."""

    class Meta(ToolExecutionSerializer.Meta):
        fields = [*ToolExecutionSerializer.Meta.fields, "arguments", "original_arguments"]
        read_only_fields = fields


class ApproveSerializer(serializers.Serializer):
    """The body of ``POST tool-executions/{id}/approve/`` (may be empty)."""

    arguments = serializers.JSONField(
        required=False,
        help_text="Run the call with these arguments (a JSON object) instead of the model's; "
        "they are checked against the tool's schema.",
    )
    note = StrictCharField(required=False, allow_blank=True, max_length=2000)
    remember = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Also decide the tool's next calls in this conversation the same way (a "
        "standing decision of your kind: the user's confirmation or an approval), until the "
        "tool's definition or the rules that asked change.",
    )

    def validate_arguments(self, arguments: Any) -> Any:
        """Only a JSON object can be a tool's arguments."""
        if not isinstance(arguments, dict):
            raise serializers.ValidationError("Arguments must be a JSON object.", code="invalid")
        return arguments


class DenySerializer(serializers.Serializer):
    """The body of ``POST tool-executions/{id}/deny/``: why (the model is told)."""

    reason = StrictCharField(required=False, allow_blank=True, max_length=2000)
