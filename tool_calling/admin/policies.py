"""The admin of decision policies: which calls wait for the user's confirmation or an approver."""

from __future__ import annotations

from django.contrib import admin
from django.utils.translation import gettext_lazy as _

from tool_calling import models


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
