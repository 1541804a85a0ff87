"""The admin of runs: find runs by state and age, read a run's events, retry or cancel runs.

Runs are written only by their lifecycle (``tool_calling.runs``): this admin reads them, and its
two actions call ``retry_run`` and ``cancel_run`` as the API does, each gated by its model
permission (``tool_calling.retry_run``, ``tool_calling.cancel_run``) and recorded in the run's
admin history.
"""

from __future__ import annotations

import datetime
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from tool_calling import models, runs
from tool_calling._compat import log_actions
from tool_calling.admin.display import admin_url, clip, pretty
from tool_calling.admin.scale import ScaledModelAdmin
from tool_calling.conversations import ConversationBusyError

AGES: dict[str, tuple[Any, datetime.timedelta, bool]] = {
    "1h": (_("Last hour"), datetime.timedelta(hours=1), True),
    "24h": (_("Last 24 hours"), datetime.timedelta(days=1), True),
    "7d": (_("Last 7 days"), datetime.timedelta(days=7), True),
    "older7d": (_("Older than 7 days"), datetime.timedelta(days=7), False),
    "older30d": (_("Older than 30 days"), datetime.timedelta(days=30), False),
}
"""The age filter's choices: (label, age, whether the run is younger than that)."""


class RunAgeFilter(admin.SimpleListFilter):
    """Runs by when they were created: recent ones, or ones older than a week or a month."""

    title = _("age")
    parameter_name = "age"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        """The ages of ``AGES``."""
        return [(key, label) for key, (label, _age, _younger) in AGES.items()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """Runs created within (or before) the chosen age, on the ``(status, created)`` index."""
        if self.value() not in AGES:
            return queryset
        _label, age, younger = AGES[str(self.value())]
        since = timezone.now() - age
        return (
            queryset.filter(created_at__gte=since)
            if younger
            else queryset.filter(created_at__lt=since)
        )


class RunEventInline(admin.TabularInline):
    """A run's events, in order: what the run did, step by step (read-only)."""

    model = models.RunEvent
    extra = 0
    can_delete = False
    ordering = ("sequence",)
    fields = ("sequence", "kind", "data_display", "created_at")
    readonly_fields = fields
    verbose_name_plural = _("events")

    @admin.display(description=_("data"))
    def data_display(self, obj: models.RunEvent) -> str:
        """The event's data as indented JSON, escaped."""
        return format_html("<pre>{}</pre>", pretty(obj.data)) if obj.data else "-"

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Events are written by the run."""
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Events are history."""
        return False


@admin.register(models.Run)
class RunAdmin(ScaledModelAdmin):
    """Runs (turns driven as Celery steps): their state, their events, retry and cancel.

    Read-only: a run changes only through its lifecycle. Retrying queues a failed run again
    with its own user's tools and permissions; cancelling asks an active run to stop at its
    next step and denies its calls still waiting for approval.
    """

    list_display = (
        "short_id",
        "status",
        "conversation_link",
        "user",
        "rounds",
        "created_at",
        "finished_at",
        "error_display",
    )
    list_filter = ("status", RunAgeFilter)
    list_select_related = ("user", "conversation")
    search_fields = ("=id", "=conversation__id")
    ordering = ("-created_at",)
    actions = ("retry_selected", "cancel_selected")
    inlines = (RunEventInline,)
    fields = (
        "id",
        "status",
        "conversation_link",
        "user",
        "text",
        "answer",
        "finish_reason",
        "error",
        "rounds",
        "event_count",
        "cancel_requested",
        "created_at",
        "started_at",
        "finished_at",
    )
    readonly_fields = fields

    @admin.display(description=_("run"), ordering="id")
    def short_id(self, obj: models.Run) -> str:
        """The first characters of the run's id (the page shows it whole)."""
        return str(obj.pk)[:8]

    @admin.display(description=_("conversation"))
    def conversation_link(self, obj: models.Run) -> str:
        """The run's conversation, linked to its transcript."""
        url = admin_url(obj.conversation)
        label = str(obj.conversation_id)[:8]
        return format_html('<a href="{}">{}</a>', url, label) if url else label

    @admin.display(description=_("error"))
    def error_display(self, obj: models.Run) -> str:
        """Why the run failed, shortened."""
        return clip(obj.error) if obj.error else ""

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Runs are started by turns."""
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Runs change only through their lifecycle (the actions)."""
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Finished runs go by retention (``manage.py purge_expired``), never by hand."""
        return False

    def has_retry_permission(self, request: HttpRequest) -> bool:
        """Who holds ``tool_calling.retry_run``."""
        return bool(request.user.has_perm("tool_calling.retry_run"))

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        """Who holds ``tool_calling.cancel_run``."""
        return bool(request.user.has_perm("tool_calling.cancel_run"))

    def _log(self, request: HttpRequest, done: list[models.Run], message: str) -> None:
        user_id = request.user.pk
        if user_id is None:  # admin views require a logged-in user; never log anonymously
            raise PermissionDenied
        if done:
            log_actions(
                user_id=user_id,
                queryset=done,
                action_flag=CHANGE,
                change_message=message,
            )

    @admin.action(permissions=["retry"], description=_("Retry selected failed runs"))
    def retry_selected(self, request: HttpRequest, queryset: QuerySet[models.Run]) -> None:
        """Queue each failed run again; the others are left as they are, and the reason said."""
        if not self.has_retry_permission(request):  # guards direct calls too
            raise PermissionDenied
        done: list[models.Run] = []
        problems: list[str] = []
        for run in queryset.order_by("created_at"):
            short = str(run.pk)[:8]
            if run.status != models.RunStatus.FAILED:
                problems.append(f"{short}: {run.get_status_display()}, not failed")
                continue
            try:
                runs.retry_run(run)
            except ConversationBusyError:
                problems.append(f"{short}: another turn holds its conversation")
            except (ValueError, runs.CeleryUnavailableError, runs.RunQueueError) as exc:
                problems.append(f"{short}: {exc}")
            else:
                done.append(run)
        self._log(request, done, "Retried (admin action).")
        self._report(request, "retried", len(done), problems)

    @admin.action(permissions=["cancel"], description=_("Cancel selected active runs"))
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet[models.Run]) -> None:
        """Ask each active run to stop at its next step; ended runs are left as they are."""
        if not self.has_cancel_permission(request):
            raise PermissionDenied
        done: list[models.Run] = []
        problems: list[str] = []
        for run in queryset.order_by("created_at"):
            if runs.cancel_run(run, user=request.user):
                done.append(run)
            else:
                problems.append(f"{str(run.pk)[:8]}: {run.get_status_display()}, nothing to cancel")
        self._log(request, done, "Cancel requested (admin action).")
        self._report(request, "cancelled", len(done), problems)

    def _report(self, request: HttpRequest, what: str, count: int, problems: list[str]) -> None:
        if count:
            text = (
                ngettext("%(count)d run queued again.", "%(count)d runs queued again.", count)
                if what == "retried"
                else ngettext(
                    "%(count)d run asked to stop.", "%(count)d runs asked to stop.", count
                )
            )
            self.message_user(request, text % {"count": count}, messages.SUCCESS)
        if problems:
            self.message_user(
                request, _("Left as they are: %s.") % "; ".join(problems), messages.WARNING
            )
