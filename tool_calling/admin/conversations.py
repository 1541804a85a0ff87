"""The admin of conversations: each one read as a transcript."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from tool_calling import models
from tool_calling.admin.display import admin_url, clip, pretty
from tool_calling.admin.scale import ScaledModelAdmin
from tool_calling.search import discovered_tools


@admin.register(models.Conversation)
class ConversationAdmin(ScaledModelAdmin):
    """Conversations, read as transcripts: every message, tool call and tool response.

    Read-only: history is never edited here. Everything shown (model text, tool arguments, tool
    results) is escaped, so a tool result that contains HTML or script is displayed as text.
    """

    list_display = ("__str__", "owner", "message_count", "created_at", "updated_at")
    list_filter = ("updated_at",)
    list_select_related = ("owner",)
    date_hierarchy = "updated_at"
    readonly_fields = (
        "id",
        "owner",
        "title",
        "discovered_tools_display",
        "created_at",
        "updated_at",
    )
    fields = readonly_fields
    change_form_template = "tool_calling/admin/conversation/change_form.html"

    def get_search_fields(self, request: HttpRequest) -> list[str]:
        """Search titles and owners (by the user model's ``USERNAME_FIELD``)."""
        return ["title", f"owner__{get_user_model().USERNAME_FIELD}"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[models.Conversation]:
        """Conversations with their number of messages.

        The number is a correlated subquery (the ``(conversation, sequence)`` index), so it is
        counted for the rows of the page only, not grouped over every message.
        """
        messages = (
            models.Message.objects.filter(conversation=OuterRef("pk"))
            .order_by()
            .values("conversation")
            .annotate(count=Count("pk"))
            .values("count")
        )
        return (
            super()
            .get_queryset(request)
            .annotate(message_count=Coalesce(Subquery(messages, IntegerField()), 0))
        )

    @admin.display(description=_("messages"), ordering="message_count")
    def message_count(self, obj: models.Conversation) -> int:
        """How many messages the conversation holds."""
        return getattr(obj, "message_count", 0)

    @admin.display(description=_("tools found by search"))
    def discovered_tools_display(self, obj: models.Conversation) -> str:
        """The tools the conversation's searches found, oldest first (TOOL_SEARCH)."""
        return ", ".join(discovered_tools(obj)) or self.get_empty_value_display()

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Conversations are created by turns, never in the admin."""
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """History is read-only; the change page is a view page."""
        return False

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Any = None,
    ) -> Any:
        """Add the transcript of ``obj`` to the page."""
        if obj is not None:
            context["transcript"] = self.transcript(request, obj)
        return super().render_change_form(request, context, add, change, form_url, obj)

    def transcript(self, request: HttpRequest, obj: models.Conversation) -> list[dict[str, Any]]:
        """The messages of ``obj`` in order, as plain data for the template (escaped there)."""
        show_audit = request.user.has_perm("tool_calling.view_toolexecution")
        executions: dict[str, models.ToolExecution] = {}
        for row in obj.tool_executions.order_by("created_at", "pk"):
            executions[row.tool_call_id] = row  # the latest attempt per call id
        entries = []
        for message in obj.messages.order_by("sequence"):
            calls = []
            for call in message.tool_calls or []:
                execution = executions.get(str(call.get("id", "")))
                calls.append(
                    {
                        "id": call.get("id", ""),
                        "name": call.get("name", ""),
                        "arguments": pretty(call.get("arguments", "")),
                        "reason": (
                            pretty(execution.augmented_arguments)
                            if execution is not None and execution.augmented_arguments
                            else ""
                        ),
                        "execution": execution,
                        "execution_url": (
                            admin_url(execution) if execution is not None and show_audit else None
                        ),
                    }
                )
            responses = [
                {
                    "id": response.get("id", ""),
                    "name": response.get("name", ""),
                    "data": pretty(response.get("response_data", "")),
                    "is_error": bool(response.get("is_error")),
                }
                for response in message.tool_responses or []
            ]
            entries.append(
                {
                    "message": message,
                    "role": message.get_role_display(),
                    "text": clip(message.text) if message.text else "",
                    "tool_calls": calls,
                    "tool_responses": responses,
                    "usage": message.usage or {},
                }
            )
        return entries


# -- the audit ---------------------------------------------------------------------------------
