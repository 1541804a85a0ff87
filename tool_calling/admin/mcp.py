"""The admin of MCP servers (sync their tools) and of their mirrored tools (review, approve).

A server's tools arrive disabled (``Tool`` rows with source ``mcp:<alias>``; enable them in the
tools' admin). Each tool's approved definition is pinned: when the server lists something else,
the tool is disabled and held back, and the MCP tools' admin shows the difference until an
operator approves the new definition.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE
from django.core.exceptions import PermissionDenied
from django.db import models as db_models
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from tool_calling import models
from tool_calling._compat import DJANGO_5_0, log_actions
from tool_calling.admin.display import admin_url, pre
from tool_calling.mcp import clients, mirror

__all__ = ["McpServerAdmin", "McpServerToolAdmin", "McpServerToolInline"]

_HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")


def annotations_text(annotations: Any) -> str:
    """The server's hints as ``readOnlyHint: true, ...`` (shown, never trusted)."""
    if not isinstance(annotations, dict) or not annotations:
        return ""
    ordered = [key for key in _HINTS if key in annotations]
    ordered += sorted(key for key in annotations if key not in _HINTS)
    return ", ".join(f"{key}: {json.dumps(annotations[key])}" for key in ordered)


def _tool_link(link: models.McpServerTool) -> str:
    url = admin_url(link.tool)
    if url is None:
        return link.tool.name
    return format_html('<a href="{}">{}</a>', url, link.tool.name)


def _status(link: models.McpServerTool) -> str:
    if link.changed:
        return str(_("Changed on the server: held back until approved"))
    if link.tool.missing:
        return str(_("No longer listed by the server"))
    return str(_("Approved definition"))


class McpServerToolInline(admin.TabularInline):
    """The server's mirrored tools, read-only (their governance is in the tools' admin)."""

    model = models.McpServerTool
    fk_name = "server"
    extra = 0
    can_delete = False
    show_change_link = True
    fields = ("tool_link", "server_name", "status", "enabled", "annotations_display")
    readonly_fields = fields
    verbose_name = _("tool")
    verbose_name_plural = _("tools (enable them in the tools' admin)")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Tools come from syncing the server, never from this form."""
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[models.McpServerTool]:
        """The links with their tools (one query)."""
        return super().get_queryset(request).select_related("tool")

    @admin.display(description=_("tool"))
    def tool_link(self, obj: models.McpServerTool) -> str:
        """The tool's name, linked to its governance."""
        return _tool_link(obj)

    @admin.display(description=_("status"))
    def status(self, obj: models.McpServerTool) -> str:
        """Approved, changed (held back) or missing."""
        return _status(obj)

    @admin.display(description=_("enabled"), boolean=True)
    def enabled(self, obj: models.McpServerTool) -> bool:
        """Whether the tool is enabled."""
        return obj.tool.enabled

    @admin.display(description=_("annotations (not trusted)"))
    def annotations_display(self, obj: models.McpServerTool) -> str:
        """The server's hints."""
        return annotations_text(obj.annotations)


@admin.register(models.McpServer)
class McpServerAdmin(admin.ModelAdmin):
    """MCP servers: how to reach them, who may use their tools, and syncing their tool lists.

    Environment variables and headers name variables of this process's environment; their
    values (tokens) are never stored. "Sync tools" lists each selected server now and mirrors
    its tools (``manage.py mcp sync`` does the same).
    """

    list_display = (
        "alias",
        "transport",
        "enabled",
        "prefix_display",
        "tool_count",
        "changed_count",
        "protocol_version",
        "last_synced_at",
        "sync_error",
    )
    list_filter = ("transport", "enabled")
    search_fields = ("alias", "command", "url")
    ordering = ("alias",)
    actions = ("sync_tools",)
    inlines = (McpServerToolInline,)
    filter_horizontal = ("allowed_groups",)
    # A URL typed without a scheme is https (Django 5.0+; 4.2 assumes http).
    formfield_overrides = {db_models.URLField: {"assume_scheme": "https"}} if DJANGO_5_0 else {}
    readonly_fields = (
        "protocol_version",
        "last_synced_at",
        "last_sync_error",
        "created_at",
        "updated_at",
    )
    fieldsets = (
        (None, {"fields": ("alias", "transport", "enabled", "name_prefix", "timeout")}),
        (_("stdio"), {"fields": ("command", "args", "env")}),
        (_("Streamable HTTP"), {"fields": ("url", "headers")}),
        (
            _("Governance"),
            {"fields": ("allowed_groups", "context_keys", "trust_annotations")},
        ),
        (
            _("Sync"),
            {
                "fields": (
                    "protocol_version",
                    "last_synced_at",
                    "last_sync_error",
                    "created_at",
                    "updated_at",
                )
            },
        ),
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[models.McpServer]:
        """Servers with how many tools they have and how many wait for approval."""
        return (
            super()
            .get_queryset(request)
            .annotate(
                tools_total=Count("tools", distinct=True),
                tools_changed=Count("tools", filter=Q(tools__changed=True), distinct=True),
            )
        )

    @admin.display(description=_("name prefix"))
    def prefix_display(self, obj: models.McpServer) -> str:
        """What the server's tool names start with."""
        return f"{obj.prefix}_"

    @admin.display(description=_("tools"), ordering="tools_total")
    def tool_count(self, obj: models.McpServer) -> int:
        """How many tools are mirrored."""
        return int(getattr(obj, "tools_total", 0))

    @admin.display(description=_("awaiting approval"), ordering="tools_changed")
    def changed_count(self, obj: models.McpServer) -> int:
        """How many tools changed on the server since they were approved."""
        return int(getattr(obj, "tools_changed", 0))

    @admin.display(description=_("last sync error"))
    def sync_error(self, obj: models.McpServer) -> str:
        """The last sync's error, shortened."""
        text = obj.last_sync_error
        return text if len(text) <= 80 else text[:79] + "…"

    def save_model(
        self, request: HttpRequest, obj: models.McpServer, form: Any, change: bool
    ) -> None:
        """Save; this process's session reconnects with the new configuration on first use."""
        before = models.McpServer.objects.filter(pk=obj.pk).values_list("alias", flat=True).first()
        super().save_model(request, obj, form, change)
        for alias in {before, obj.alias} - {None}:
            clients.close_all(alias)

    def _retire(self, servers: list[models.McpServer]) -> None:
        # The tools stay for the audit, marked missing (their link goes with the server).
        models.Tool.objects.filter(mcp__server__in=servers).update(
            missing=True, enabled=False, updated_at=timezone.now()
        )
        for server in servers:
            clients.close_all(server.alias)

    def delete_model(self, request: HttpRequest, obj: models.McpServer) -> None:
        """Delete the server; its tools are kept for the audit, missing and disabled."""
        self._retire([obj])
        super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[models.McpServer]) -> None:
        """Delete the servers; their tools are kept for the audit, missing and disabled."""
        self._retire(list(queryset))
        super().delete_queryset(request, queryset)

    @admin.action(permissions=["change"], description=_("Sync tools from the selected servers"))
    def sync_tools(self, request: HttpRequest, queryset: QuerySet[models.McpServer]) -> None:
        """List each server's tools now and mirror them (new ones disabled, changes held back)."""
        if not self.has_change_permission(request):
            raise PermissionDenied
        for server in queryset.order_by("alias"):
            report = mirror.sync_server(server)
            level = messages.SUCCESS
            if not report.ok:
                level = messages.ERROR
            elif report.changed or report.rejected or report.missing:
                level = messages.WARNING
            self.message_user(request, "; ".join(report.lines()), level)


@admin.register(models.McpServerTool)
class McpServerToolAdmin(admin.ModelAdmin):
    """The tools mirrored from MCP servers: their pinned definitions, hints and changes.

    Read-only: a tool's governance (enabled, approval, groups, limits) is in the tools' admin.
    A tool whose server changed its definition is held back (never offered, never run) until
    "Approve the server's new definitions"; its page shows the difference first. Deleting a
    link forgets its approval: the tool is no longer offered, and the next sync brings it back
    as a new, disabled tool.
    """

    list_display = ("tool_link", "server", "server_name", "status", "enabled", "hints")
    list_filter = ("server", "changed")
    search_fields = ("server_name", "tool__name", "tool__description")
    list_select_related = ("tool", "server")
    actions = ("approve_listed",)
    fields = (
        "tool_link",
        "server",
        "server_name",
        "status",
        "hints",
        "difference",
        "approved_definition",
        "changed_at",
        "approved_at",
        "approved_by",
    )
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Links come from syncing a server."""
        return False

    def has_approve_permission(self, request: HttpRequest) -> bool:
        """Approving a definition changes what a tool does: it needs the tools' change right."""
        return bool(request.user.has_perm("tool_calling.change_tool"))

    @admin.display(description=_("tool"), ordering="tool__name")
    def tool_link(self, obj: models.McpServerTool) -> str:
        """The tool's name, linked to its governance."""
        return _tool_link(obj)

    @admin.display(description=_("status"), ordering="changed")
    def status(self, obj: models.McpServerTool) -> str:
        """Approved, changed (held back) or missing."""
        return _status(obj)

    @admin.display(description=_("enabled"), boolean=True)
    def enabled(self, obj: models.McpServerTool) -> bool:
        """Whether the tool is enabled."""
        return obj.tool.enabled

    @admin.display(description=_("annotations (shown, never trusted)"))
    def hints(self, obj: models.McpServerTool) -> str:
        """The server's hints; they never lift an approval requirement."""
        return annotations_text(obj.annotations)

    @admin.display(description=_("difference (approved → listed by the server)"))
    def difference(self, obj: models.McpServerTool) -> str:
        """What changed since the definition was approved, as a unified diff."""
        diff = mirror.definition_diff(obj)
        if not diff:
            return str(_("None: the server lists the approved definition."))
        rows = [
            (
                "tc-diff-add"
                if line.startswith("+")
                else "tc-diff-del"
                if line.startswith("-")
                else "",
                line,
            )
            for line in diff.splitlines()
        ]
        return format_html(
            '<pre class="tool-calling-pre">{}</pre>',
            format_html_join("\n", '<span class="{}">{}</span>', rows),
        )

    @admin.display(description=_("approved definition"))
    def approved_definition(self, obj: models.McpServerTool) -> str:
        """The pinned definition the model is offered."""
        return pre(mirror.pinned_definition(obj))

    @admin.action(permissions=["approve"], description=_("Approve the server's new definitions"))
    def approve_listed(
        self, request: HttpRequest, queryset: QuerySet[models.McpServerTool]
    ) -> None:
        """Pin what the servers list now; tools the change disabled are enabled again."""
        if not self.has_approve_permission(request):
            raise PermissionDenied
        links = list(queryset.select_related("tool"))
        names = mirror.approve_listed(links, user=request.user)
        tools = list(models.Tool.objects.filter(name__in=names))
        if tools and request.user.pk is not None:
            log_actions(
                user_id=request.user.pk,
                queryset=tools,
                action_flag=CHANGE,
                change_message="Approved the MCP server's new definition.",
            )
        if names:
            self.message_user(
                request,
                ngettext(
                    "Approved the new definition of %(count)d tool: %(names)s.",
                    "Approved the new definitions of %(count)d tools: %(names)s.",
                    len(names),
                )
                % {"count": len(names), "names": ", ".join(names)},
                messages.SUCCESS,
            )
        if len(names) < len(links):
            self.message_user(
                request,
                ngettext(
                    "%(count)d tool had no change to approve.",
                    "%(count)d tools had no change to approve.",
                    len(links) - len(names),
                )
                % {"count": len(links) - len(names)},
                messages.INFO,
            )
