"""Who sees and changes which conversations and runs (S14, S23).

Views combine both halves: the querysets below leave out other users' objects (so they answer
404, not 403, and are never listed), and ``IsOwnerOrPermitted`` decides what a user who may see
an object may do with it. Powers over other users' objects are Django model permissions, as in
the admin, never ``is_staff`` alone: to see them ``tool_calling.view_conversation`` and
``tool_calling.view_run``; to delete a conversation ``tool_calling.delete_conversation``; to
cancel or retry a run ``tool_calling.cancel_run`` or ``tool_calling.retry_run`` (superusers hold
every one).
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.utils.module_loading import import_string
from rest_framework.permissions import SAFE_METHODS, BasePermission

from tool_calling import models
from tool_calling.calls.approvals import can_decide, reviewable
from tool_calling.conf import settings as app_settings
from tool_calling.resolvers import GovernedTools

__all__ = [
    "OTHERS_PERMISSIONS",
    "IsOwnerOrPermitted",
    "configured_permissions",
    "foreign_tools",
    "visible_conversations",
    "visible_executions",
    "visible_run",
    "visible_runs",
]

OTHERS_PERMISSIONS = {
    "destroy": ("tool_calling.delete_conversation", "conversation"),
    "cancel": ("tool_calling.cancel_run", "run"),
    "retry": ("tool_calling.retry_run", "run"),
}
"""View action -> (the permission it takes on another user's object, what the object is)."""


def configured_permissions() -> list[BasePermission]:
    """The permissions ``API["PERMISSION_CLASSES"]`` names (read per request, not at import)."""
    classes = [
        import_string(path) if isinstance(path, str) else path
        for path in app_settings.API["PERMISSION_CLASSES"]
    ]
    return [cls() for cls in classes]


def _may(user: Any, permission: str) -> bool:
    return bool(getattr(user, "is_authenticated", False) and user.has_perm(permission))


def visible_conversations(user: Any) -> QuerySet[models.Conversation]:
    """The conversations ``user`` may see: their own; every one with ``view_conversation``."""
    conversations = models.Conversation.objects.all()
    if _may(user, "tool_calling.view_conversation"):
        return conversations
    if not getattr(user, "is_authenticated", False):
        return conversations.none()
    return conversations.filter(owner=user)


def visible_runs(user: Any) -> QuerySet[models.Run]:
    """The runs ``user`` may see: those of their conversations; every one with ``view_run``."""
    runs = models.Run.objects.all()
    if _may(user, "tool_calling.view_run"):
        return runs
    if not getattr(user, "is_authenticated", False):
        return runs.none()
    return runs.filter(conversation__owner=user)


def visible_run(user: Any, pk: Any) -> Any:
    """The id of run ``pk`` if ``user`` may see it, else ``None`` (:func:`visible_runs`'s rule).

    The user's own run is found in one query; the permission (two queries the first time) is
    asked only for a run that is not theirs.
    """
    if not getattr(user, "is_authenticated", False):
        return None
    own = models.Run.objects.filter(pk=pk, conversation__owner=user)
    found = own.values_list("pk", flat=True).first()
    if found is None and _may(user, "tool_calling.view_run"):
        found = models.Run.objects.filter(pk=pk).values_list("pk", flat=True).first()
    return found


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


def foreign_tools(run: models.Run, user: Any) -> list[str]:
    """The tools ``run`` offers that ``user`` may not use (a retry runs them as the run's user).

    A run's calls run with its own user's rights; whoever retries it must be able to use every
    tool it offers, so that retrying never runs a tool with rights the retrier lacks.
    """
    offered = GovernedTools(run.user).callbacks(run.tool_names)
    theirs = GovernedTools(user).available
    return [callback.name for callback in offered if callback.name not in theirs]


class IsOwnerOrPermitted(BasePermission):
    """The owner may do anything; others what their model permissions allow, never post.

    Reads of what a user sees (the querysets above) are allowed. Deleting another user's
    conversation, cancelling or retrying another user's run each takes its permission
    (:data:`OTHERS_PERMISSIONS`); a retry also takes being allowed every tool the run offers
    (:func:`foreign_tools`). A turn runs with the tools and permissions of the user who sent the
    message, so nobody sends messages into someone else's conversation: 403 there.
    """

    message = "Only the owner of this conversation may do that."

    def has_permission(self, request: Any, view: Any) -> bool:
        """Only authenticated users."""
        return bool(request.user and request.user.is_authenticated)

    def has_object_permission(self, request: Any, view: Any, obj: Any) -> bool:
        """The owner always; others for reads and what their permissions allow."""
        conversation = obj.conversation if isinstance(obj, models.Run) else obj
        user = request.user
        if conversation.owner_id is not None and conversation.owner_id == user.pk:
            return True
        if request.method in SAFE_METHODS:
            return True
        action = getattr(view, "action", None)
        if action not in OTHERS_PERMISSIONS:
            return False
        permission, kind = OTHERS_PERMISSIONS[action]
        if not user.has_perm(permission):
            self.message = (
                f"You need the permission {permission} to do that to another user's {kind}."
            )
            return False
        if action == "retry":
            foreign = foreign_tools(obj, user)
            if foreign:
                self.message = (
                    f"This run offers tools you may not use ({', '.join(foreign)}): only "
                    "someone who may use them retries it."
                )
                return False
        return True
