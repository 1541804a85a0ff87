"""The admin of tool executions: a read-only audit with filters."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.db.models import Q
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from tool_calling import models
from tool_calling.admin.display import conversation_link, pre
from tool_calling.admin.scale import ScaledModelAdmin, ToolNameFilter


@admin.register(models.ToolExecution)
class ToolExecutionAdmin(ScaledModelAdmin):
    """The audit of tool calls: read-only, filterable; only superusers may delete rows.

    The audit grows without bound, so its list counts at most ``scale.COUNT_CAP`` rows, its
    date hierarchy comes from index probes and its tool filter from the ``Tool`` table
    (``tool_calling.admin.scale``); its order and filters have indexes.
    """

    list_display = (
        "tool_name",
        "status",
        "is_error",
        "mode",
        "attempt",
        "conversation_link",
        "user",
        "duration_ms",
        "created_at",
    )
    list_filter = (
        "status",
        "approval",
        "is_error",
        "mode",
        "idempotent",
        ToolNameFilter,
        "created_at",
    )
    list_select_related = ("conversation", "user")
    date_hierarchy = "created_at"
    # The audit grows without bound: a search matches an identifier exactly, through an index
    # each (a substring search reads every row: 0.7-0.9 s at a million rows).
    search_fields = ("tool_name", "tool_call_id", "task_id", "error_id", "worker")
    search_help_text = _(
        "A tool name, a tool call id, a task id, an error id (as given to the model) or a "
        "worker (as shown on a call), exactly."
    )
    # The working data (exact arguments, context and result, not redacted) is never shown.
    exclude = ("payload",)

    def get_search_results(
        self, request: HttpRequest, queryset: Any, search_term: str
    ) -> tuple[Any, bool]:
        """Rows whose tool name, call id, task id, error id or worker is ``search_term``."""
        term = search_term.strip()
        if not term:
            return queryset, False
        matches = Q()
        for field in self.search_fields:
            matches |= Q(**{field: term})
        return queryset.filter(matches), False

    readonly_fields = (
        "tool_name",
        "tool",
        "tool_call_id",
        "conversation",
        "assistant_message",
        "user",
        "status",
        "is_error",
        "arguments_display",
        "augmented_arguments_display",
        "result_display",
        "approval",
        "approval_expires_at",
        "decided_by",
        "decided_at",
        "decision_reason",
        "original_arguments_display",
        "error_type",
        "error_id",
        "error_display",
        "attempts_display",
        "mode",
        "queue",
        "timeout",
        "idempotent",
        "attempt",
        "task_id",
        "worker",
        "dispatched_at",
        "lease_expires_at",
        "created_at",
        "started_at",
        "finished_at",
        "duration_ms",
    )
    fieldsets = (
        (
            _("Call"),
            {
                "fields": (
                    "tool_name",
                    "tool",
                    "tool_call_id",
                    "conversation",
                    "assistant_message",
                    "user",
                )
            },
        ),
        (
            _("Outcome"),
            {
                "fields": (
                    "status",
                    "is_error",
                    "augmented_arguments_display",
                    "arguments_display",
                    "result_display",
                )
            },
        ),
        (
            _("Approval"),
            {
                "fields": (
                    "approval",
                    "approval_expires_at",
                    "decided_by",
                    "decided_at",
                    "decision_reason",
                    "original_arguments_display",
                )
            },
        ),
        (
            _("Operator detail"),
            {"fields": ("error_type", "error_id", "error_display", "attempts_display")},
        ),
        (
            _("Where it ran"),
            {
                "fields": (
                    "mode",
                    "queue",
                    "timeout",
                    "idempotent",
                    "attempt",
                    "task_id",
                    "worker",
                    "dispatched_at",
                    "lease_expires_at",
                )
            },
        ),
        (_("Timing"), {"fields": ("created_at", "started_at", "finished_at", "duration_ms")}),
    )

    @admin.display(description=_("conversation"), ordering="conversation")
    def conversation_link(self, obj: models.ToolExecution) -> str:
        """The conversation, linked to its transcript."""
        return conversation_link(obj, self.get_empty_value_display())

    @admin.display(description=_("arguments"))
    def arguments_display(self, obj: models.ToolExecution) -> str:
        """The tool's arguments as the model sent them, indented when they are JSON."""
        return self._block(obj.arguments)

    @admin.display(description=_("why the model called it"))
    def augmented_arguments_display(self, obj: models.ToolExecution) -> str:
        """What argument augmentation asked the model for (its reason...), indented."""
        return self._block(obj.augmented_arguments)

    @admin.display(description=_("original arguments"))
    def original_arguments_display(self, obj: models.ToolExecution) -> str:
        """The model's arguments, when an approver edited them before approving."""
        return self._block(obj.original_arguments)

    @admin.display(description=_("result"))
    def result_display(self, obj: models.ToolExecution) -> str:
        """What the model was told, escaped."""
        return self._block(obj.result)

    @admin.display(description=_("earlier attempts"))
    def attempts_display(self, obj: models.ToolExecution) -> str:
        """The attempts before the last one (retries of transient failures), as JSON."""
        if not obj.attempts:
            return self.get_empty_value_display()
        return self._block(json.dumps(obj.attempts, indent=2, ensure_ascii=False))

    @admin.display(description=_("error"))
    def error_display(self, obj: models.ToolExecution) -> str:
        """The exception and traceback (operators only; the model never sees it)."""
        return self._block(obj.error)

    def _block(self, text: str) -> str:
        """``text`` in an escaped ``<pre>`` block; the empty-value dash when there is none."""
        return pre(text) if text else self.get_empty_value_display()

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Audit rows are written by executions only."""
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """The audit is never edited."""
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Only superusers may delete audit rows (retention clean-up)."""
        return bool(request.user.is_active and request.user.is_superuser)
