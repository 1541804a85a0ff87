"""The governance admin: tools (bulk actions, limits), transcripts, approval queue, audit."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.admin.utils import unquote
from django.contrib.auth import get_permission_codename, get_user_model
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Count, FloatField, IntegerField, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Cast, Coalesce
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.text import Truncator
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext, ngettext_lazy

from tool_calling import models
from tool_calling.calls import approvals
from tool_calling.exceptions import ToolArgumentsError, ToolCallingError
from tool_calling.registry import registry

__all__ = [
    "ApprovalQueueAdmin",
    "ConversationAdmin",
    "ToolAdmin",
    "ToolExecutionAdmin",
    "ToolLimitOverrideInline",
]

# Executions in these states count as errors in the tool list, as does ``is_error``.
_ERROR_STATUSES = (
    models.ExecutionStatus.FAILED,
    models.ExecutionStatus.REFUSED,
    models.ExecutionStatus.TIMED_OUT,
    models.ExecutionStatus.OUTCOME_UNKNOWN,
)

# The window of the tool list's "calls" and "error rate" columns.
_RECENT_WINDOW = timedelta(hours=24)

# Longest text shown for one message part or audit field; the rest is cut with a marker, so a
# huge tool result cannot make an admin page unusable.
_DISPLAY_MAX_CHARS = 20_000


def _clip(text: str) -> str:
    if len(text) <= _DISPLAY_MAX_CHARS:
        return text
    hidden = len(text) - _DISPLAY_MAX_CHARS
    return f"{text[:_DISPLAY_MAX_CHARS]}\n[… {hidden} more characters not shown]"


def _pretty(value: Any) -> str:
    """``value`` as readable text: JSON objects and arrays (even inside a string) indented."""
    if isinstance(value, str):
        if len(value) > _DISPLAY_MAX_CHARS or value[:1] not in ("{", "["):
            return _clip(value)  # not JSON worth indenting (or too long to parse for a page)
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            return value
    if value is None:
        return ""
    try:
        return _clip(json.dumps(value, indent=2, ensure_ascii=False))
    except (TypeError, ValueError, RecursionError):
        return _clip(repr(value))


def _pre(value: Any) -> str:
    """``value`` pretty-printed in an escaped ``<pre>`` block."""
    return format_html('<pre class="tool-calling-pre">{}</pre>', _pretty(value))


def _admin_url(obj: Any, view: str = "change") -> str | None:
    opts = obj._meta
    try:
        return reverse(f"admin:{opts.app_label}_{opts.model_name}_{view}", args=[obj.pk])
    except NoReverseMatch:
        return None


def _conversation_link(execution: models.ToolExecution, empty: str) -> str:
    """The call's conversation, linked to its transcript (``empty`` when it has none)."""
    if execution.conversation is None:
        return empty
    url = _admin_url(execution.conversation)
    if url is None:
        return str(execution.conversation)
    return format_html('<a href="{}">{}</a>', url, execution.conversation)


def _code_requires_approval(name: str) -> bool:
    """Whether the tool's code says ``@tool(requires_approval=True)``: a floor for operators."""
    callback = registry.get(name)
    return bool(callback is not None and callback.metadata.requires_approval)


# -- tools -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _ActionText:
    """What a bulk action says: to the operator (translated) and in each tool's history."""

    done: Any
    """``ngettext_lazy`` message for the tools it changed (``%(count)d``)."""
    unchanged: Any
    """``ngettext_lazy`` message for the selected tools that were already in that state."""
    log: str
    """The ``LogEntry`` change message (stored untranslated, as Django stores its own)."""


_ENABLED = _ActionText(
    ngettext_lazy("Enabled %(count)d tool.", "Enabled %(count)d tools.", "count"),
    ngettext_lazy(
        "%(count)d tool was already enabled.", "%(count)d tools were already enabled.", "count"
    ),
    "Enabled (bulk action).",
)
_DISABLED = _ActionText(
    ngettext_lazy("Disabled %(count)d tool.", "Disabled %(count)d tools.", "count"),
    ngettext_lazy(
        "%(count)d tool was already disabled.", "%(count)d tools were already disabled.", "count"
    ),
    "Disabled (bulk action).",
)
_APPROVAL_REQUIRED = _ActionText(
    ngettext_lazy(
        "%(count)d tool now requires approval.", "%(count)d tools now require approval.", "count"
    ),
    ngettext_lazy(
        "%(count)d tool already required approval.",
        "%(count)d tools already required approval.",
        "count",
    ),
    "Approval required (bulk action).",
)
_APPROVAL_SKIPPED = _ActionText(
    ngettext_lazy(
        "%(count)d tool no longer requires approval.",
        "%(count)d tools no longer require approval.",
        "count",
    ),
    ngettext_lazy(
        "%(count)d tool did not require approval.",
        "%(count)d tools did not require approval.",
        "count",
    ),
    "Approval no longer required (bulk action).",
)
_EXCLUDED = _ActionText(
    ngettext_lazy(
        "Excluded %(count)d tool from per-tool limits.",
        "Excluded %(count)d tools from per-tool limits.",
        "count",
    ),
    ngettext_lazy(
        "%(count)d tool was already excluded.", "%(count)d tools were already excluded.", "count"
    ),
    "Excluded from per-tool limits (bulk action).",
)
_INCLUDED = _ActionText(
    ngettext_lazy(
        "Included %(count)d tool in per-tool limits.",
        "Included %(count)d tools in per-tool limits.",
        "count",
    ),
    ngettext_lazy(
        "%(count)d tool was not excluded.", "%(count)d tools were not excluded.", "count"
    ),
    "Included in per-tool limits (bulk action).",
)


class ToolLimitOverrideInline(admin.StackedInline):
    """The tool's per-turn call limit, or its exclusion from per-tool limits (at most one).

    The override is part of the tool's governance, so it follows the ``Tool`` permissions: who
    may change a tool may change its limit; who may only view it sees the limit read-only.
    """

    model = models.ToolLimitOverride
    extra = 1
    max_num = 1
    fields = ("max_calls_per_turn", "excluded")
    verbose_name = _("limit override")
    verbose_name_plural = _("limit override")

    def _tool_perm(self, request: HttpRequest, action: str) -> bool:
        codename = get_permission_codename(action, models.Tool._meta)
        return request.user.has_perm(f"{models.Tool._meta.app_label}.{codename}")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Adding an override is changing the tool."""
        return self._tool_perm(request, "change")

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Changing an override is changing the tool."""
        return self._tool_perm(request, "change")

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Removing an override is changing the tool."""
        return self._tool_perm(request, "change")

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Who may view the tool sees its override."""
        return self._tool_perm(request, "view") or self._tool_perm(request, "change")


@admin.register(models.Tool)
class ToolAdmin(admin.ModelAdmin):
    """Tools known from code, governed by operators.

    Name, description and schema come from code (``sync_tools``) and are read-only; operators
    enable, disable, require approval, limit and restrict tools, one by one or in bulk. Every
    change takes effect on the next turn. Tools are never added here, and only tools missing
    from code may be deleted: a deleted tool that is still in code would come back on the next
    sync with the default settings, undoing the operators' choices.
    """

    list_display = (
        "name",
        "enabled",
        "source",
        "missing",
        "requires_approval",
        "limit",
        "calls_24h",
        "error_rate_24h",
    )
    list_filter = (
        "enabled",
        "missing",
        "source",
        "requires_approval",
        "execution_mode",
        "idempotent",
    )
    search_fields = ("name", "description")
    list_select_related = ("limit_override",)
    ordering = ("name",)
    actions = (
        "enable",
        "disable",
        "require_approval",
        "skip_approval",
        "exclude_from_limits",
        "include_in_limits",
    )
    inlines = (ToolLimitOverrideInline,)
    filter_horizontal = ("allowed_groups",)
    readonly_fields = (
        "name",
        "description",
        "source",
        "missing",
        "schema_hash",
        "input_schema_display",
        "created_at",
        "updated_at",
        "synced_at",
    )
    fieldsets = (
        (
            _("Definition (from code)"),
            {
                "fields": (
                    "name",
                    "description",
                    "input_schema_display",
                    "schema_hash",
                    "source",
                    "missing",
                )
            },
        ),
        (
            _("Governance"),
            {"fields": ("enabled", "requires_approval", "return_direct", "allowed_groups")},
        ),
        (_("Execution"), {"fields": ("execution_mode", "queue", "timeout", "idempotent")}),
        (_("History"), {"fields": ("created_at", "updated_at", "synced_at")}),
    )

    # -- queryset and columns --------------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[models.Tool]:
        """Tools with their calls, errors and error rate of the last 24 hours.

        The counts are correlated subqueries of the page's own query (no query per row). They
        match executions by ``tool_name`` so that the ``(tool_name, -created_at)`` index bounds
        each count to the window, instead of joining and grouping the whole audit table; the
        list's count queries and filters stay free of them.
        """
        since = timezone.now() - _RECENT_WINDOW
        failed = Q(is_error=True) | Q(status__in=_ERROR_STATUSES)
        recent = (
            models.ToolExecution.objects.filter(tool_name=OuterRef("name"), created_at__gte=since)
            .order_by()
            .values("tool_name")
        )

        def per_tool(expression: Any, output_field: Any) -> Subquery:
            return Subquery(recent.annotate(value=expression).values("value"), output_field)

        return (
            super()
            .get_queryset(request)
            .annotate(
                calls_24h=Coalesce(per_tool(Count("pk"), IntegerField()), 0),
                errors_24h=Coalesce(per_tool(Count("pk", filter=failed), IntegerField()), 0),
                # NULL when there were no calls: no rate rather than a misleading 0%.
                error_rate_24h=per_tool(
                    Cast(Count("pk", filter=failed) * 100.0 / Count("pk"), FloatField()),
                    FloatField(),
                ),
            )
        )

    @admin.display(description=_("limit"))
    def limit(self, obj: models.Tool) -> str:
        """The per-turn limit override: a number, "excluded" or "default"."""
        try:
            override = obj.limit_override
        except models.ToolLimitOverride.DoesNotExist:
            return str(_("default"))
        if override.excluded:
            return str(_("excluded"))
        if override.max_calls_per_turn is not None:
            return str(override.max_calls_per_turn)
        return str(_("default"))

    @admin.display(description=_("calls (24 h)"), ordering="calls_24h")
    def calls_24h(self, obj: models.Tool) -> str:
        """Calls of the last 24 hours, linked to their audit rows."""
        calls = getattr(obj, "calls_24h", 0)
        try:
            url = reverse("admin:tool_calling_toolexecution_changelist")
        except NoReverseMatch:
            return str(calls)
        since = timezone.now() - _RECENT_WINDOW
        query = urlencode(
            {"tool_name": obj.name, "created_at__gte": since.strftime("%Y-%m-%d %H:%M:%S%z")}
        )
        return format_html('<a href="{}?{}">{}</a>', url, query, calls)

    @admin.display(description=_("error rate (24 h)"), ordering="error_rate_24h")
    def error_rate_24h(self, obj: models.Tool) -> str:
        """Share of the last 24 hours' calls that failed, were refused or timed out."""
        rate = getattr(obj, "error_rate_24h", None)
        if rate is None:
            return self.get_empty_value_display()
        text = f"{rate:.1f}"
        return f"{text.removesuffix('.0')}%"

    @admin.display(description=_("input schema"))
    def input_schema_display(self, obj: models.Tool) -> str:
        """The JSON Schema of the arguments, indented and escaped."""
        return _pre(obj.input_schema)

    @admin.display(description=_("requires approval"))
    def requires_approval_in_code(self, obj: models.Tool) -> str:
        """Shown instead of the flag for tools whose code requires approval."""
        return str(
            _(
                "Yes: the tool's code requires approval (@tool(requires_approval=True)); "
                "it cannot be lifted here."
            )
        )

    # -- the form --------------------------------------------------------------------------------

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        """Replace the approval flag by a read-only line when the tool's code requires it."""
        fieldsets = super().get_fieldsets(request, obj)
        if obj is None or not _code_requires_approval(obj.name):
            return fieldsets
        return [
            (
                name,
                {
                    **options,
                    "fields": [
                        "requires_approval_in_code" if field == "requires_approval" else field
                        for field in options["fields"]
                    ],
                },
            )
            for name, options in fieldsets
        ]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        """The definition; also the approval flag when the tool's code requires approval."""
        fields = tuple(super().get_readonly_fields(request, obj))
        if obj is not None and _code_requires_approval(obj.name):
            fields += ("requires_approval_in_code",)
        return fields

    # -- permissions -----------------------------------------------------------------------------

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Tools come from code (``sync_tools``), never from the admin."""
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Only tools missing from code may be deleted (one at a time)."""
        if obj is not None and not obj.missing:
            return False
        return super().has_delete_permission(request, obj)

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        """The governance actions; no bulk delete (see the class docstring)."""
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    # -- bulk actions ----------------------------------------------------------------------------

    def _require_change_permission(self, request: HttpRequest) -> None:
        # get_actions() already hides the actions; this guards direct calls and custom views.
        if not self.has_change_permission(request):
            raise PermissionDenied

    def _log(self, request: HttpRequest, tools: Iterable[models.Tool], message: str) -> None:
        """Write one admin ``LogEntry`` per changed tool (shown in each tool's history)."""
        tools = list(tools)
        user_id = request.user.pk
        if user_id is None:  # admin views require a logged-in user; never log anonymously
            raise PermissionDenied
        if tools:
            LogEntry.objects.log_actions(
                user_id=user_id,
                queryset=tools,
                action_flag=CHANGE,
                change_message=message,
            )

    def _set_flag(
        self,
        request: HttpRequest,
        queryset: QuerySet[models.Tool],
        field: str,
        value: bool,
        text: _ActionText,
    ) -> None:
        self._require_change_permission(request)
        pks = list(queryset.values_list("pk", flat=True))
        with transaction.atomic():
            changed = list(
                models.Tool.objects.select_for_update()
                .filter(pk__in=pks)
                .exclude(**{field: value})
                .order_by("name")
            )
            models.Tool.objects.filter(pk__in=[tool.pk for tool in changed]).update(
                **{field: value, "updated_at": timezone.now()}
            )
            for tool in changed:
                setattr(tool, field, value)
            self._log(request, changed, text.log)
        self._report(request, text, len(changed), len(pks) - len(changed))

    def _report(
        self, request: HttpRequest, text: _ActionText, changed: int, unchanged: int
    ) -> None:
        parts = []
        if changed:
            parts.append(text.done % {"count": changed})
        if unchanged:
            parts.append(text.unchanged % {"count": unchanged})
        self.message_user(request, " ".join(parts), messages.SUCCESS if changed else messages.INFO)

    @admin.action(permissions=["change"], description=_("Enable selected tools"))
    def enable(self, request: HttpRequest, queryset: QuerySet[models.Tool]) -> None:
        """Offer the tools to the model again from the next turn."""
        self._set_flag(request, queryset, "enabled", True, _ENABLED)

    @admin.action(permissions=["change"], description=_("Disable selected tools"))
    def disable(self, request: HttpRequest, queryset: QuerySet[models.Tool]) -> None:
        """Stop offering the tools, and refuse their calls from the next tool call on."""
        self._set_flag(request, queryset, "enabled", False, _DISABLED)

    @admin.action(permissions=["change"], description=_("Require approval for selected tools"))
    def require_approval(self, request: HttpRequest, queryset: QuerySet[models.Tool]) -> None:
        """Make a person approve each call of the tools before it runs."""
        self._set_flag(request, queryset, "requires_approval", True, _APPROVAL_REQUIRED)

    @admin.action(permissions=["change"], description=_("Skip approval for selected tools"))
    def skip_approval(self, request: HttpRequest, queryset: QuerySet[models.Tool]) -> None:
        """Let the tools' calls run without a person's approval.

        Tools whose code requires approval are left as they are, and the operator is told so:
        the code is a floor (``sync_tools`` would set the flag again, and runs gate their calls
        regardless).
        """
        self._require_change_permission(request)
        names = queryset.order_by("name").values_list("name", flat=True)
        floor = [name for name in names if _code_requires_approval(name)]
        if floor:
            self.message_user(
                request,
                ngettext(
                    "%(count)d tool requires approval in its code, which cannot be lifted here; "
                    "left unchanged: %(names)s.",
                    "%(count)d tools require approval in their code, which cannot be lifted "
                    "here; left unchanged: %(names)s.",
                    len(floor),
                )
                % {"count": len(floor), "names": ", ".join(floor)},
                messages.WARNING,
            )
            queryset = queryset.exclude(name__in=floor)
            if not queryset.exists():
                return
        self._set_flag(request, queryset, "requires_approval", False, _APPROVAL_SKIPPED)

    @admin.action(permissions=["change"], description=_("Exclude selected tools from limits"))
    def exclude_from_limits(self, request: HttpRequest, queryset: QuerySet[models.Tool]) -> None:
        """Lift the per-tool call limit (calls still count toward the total per turn)."""
        self._require_change_permission(request)
        pks = list(queryset.values_list("pk", flat=True))
        with transaction.atomic():
            tools = list(
                models.Tool.objects.select_for_update()
                .filter(pk__in=pks)
                .select_related("limit_override")
                .order_by("name")
            )
            new, flipped = [], []
            for tool in tools:
                try:
                    override = tool.limit_override
                except models.ToolLimitOverride.DoesNotExist:
                    new.append(models.ToolLimitOverride(tool=tool, excluded=True))
                    continue
                if not override.excluded:
                    flipped.append(tool)
            models.ToolLimitOverride.objects.bulk_create(new)
            models.ToolLimitOverride.objects.filter(tool__in=flipped).update(excluded=True)
            changed = sorted([o.tool for o in new] + flipped, key=lambda tool: tool.name)
            self._log(request, changed, _EXCLUDED.log)
        self._report(request, _EXCLUDED, len(changed), len(pks) - len(changed))

    @admin.action(permissions=["change"], description=_("Include selected tools in limits"))
    def include_in_limits(self, request: HttpRequest, queryset: QuerySet[models.Tool]) -> None:
        """Apply the per-tool call limit again (the override's number, or the default)."""
        self._require_change_permission(request)
        pks = list(queryset.values_list("pk", flat=True))
        with transaction.atomic():
            changed = list(
                models.Tool.objects.select_for_update()
                .filter(pk__in=pks, limit_override__excluded=True)
                .order_by("name")
            )
            models.ToolLimitOverride.objects.filter(tool__in=changed).update(excluded=False)
            self._log(request, changed, _INCLUDED.log)
        self._report(request, _INCLUDED, len(changed), len(pks) - len(changed))


# -- conversations -----------------------------------------------------------------------------


@admin.register(models.Conversation)
class ConversationAdmin(admin.ModelAdmin):
    """Conversations, read as transcripts: every message, tool call and tool response.

    Read-only: history is never edited here. Everything shown (model text, tool arguments, tool
    results) is escaped, so a tool result that contains HTML or script is displayed as text.
    """

    list_display = ("__str__", "owner", "message_count", "created_at", "updated_at")
    list_filter = ("updated_at",)
    list_select_related = ("owner",)
    date_hierarchy = "updated_at"
    readonly_fields = ("id", "owner", "title", "created_at", "updated_at")
    fields = readonly_fields
    change_form_template = "tool_calling/admin/conversation/change_form.html"

    def get_search_fields(self, request: HttpRequest) -> list[str]:
        """Search titles and owners (by the user model's ``USERNAME_FIELD``)."""
        return ["title", f"owner__{get_user_model().USERNAME_FIELD}"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[models.Conversation]:
        """Conversations with their number of messages."""
        return super().get_queryset(request).annotate(message_count=Count("messages"))

    @admin.display(description=_("messages"), ordering="message_count")
    def message_count(self, obj: models.Conversation) -> int:
        """How many messages the conversation holds."""
        return getattr(obj, "message_count", 0)

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
                        "arguments": _pretty(call.get("arguments", "")),
                        "execution": execution,
                        "execution_url": (
                            _admin_url(execution) if execution is not None and show_audit else None
                        ),
                    }
                )
            responses = [
                {
                    "id": response.get("id", ""),
                    "name": response.get("name", ""),
                    "data": _pretty(response.get("response_data", "")),
                    "is_error": bool(response.get("is_error")),
                }
                for response in message.tool_responses or []
            ]
            entries.append(
                {
                    "message": message,
                    "role": message.get_role_display(),
                    "text": _clip(message.text) if message.text else "",
                    "tool_calls": calls,
                    "tool_responses": responses,
                    "usage": message.usage or {},
                }
            )
        return entries


# -- the audit ---------------------------------------------------------------------------------


@admin.register(models.ToolExecution)
class ToolExecutionAdmin(admin.ModelAdmin):
    """The audit of tool calls: read-only, filterable; only superusers may delete rows."""

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
        "tool_name",
        "created_at",
    )
    list_select_related = ("conversation", "user")
    date_hierarchy = "created_at"
    search_fields = ("tool_name", "tool_call_id", "task_id", "worker", "error_type")
    # The audit grows without bound: skip the second COUNT(*) of the whole table per page.
    show_full_result_count = False
    # The working data (exact arguments, context and result, not redacted) is never shown.
    exclude = ("payload",)
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
        "result_display",
        "approval",
        "approval_expires_at",
        "decided_by",
        "decided_at",
        "decision_reason",
        "original_arguments_display",
        "error_type",
        "error_display",
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
            {"fields": ("status", "is_error", "arguments_display", "result_display")},
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
        (_("Operator detail"), {"fields": ("error_type", "error_display")}),
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
        return _conversation_link(obj, self.get_empty_value_display())

    @admin.display(description=_("arguments"))
    def arguments_display(self, obj: models.ToolExecution) -> str:
        """The arguments as the model sent them, indented when they are JSON."""
        return self._block(obj.arguments)

    @admin.display(description=_("original arguments"))
    def original_arguments_display(self, obj: models.ToolExecution) -> str:
        """The model's arguments, when an approver edited them before approving."""
        return self._block(obj.original_arguments)

    @admin.display(description=_("result"))
    def result_display(self, obj: models.ToolExecution) -> str:
        """What the model was told, escaped."""
        return self._block(obj.result)

    @admin.display(description=_("error"))
    def error_display(self, obj: models.ToolExecution) -> str:
        """The exception and traceback (operators only; the model never sees it)."""
        return self._block(obj.error)

    def _block(self, text: str) -> str:
        """``text`` in an escaped ``<pre>`` block; the empty-value dash when there is none."""
        return _pre(text) if text else self.get_empty_value_display()

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Audit rows are written by executions only."""
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """The audit is never edited."""
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Only superusers may delete audit rows (retention clean-up)."""
        return bool(request.user.is_active and request.user.is_superuser)


# -- the approval queue ------------------------------------------------------------------------

# How much of a call's arguments the queue shows per row (the decision page shows them all).
_ARGUMENTS_PREVIEW_CHARS = 120

_APPROVED_CALLS = _ActionText(
    ngettext_lazy(
        "Approved %(count)d call; it runs now.", "Approved %(count)d calls; they run now.", "count"
    ),
    ngettext_lazy(
        "Skipped %(count)d call that was no longer awaiting approval.",
        "Skipped %(count)d calls that were no longer awaiting approval.",
        "count",
    ),
    "Approved (bulk action).",
)
_DENIED_CALLS = _ActionText(
    ngettext_lazy(
        "Denied %(count)d call; the model is told so.",
        "Denied %(count)d calls; the model is told so.",
        "count",
    ),
    _APPROVED_CALLS.unchanged,
    "Denied (bulk action).",
)


def _editable_arguments(text: str) -> str:
    """The audit's arguments as the decision page's textarea shows them: JSON indented, whole."""
    if not text or text.isspace():
        return "{}"  # what the call runs with (tool_calling.execution.record_call)
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except (ValueError, RecursionError):
        return text


def _same_arguments(first: str, second: str) -> bool:
    """Whether two argument texts say the same (JSON compared by value, else by words)."""
    try:
        return json.dumps(json.loads(first), sort_keys=True) == json.dumps(
            json.loads(second), sort_keys=True
        )
    except (ValueError, RecursionError):
        return first.split() == second.split()


class _ReasonField(forms.CharField):
    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("max_length", approvals.MAX_REASON_CHARS)
        kwargs.setdefault("widget", forms.Textarea(attrs={"rows": 3, "class": "vLargeTextField"}))
        super().__init__(**kwargs)


class _DenyForm(forms.Form):
    """The reason of a denial: the model reads it in the call's error response."""

    reason = _ReasonField(
        label=_("Reason"),
        help_text=_("The model is told the calls were denied, with this reason."),
    )


class _DecisionForm(forms.Form):
    """One call's decision: its arguments (editable) and a reason or note."""

    arguments = forms.CharField(
        label=_("Arguments"),
        required=False,
        strip=False,
        widget=forms.Textarea(
            attrs={"rows": 12, "class": "vLargeTextField", "spellcheck": "false"}
        ),
        help_text=_(
            "A JSON object, checked against the tool's input schema. Left as it is, the call "
            "runs with the model's arguments; edited, it runs with yours, and the model's are "
            "kept in the audit."
        ),
    )
    reason = _ReasonField(
        label=_("Reason or note"),
        help_text=_(
            "Denying: the model is told the call was denied, with this reason. Approving: a "
            "note kept with the decision."
        ),
    )


@admin.register(models.PendingApproval)
class ApprovalQueueAdmin(admin.ModelAdmin):
    """The calls awaiting a person's approval, oldest first: approve them or deny them.

    A call is approved with the model's arguments or with arguments the approver edited
    (checked against the tool's schema), or denied with a reason the model reads.

    Who may decide is :func:`tool_calling.approvals.can_decide` (staff, or the
    ``approve_toolexecution`` permission), the rule the API applies too; the admin site itself
    still admits staff only. Every decision goes through :mod:`tool_calling.approvals`, so two
    approvers deciding at once cannot both win (the second is told the call was skipped), and
    is written to the admin log of the call's audit row. Everything shown is escaped.
    """

    list_display = (
        "tool_name",
        "user",
        "conversation_link",
        "run_link",
        "arguments_preview",
        "created_at",
        "approval_expires_at",
    )
    list_display_links = ("tool_name",)
    list_filter = ("tool_name",)
    list_select_related = ("user", "conversation", "run")
    search_fields = ("tool_name", "tool_call_id")
    ordering = ("created_at", "pk")
    actions = ("approve_selected", "deny_selected")
    change_list_template = "tool_calling/admin/approval/change_list.html"
    decision_template = "tool_calling/admin/approval/decision.html"
    deny_confirmation_template = "tool_calling/admin/approval/deny_confirmation.html"

    # -- queryset and columns --------------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[models.PendingApproval]:
        """The calls awaiting approval (``approvals.pending_approvals``)."""
        return super().get_queryset(request).filter(status=models.ExecutionStatus.AWAITING_APPROVAL)

    @admin.display(description=_("conversation"), ordering="conversation")
    def conversation_link(self, obj: models.ToolExecution) -> str:
        """The conversation, linked to its transcript."""
        return _conversation_link(obj, self.get_empty_value_display())

    @admin.display(description=_("run"), ordering="run")
    def run_link(self, obj: models.ToolExecution) -> str:
        """The run waiting for the call (its id's start and status), linked when it has a page."""
        if obj.run is None:
            return self.get_empty_value_display()
        label = f"{str(obj.run.pk)[:8]} ({obj.run.get_status_display()})"
        url = _admin_url(obj.run)
        if url is None:
            return label
        return format_html('<a href="{}">{}</a>', url, label)

    @admin.display(description=_("arguments"))
    def arguments_preview(self, obj: models.ToolExecution) -> str:
        """The start of the arguments, on one line, escaped."""
        if not obj.arguments:
            return self.get_empty_value_display()
        text = Truncator(" ".join(obj.arguments.split())).chars(_ARGUMENTS_PREVIEW_CHARS)
        return format_html('<code class="tool-calling-arguments">{}</code>', text)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The queue, titled as one (not "Select call awaiting approval to change")."""
        context = {"title": _("Approval queue: calls awaiting a decision, oldest first")}
        return super().changelist_view(request, {**context, **(extra_context or {})})

    # -- permissions -----------------------------------------------------------------------------

    def has_module_permission(self, request: HttpRequest) -> bool:
        """The queue is listed on the admin index for whoever may decide."""
        return approvals.can_decide(request.user)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Whoever may decide sees the queue (``approvals.can_decide``)."""
        return approvals.can_decide(request.user)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Deciding is the only change; whoever may decide may (``approvals.can_decide``)."""
        return approvals.can_decide(request.user)

    def has_decide_permission(self, request: HttpRequest) -> bool:
        """The permission of the approve and deny actions."""
        return approvals.can_decide(request.user)

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Calls are made by runs, never here."""
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """A waiting call is denied, never deleted (its run waits for it)."""
        return False

    def _require_decide(self, request: HttpRequest) -> None:
        # get_actions() already hides the actions; this guards direct calls and custom views.
        if not self.has_decide_permission(request) or request.user.pk is None:
            raise PermissionDenied

    # -- deciding --------------------------------------------------------------------------------

    def _selected(
        self, request: HttpRequest, queryset: QuerySet[models.PendingApproval]
    ) -> tuple[list[models.ToolExecution], int]:
        """The calls chosen for an action, in any state, and how many chosen ids are gone.

        The action's queryset holds only the calls still awaiting approval; a call chosen on the
        page and decided since (by someone else, or the sweeper) is taken too, so that it is
        reported as skipped instead of vanishing from the count.
        """
        ids = set(queryset.values_list("pk", flat=True))
        for value in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME):
            try:
                ids.add(int(value))
            except ValueError:
                continue
        rows = list(models.ToolExecution.objects.filter(pk__in=ids).order_by("created_at", "pk"))
        return rows, len(ids) - len(rows)

    def _log(self, request: HttpRequest, execution_id: int, message: str) -> None:
        """Write the decision to the admin log of the call's audit row (its history)."""
        user_id = request.user.pk
        if user_id is None:  # admin views require a logged-in user; never log anonymously
            raise PermissionDenied
        LogEntry.objects.log_actions(
            user_id=user_id,
            queryset=list(models.ToolExecution.objects.filter(pk=execution_id)),
            action_flag=CHANGE,
            change_message=message,
            single_object=True,
        )

    def _decide_each(
        self,
        request: HttpRequest,
        rows: list[models.ToolExecution],
        gone: int,
        decide: Callable[[models.ToolExecution], object],
        text: _ActionText,
    ) -> None:
        """Apply ``decide`` to each call, log each decision, and report done and skipped."""
        done, skipped, forbidden = 0, gone, 0
        for row in rows:
            try:
                decide(row)
            except approvals.ApprovalForbiddenError:
                forbidden += 1
                continue
            except (approvals.ApprovalStateError, models.ToolExecution.DoesNotExist):
                skipped += 1
                continue
            self._log(request, row.pk, text.log)
            done += 1
        self._report(request, text, done, skipped)
        if forbidden:
            self.message_user(
                request,
                ngettext(
                    "%(count)d call was made in your own turn and was left waiting: another "
                    "person must approve it (APPROVALS['ALLOW_SELF_APPROVAL'] is off).",
                    "%(count)d calls were made in your own turns and were left waiting: another "
                    "person must approve them (APPROVALS['ALLOW_SELF_APPROVAL'] is off).",
                    forbidden,
                )
                % {"count": forbidden},
                messages.WARNING,
            )

    def _report(self, request: HttpRequest, text: _ActionText, done: int, skipped: int) -> None:
        parts = []
        if done:
            parts.append(text.done % {"count": done})
        if skipped:
            parts.append(text.unchanged % {"count": skipped})
        if parts:
            level = messages.WARNING if skipped else messages.SUCCESS
            self.message_user(request, " ".join(parts), level)

    @admin.action(permissions=["decide"], description=_("Approve selected calls"))
    def approve_selected(
        self, request: HttpRequest, queryset: QuerySet[models.PendingApproval]
    ) -> None:
        """Approve the calls with the model's arguments; each runs now, its run goes on after."""
        self._require_decide(request)
        rows, gone = self._selected(request, queryset)
        self._decide_each(
            request,
            rows,
            gone,
            lambda row: approvals.approve(row, user=request.user),
            _APPROVED_CALLS,
        )

    @admin.action(permissions=["decide"], description=_("Deny selected calls"))
    def deny_selected(
        self, request: HttpRequest, queryset: QuerySet[models.PendingApproval]
    ) -> HttpResponse | None:
        """Ask for a reason on a confirmation page, then deny the calls with it."""
        self._require_decide(request)
        confirmed = request.POST.get("post") == "yes"
        form = _DenyForm(request.POST if confirmed else None)
        if confirmed and form.is_valid():
            rows, gone = self._selected(request, queryset)
            reason = form.cleaned_data["reason"]
            self._decide_each(
                request,
                rows,
                gone,
                lambda row: approvals.deny(row, user=request.user, reason=reason),
                _DENIED_CALLS,
            )
            return None
        calls = list(queryset.select_related("user", "conversation"))
        if not calls:  # every chosen call was decided meanwhile: nothing to confirm
            rows, gone = self._selected(request, queryset)
            self._report(request, _DENIED_CALLS, 0, len(rows) + gone)
            return None
        context = {
            **self.admin_site.each_context(request),
            "title": _("Deny tool calls"),
            "subtitle": None,
            "opts": self.opts,
            "calls": [{"call": call, "arguments": _pretty(call.arguments)} for call in calls],
            "form": form,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "action_name": "deny_selected",
            "media": self.media,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.deny_confirmation_template, context)

    # -- the decision page -------------------------------------------------------------------------

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """One call: its details, its arguments to edit, Approve or Deny (with a reason)."""
        self._require_decide(request)
        call = self.get_object(request, unquote(object_id))
        if call is None:
            return self._not_waiting(request, object_id)
        shown = _editable_arguments(call.arguments)
        if request.method == "POST":
            form = _DecisionForm(request.POST)
            if form.is_valid():
                response = self._decide(request, call, form, shown)
                if response is not None:
                    return response
        else:
            form = _DecisionForm(initial={"arguments": shown})
        exact = (call.payload or {}).get("arguments")
        tool = call.tool
        context = {
            **self.admin_site.each_context(request),
            "title": _("Approve or deny a tool call"),
            "subtitle": call.tool_name,
            "opts": self.opts,
            "original": call,
            "call": call,
            "form": form,
            "conversation_link": self.conversation_link(call),
            "run_link": self.run_link(call),
            "tool_description": tool.description if tool is not None else "",
            "input_schema": _pretty(tool.input_schema) if tool is not None else "",
            # The audit's text may be redacted or cut; the call itself keeps the exact one.
            "arguments_abridged": exact is not None and not _same_arguments(exact, shown),
            "audit_url": (
                _admin_url(models.ToolExecution(pk=call.pk))
                if request.user.has_perm("tool_calling.view_toolexecution")
                else None
            ),
            "has_view_permission": True,
            "preserved_filters": self.get_preserved_filters(request),
            "media": self.media + form.media,
            **(extra_context or {}),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.decision_template, context)

    def _decide(
        self,
        request: HttpRequest,
        call: models.PendingApproval,
        form: _DecisionForm,
        shown: str,
    ) -> HttpResponse | None:
        """Apply the decision posted for ``call``; ``None`` re-shows the form with its errors."""
        reason = form.cleaned_data["reason"]
        name = call.tool_name
        try:
            if "_deny" in request.POST:
                approvals.deny(call, user=request.user, reason=reason)
                self._log(request, call.pk, "Denied.")
                message = _("The call to tool “%(name)s” was denied; the model is told so.")
            elif "_approve" in request.POST:
                arguments = form.cleaned_data["arguments"]
                edited = not _same_arguments(arguments, shown)
                approvals.approve(
                    call, user=request.user, arguments=arguments if edited else None, note=reason
                )
                if edited:
                    self._log(request, call.pk, "Approved with edited arguments.")
                    message = _(
                        "The call to tool “%(name)s” was approved with your arguments; it runs now."
                    )
                else:
                    self._log(request, call.pk, "Approved.")
                    message = _("The call to tool “%(name)s” was approved; it runs now.")
            else:
                form.add_error(None, _("Choose Approve or Deny."))
                return None
        except approvals.ApprovalStateError:
            return self._not_waiting(request, str(call.pk))
        except ToolArgumentsError as exc:
            form.add_error("arguments", str(exc))
            return None
        except ToolCallingError as exc:  # the tool is no longer installed
            form.add_error(None, str(exc))
            return None
        self.message_user(request, message % {"name": name}, messages.SUCCESS)
        return self._back_to_queue(request)

    def _back_to_queue(self, request: HttpRequest) -> HttpResponseRedirect:
        from django.contrib.admin.templatetags.admin_urls import add_preserved_filters

        url = reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_changelist")
        preserved: dict[str, Any] = {
            "preserved_filters": self.get_preserved_filters(request),
            "opts": self.opts,
        }
        return HttpResponseRedirect(add_preserved_filters(preserved, url))

    def _not_waiting(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Back to the queue, saying what became of a call that is no longer waiting."""
        try:
            call = (
                models.ToolExecution.objects.select_related("decided_by")
                .filter(pk=unquote(object_id))
                .first()
            )
        except (ValueError, TypeError):
            call = None
        if call is None:
            self.message_user(
                request,
                _("No tool call with ID “%(id)s” exists. Perhaps it was deleted?")
                % {"id": object_id},
                messages.WARNING,
            )
            return self._back_to_queue(request)
        state = call.get_approval_display() if call.approval else call.get_status_display()
        if call.decided_by is not None:
            state = _("%(state)s by %(user)s") % {"state": state, "user": call.decided_by}
        self.message_user(
            request,
            _("The call to tool “%(name)s” is no longer awaiting approval: %(state)s.")
            % {"name": call.tool_name, "state": state},
            messages.WARNING,
        )
        return self._back_to_queue(request)
