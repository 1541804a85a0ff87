"""The admin of tools: enable, disable, limit, exclude, require approval; recent calls."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ActionForm
from django.contrib.admin.models import CHANGE
from django.contrib.auth import get_permission_codename
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import NoReverseMatch, URLPattern, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from tool_calling import models, tool_state
from tool_calling._compat import log_actions
from tool_calling.admin.dashboards import (
    OVERVIEW_URL_NAME,
    TOOL_USAGE_URL_NAME,
    can_read_audit,
    dashboard_urls,
)
from tool_calling.admin.display import code_requires_approval, code_requires_confirmation, pre
from tool_calling.admin.messages import (
    APPROVAL_REQUIRED,
    APPROVAL_SKIPPED,
    DISABLED,
    ENABLED,
    EXCLUDED,
    INCLUDED,
    ActionText,
    limit_text,
)
from tool_calling.admin.metrics import RECENT_WINDOW, with_recent_usage
from tool_calling.admin.scale import FastActionCheckboxMixin
from tool_calling.conf import settings as app_settings


class QueueInput(forms.TextInput):
    """The queue of a tool: free text, offering the two queues the default configuration runs."""

    def get_context(self, name: str, value: Any, attrs: dict[str, Any] | None) -> dict[str, Any]:
        """The input's context, with the list of offered queues."""
        context = super().get_context(name, value, attrs)
        context["widget"]["attrs"]["list"] = f"{context['widget']['attrs']['id']}_queues"
        return context

    def render(
        self, name: str, value: Any, attrs: dict[str, Any] | None = None, renderer: Any = None
    ) -> SafeString:
        """The input, then a ``<datalist>`` of the known queues with what runs them."""
        html = super().render(name, value, attrs, renderer)
        list_id = f"{(attrs or {}).get('id', 'id_' + name)}_queues"
        options = format_html_join("", '<option value="{}" label="{}"></option>', known_queues())
        return mark_safe(f'{html}<datalist id="{list_id}">{options}</datalist>')


def known_queues() -> list[tuple[str, str]]:
    """The queues of ``EXECUTION``, each with the kind of worker the default setup runs it on."""
    execution = app_settings.EXECUTION
    return [
        (str(execution["QUEUE"]), str(_("threads: tools that wait on the network (default)"))),
        (str(execution["PROCESS_QUEUE"]), str(_("processes: CPU-heavy or untrusted tools"))),
    ]


def queue_help_text() -> str:
    """The queue field's help: the default queue, the process queue, and other names."""
    (default, _threads), (processes, _processes) = known_queues()
    # The admin shows help texts unescaped: the queue names (settings) are escaped here.
    return format_html(
        str(
            _(
                "Celery queue for this tool's calls. Blank: {default}, where the calls wait on "
                "the network in a worker's threads. {processes}: a process of its own per call, "
                "for CPU-heavy or untrusted code (its hard time limit kills the process). Any "
                "other name needs a worker that consumes it."
            )
        ),
        default=default,
        processes=processes,
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


class ToolActionForm(ActionForm):
    """The action bar of the tool list, with the number the "Set the calls per turn" action sets."""

    # No min_value here: Django runs no action when its form is invalid, and would only say
    # "No action selected."; the action itself refuses a number below 1, saying why.
    max_calls_per_turn = forms.IntegerField(
        label=_("calls per turn"),
        required=False,
        widget=forms.NumberInput(attrs={"min": 1, "style": "width: 5em"}),
    )


@admin.register(models.Tool)
class ToolAdmin(FastActionCheckboxMixin, admin.ModelAdmin):
    """Tools known from code, governed by operators.

    Name, description and schema come from code (``sync_tools``) and are read-only; operators
    enable, disable, require approval, limit and restrict tools, one by one or in bulk. Every
    change takes effect on the next turn. Tools are never added here, and only tools missing
    from code may be deleted: a deleted tool that is still in code would come back on the next
    sync with the default settings, undoing the operators' choices.
    """

    # Sized for a 1280 px window with the admin's two sidebars: "missing from code" is said in
    # the name's cell, long names and headers wrap (the change list template's styles).
    list_display = (
        "name_display",
        "enabled",
        "source",
        "approval",
        "limit",
        "calls_24h",
        "error_rate_24h",
        "usage_link",
    )
    list_filter = (
        "enabled",
        "missing",
        "source",
        "requires_approval",
        "requires_confirmation",
        "execution_mode",
        "idempotent",
        "always_include",
        "augment_arguments",
    )
    search_fields = ("name", "description", "search_tags")
    list_select_related = ("limit_override",)
    ordering = ("name",)
    actions = (
        "enable",
        "disable",
        "require_approval",
        "skip_approval",
        "exclude_from_limits",
        "include_in_limits",
        "set_limit",
    )
    action_form = ToolActionForm
    inlines = (ToolLimitOverrideInline,)
    change_list_template = "tool_calling/admin/tool/change_list.html"
    change_form_template = "tool_calling/admin/tool/change_form.html"
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
            {
                "fields": (
                    "enabled",
                    "requires_approval",
                    "requires_confirmation",
                    "return_direct",
                    "allowed_groups",
                )
            },
        ),
        (_("Execution"), {"fields": ("execution_mode", "queue", "timeout", "idempotent")}),
        (
            _("Shown to MCP clients"),
            {
                "fields": ("title", "annotations", "icons"),
                "description": _(
                    "What clients of /mcp/ are shown beside the definition: blank keeps what "
                    "the code's @tool(title=..., annotations=..., icons=...) says. Hints never "
                    "lift approval or any other check."
                ),
            },
        ),
        (
            _("Tool search and reasons"),
            {
                "fields": ("search_tags", "always_include", "augment_arguments"),
                "description": _(
                    "Used when TOOL_CALLING['TOOL_SEARCH'] is on: the model is offered a search "
                    "tool instead of every tool. Search tags help it find this tool; an "
                    'always-included tool is offered without a search. "Ask why it is '
                    'called" makes the model say why on each call (shown with the call).'
                ),
            },
        ),
        (
            _("Who may call it, and how often"),
            {
                "fields": ("permission", "quota_per_user", "quota_total", "quota_window"),
                "description": _(
                    "Checked when each call runs, for the user of the turn: the permission on "
                    "top of what the tool's code requires, then the quotas (counted atomically "
                    "in the database). A refused call does not run; the model is told why."
                ),
            },
        ),
        (
            _("Retries of transient failures"),
            {
                "fields": ("retries", "retry_backoff"),
                "description": _(
                    "Only for failures the tool reports as transient (TransientToolError; "
                    "ConnectionError and TimeoutError too when it is idempotent). Each attempt "
                    "is kept in the call's audit."
                ),
            },
        ),
        (_("History"), {"fields": ("created_at", "updated_at", "synced_at")}),
    )

    def formfield_for_dbfield(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        """The queue field offers the configured queues and says what runs each."""
        if db_field.name == "queue":
            kwargs["widget"] = QueueInput
        field = super().formfield_for_dbfield(db_field, request, **kwargs)
        if db_field.name == "queue" and field is not None:
            field.help_text = queue_help_text()
        return field

    # -- the dashboards ---------------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        """Django's URLs of tools, and the dashboards' (``tool_calling.admin.dashboards``)."""
        return [*dashboard_urls(self), *super().get_urls()]

    def _dashboard_url(self, name: str, *args: Any) -> str | None:
        try:
            return reverse(f"{self.admin_site.name}:{name}", args=args)
        except NoReverseMatch:
            return None

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The tool list, linking to the overview for who may read the audit."""
        context = {
            "overview_url": (
                self._dashboard_url(OVERVIEW_URL_NAME) if can_read_audit(request) else None
            )
        }
        return super().changelist_view(request, {**context, **(extra_context or {})})

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """A tool's page, linking to its usage for who may read the audit."""
        context = {
            "usage_url": (
                self._dashboard_url(TOOL_USAGE_URL_NAME, object_id)
                if can_read_audit(request)
                else None
            )
        }
        return super().change_view(
            request, object_id, form_url, {**context, **(extra_context or {})}
        )

    # -- queryset and columns --------------------------------------------------------------------

    def get_list_display(self, request: HttpRequest) -> Any:
        """The columns; the usage links only for who may read the audit (their source)."""
        columns = tuple(super().get_list_display(request))
        if can_read_audit(request):
            return columns
        return tuple(column for column in columns if column != "usage_link")

    def get_queryset(self, request: HttpRequest) -> QuerySet[models.Tool]:
        """Tools with their calls, errors and error rate of the last 24 hours.

        The counts are correlated subqueries of the page's own query (no query per row). They
        match executions by ``tool_name`` so that the ``(tool_name, -created_at)`` index bounds
        each count to the window, instead of joining and grouping the whole audit table; the
        list's count queries and filters stay free of them.
        """
        return with_recent_usage(super().get_queryset(request))

    @admin.display(description=_("decided by"), ordering="requires_approval")
    def approval(self, obj: models.Tool) -> str:
        """Who decides each call before it runs (``Tool.decided_by``)."""
        return obj.decided_by

    @admin.display(description=_("name"), ordering="name")
    def name_display(self, obj: models.Tool) -> str:
        """The name, and "missing from code" for a tool its code no longer defines."""
        if obj.missing:
            return format_html(
                '{} <span class="tc-missing">({})</span>', obj.name, _("missing from code")
            )
        return obj.name

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

    @admin.display(description=_("calls 24 h"), ordering="calls_24h")
    def calls_24h(self, obj: models.Tool) -> str:
        """Calls of the last 24 hours, linked to their audit rows."""
        calls = getattr(obj, "calls_24h", 0)
        try:
            url = reverse("admin:tool_calling_toolexecution_changelist")
        except NoReverseMatch:
            return str(calls)
        since = timezone.now() - RECENT_WINDOW
        query = urlencode(
            {"tool_name": obj.name, "created_at__gte": since.strftime("%Y-%m-%d %H:%M:%S%z")}
        )
        return format_html('<a href="{}?{}">{}</a>', url, query, calls)

    @admin.display(description=_("error rate 24 h (denials excluded)"), ordering="error_rate_24h")
    def error_rate_24h(self, obj: models.Tool) -> str:
        """Share of the last 24 hours' calls that failed, were refused or timed out.

        Calls an approver denied are not errors (the tool did what it should: wait for a
        person); calls refused by a limit, a rule or a disabled tool are. The list says so in
        the column's header and in a note above it (``ERROR_STATUSES``).
        """
        rate = getattr(obj, "error_rate_24h", None)
        if rate is None:
            return self.get_empty_value_display()
        text = f"{rate:.1f}"
        return f"{text.removesuffix('.0')}%"

    @admin.display(description=_("usage"))
    def usage_link(self, obj: models.Tool) -> str:
        """A link to the tool's usage page (calls, errors, durations of the last days)."""
        url = self._dashboard_url(TOOL_USAGE_URL_NAME, obj.pk)
        if url is None:
            return self.get_empty_value_display()
        return format_html(
            '<a href="{}" aria-label="{}">{}</a>',
            url,
            _("Usage of %(name)s") % {"name": obj.name},
            _("14 days"),
        )

    @admin.display(description=_("input schema"))
    def input_schema_display(self, obj: models.Tool) -> str:
        """The JSON Schema of the arguments, indented and escaped."""
        return pre(obj.input_schema)

    @admin.display(description=_("requires approval"))
    def requires_approval_in_code(self, obj: models.Tool) -> str:
        """Shown instead of the flag for tools whose code requires approval."""
        return str(
            _(
                "Yes: the tool's code requires approval (@tool(requires_approval=True)); "
                "it cannot be lifted here."
            )
        )

    @admin.display(description=_("requires the user's confirmation"))
    def requires_confirmation_in_code(self, obj: models.Tool) -> str:
        """Shown instead of the flag for tools whose code always asks for confirmation."""
        return str(
            _(
                "Yes: the tool's code asks the user to confirm each call "
                "(@tool(requires_confirmation=True)); it cannot be lifted here."
            )
        )

    def _code_floors(self, obj: Any) -> dict[str, str]:
        """The flags the tool's code sets, with the read-only line shown in their place."""
        if obj is None:
            return {}
        floors = {}
        if code_requires_approval(obj.name):
            floors["requires_approval"] = "requires_approval_in_code"
        if code_requires_confirmation(obj.name):
            floors["requires_confirmation"] = "requires_confirmation_in_code"
        return floors

    # -- the form --------------------------------------------------------------------------------

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        """Replace a flag the tool's code sets by a read-only line (the code is a floor)."""
        fieldsets = super().get_fieldsets(request, obj)
        floors = self._code_floors(obj)
        if not floors:
            return fieldsets
        return [
            (
                name,
                {
                    **options,
                    "fields": [floors.get(str(field), field) for field in options["fields"]],
                },
            )
            for name, options in fieldsets
        ]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        """The definition; also the flags the tool's code sets."""
        fields = tuple(super().get_readonly_fields(request, obj))
        return fields + tuple(self._code_floors(obj).values())

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
            log_actions(
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
        text: ActionText,
    ) -> None:
        self._require_change_permission(request)
        pks = list(queryset.values_list("pk", flat=True))
        with transaction.atomic():
            changed = tool_state.set_flag(pks, field, value)
            self._log(request, changed, text.log)
        self._report(request, text, len(changed), len(pks) - len(changed))

    def _report(self, request: HttpRequest, text: ActionText, changed: int, unchanged: int) -> None:
        parts = []
        if changed:
            parts.append(text.done % {"count": changed, **text.params})
        if unchanged:
            parts.append(text.unchanged % {"count": unchanged, **text.params})
        self.message_user(request, " ".join(parts), messages.SUCCESS if changed else messages.INFO)

    @admin.action(permissions=["change"], description=_("Enable selected tools"))
    def enable(self, request: HttpRequest, queryset: QuerySet[models.Tool]) -> None:
        """Offer the tools to the model again from the next turn."""
        self._set_flag(request, queryset, "enabled", True, ENABLED)

    @admin.action(permissions=["change"], description=_("Disable selected tools"))
    def disable(self, request: HttpRequest, queryset: QuerySet[models.Tool]) -> None:
        """Stop offering the tools, and refuse their calls from the next tool call on."""
        self._set_flag(request, queryset, "enabled", False, DISABLED)

    @admin.action(permissions=["change"], description=_("Require approval for selected tools"))
    def require_approval(self, request: HttpRequest, queryset: QuerySet[models.Tool]) -> None:
        """Make a person approve each call of the tools before it runs."""
        self._set_flag(request, queryset, "requires_approval", True, APPROVAL_REQUIRED)

    @admin.action(permissions=["change"], description=_("Skip approval for selected tools"))
    def skip_approval(self, request: HttpRequest, queryset: QuerySet[models.Tool]) -> None:
        """Let the tools' calls run without a person's approval.

        Tools whose code requires approval are left as they are, and the operator is told so:
        the code is a floor (``sync_tools`` would set the flag again, and runs gate their calls
        regardless).
        """
        self._require_change_permission(request)
        names = queryset.order_by("name").values_list("name", flat=True)
        floor = [name for name in names if code_requires_approval(name)]
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
        self._set_flag(request, queryset, "requires_approval", False, APPROVAL_SKIPPED)

    @admin.action(permissions=["change"], description=_("Exclude selected tools from limits"))
    def exclude_from_limits(self, request: HttpRequest, queryset: QuerySet[models.Tool]) -> None:
        """Lift the per-tool call limit (calls still count toward the total per turn)."""
        self._set_excluded(request, queryset, True, EXCLUDED)

    @admin.action(permissions=["change"], description=_("Include selected tools in limits"))
    def include_in_limits(self, request: HttpRequest, queryset: QuerySet[models.Tool]) -> None:
        """Apply the per-tool call limit again (the override's number, or the default)."""
        self._set_excluded(request, queryset, False, INCLUDED)

    def _set_excluded(
        self,
        request: HttpRequest,
        queryset: QuerySet[models.Tool],
        excluded: bool,
        text: ActionText,
    ) -> None:
        self._require_change_permission(request)
        pks = list(queryset.values_list("pk", flat=True))
        with transaction.atomic():
            changed = tool_state.set_excluded(pks, excluded)
            self._log(request, changed, text.log)
        self._report(request, text, len(changed), len(pks) - len(changed))

    @admin.action(
        permissions=["change"],
        description=_("Set the calls per turn of selected tools (blank: the default)"),
    )
    def set_limit(self, request: HttpRequest, queryset: QuerySet[models.Tool]) -> None:
        """Give the tools the per-turn limit typed beside the action; blank = ``LIMITS``'s."""
        self._require_change_permission(request)
        form = self.action_form(request.POST)
        form.fields["action"].choices = self.get_action_choices(request)  # type: ignore[attr-defined]
        limit = form.cleaned_data.get("max_calls_per_turn") if form.is_valid() else None
        if limit is not None and limit < 1:
            self.message_user(
                request,
                _("The calls per turn must be 1 or more (blank: the default)."),
                messages.ERROR,
            )
            return
        pks = list(queryset.values_list("pk", flat=True))
        text = limit_text(limit)
        with transaction.atomic():
            changed = tool_state.set_limit(pks, limit)
            self._log(request, changed, text.log)
        self._report(request, text, len(changed), len(pks) - len(changed))


# -- conversations -----------------------------------------------------------------------------
