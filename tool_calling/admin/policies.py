"""The admin of decision policies and of standing decisions: who decides which calls."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from tool_calling import models
from tool_calling.calls import approvals


@admin.register(models.DecisionPolicy)
class DecisionPolicyAdmin(admin.ModelAdmin):
    """Operators add, change and remove policies; they apply to the next calls, no deploy.

    A policy only adds decisions to what the tools' code and rows ask for. Changes are logged
    in the admin's history like any change.
    """

    list_display = (
        "name",
        "enabled",
        "tool_pattern",
        "source",
        "destructive_only",
        "condition",
        "requires_confirmation",
        "requires_approval",
        "updated_at",
    )
    list_filter = ("enabled", "requires_confirmation", "requires_approval", "destructive_only")
    search_fields = ("name", "tool_pattern", "source", "condition")
    fieldsets = (
        (None, {"fields": ("name", "enabled")}),
        (
            _("Which calls"),
            {
                "fields": ("tool_pattern", "source", "destructive_only", "condition"),
                "description": _("Every criterion that is set must hold; blank ones match all."),
            },
        ),
        (_("Who decides"), {"fields": ("requires_confirmation", "requires_approval")}),
    )


@admin.register(models.StandingDecision)
class StandingDecisionAdmin(admin.ModelAdmin):
    """The audit of standing decisions ("always allow it in this conversation"); revoke them.

    They are made with a decision on a call (the API's ``remember``), never here; revoking one
    (the admin's history records who did) asks again at the tool's next call there.
    """

    list_display = (
        "tool_name",
        "stage",
        "conversation",
        "created_by",
        "created_at",
        "revoked_at",
    )
    list_filter = ("stage", "revoked_at")
    search_fields = ("tool_name",)
    list_select_related = ("conversation", "created_by")
    readonly_fields = (
        "conversation",
        "tool_name",
        "stage",
        "definition_sha256",
        "decision_basis",
        "created_by",
        "created_from",
        "created_at",
        "revoked_at",
    )
    actions = ("revoke_selected",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Made with a decision on a call, never here."""
        return False

    @admin.action(permissions=["change"], description=_("Revoke selected standing decisions"))
    def revoke_selected(
        self, request: HttpRequest, queryset: QuerySet[models.StandingDecision]
    ) -> None:
        """Revoke them: the tool's next calls in their conversations are asked again."""
        revoked = [d for d in queryset if approvals.revoke_standing(d)]
        for decision in revoked:
            self.log_change(request, decision, "Revoked.")
        self.message_user(
            request,
            ngettext(
                "%(count)d standing decision was revoked.",
                "%(count)d standing decisions were revoked.",
                len(revoked),
            )
            % {"count": len(revoked)},
            messages.SUCCESS,
        )
