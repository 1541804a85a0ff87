"""Who sees and changes which conversations and runs (CHECKLIST S14).

Views combine both halves: the querysets below leave out other users' objects (so they answer
404, not 403, and are never listed), and ``IsOwnerOrStaff`` decides what a user who may see an
object may do with it.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.utils.module_loading import import_string
from rest_framework.permissions import SAFE_METHODS, BasePermission

from tool_calling import models
from tool_calling.calls.approvals import can_decide, reviewable
from tool_calling.conf import settings as app_settings

__all__ = [
    "IsOwnerOrStaff",
    "configured_permissions",
    "visible_conversations",
    "visible_executions",
    "visible_runs",
]


def configured_permissions() -> list[BasePermission]:
    """The permissions ``API["PERMISSION_CLASSES"]`` names (read per request, not at import)."""
    classes = [
        import_string(path) if isinstance(path, str) else path
        for path in app_settings.API["PERMISSION_CLASSES"]
    ]
    return [cls() for cls in classes]


def visible_conversations(user: Any) -> QuerySet[models.Conversation]:
    """The conversations ``user`` may see: their own; every one for staff."""
    conversations = models.Conversation.objects.all()
    if getattr(user, "is_staff", False):
        return conversations
    if not getattr(user, "is_authenticated", False):
        return conversations.none()
    return conversations.filter(owner=user)


def visible_runs(user: Any) -> QuerySet[models.Run]:
    """The runs ``user`` may see: those of their conversations; every one for staff."""
    runs = models.Run.objects.all()
    if getattr(user, "is_staff", False):
        return runs
    if not getattr(user, "is_authenticated", False):
        return runs.none()
    return runs.filter(conversation__owner=user)


def visible_executions(user: Any) -> QuerySet[models.ToolExecution]:
    """The tool calls ``user`` may see: those of their conversations; approvers also see gated ones.

    Approvers (``approvals.can_decide``) see every call that needed a decision, of any user
    (``approvals.reviewable``), not every call: staff alone see no other user's calls here.
    """
    executions = models.ToolExecution.objects.all()
    if can_decide(user):
        return reviewable(user)
    if not getattr(user, "is_authenticated", False):
        return executions.none()
    return executions.filter(conversation__owner=user)


class IsOwnerOrStaff(BasePermission):
    """The owner may do anything; staff may read, delete and cancel, but not post messages.

    A turn runs with the tools and permissions of the user who sent the message, so staff do not
    send messages into someone else's conversation: they get 403 there.
    """

    message = "Only the owner of this conversation may do that."
    staff_actions = frozenset({"destroy", "cancel", "retry"})

    def has_permission(self, request: Any, view: Any) -> bool:
        """Only authenticated users."""
        return bool(request.user and request.user.is_authenticated)

    def has_object_permission(self, request: Any, view: Any, obj: Any) -> bool:
        """The owner always; staff for reads and ``staff_actions``."""
        conversation = obj.conversation if isinstance(obj, models.Run) else obj
        if conversation.owner_id is not None and conversation.owner_id == request.user.pk:
            return True
        if not request.user.is_staff:
            return False
        return request.method in SAFE_METHODS or getattr(view, "action", None) in self.staff_actions
