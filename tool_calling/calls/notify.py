"""E-mail to approvers when a call starts waiting for them (``APPROVALS["NOTIFY_BY_EMAIL"]``).

Receivers of ``signals.approval_requested`` (a call waits for an approver at once) and
``signals.approval_decided`` with ``"confirmed"`` (the user confirmed; an approver decides
next). The message names the tool, who asked, the conversation and when the call expires; it
never carries the call's arguments (they may hold anything the model wrote).
"""

from __future__ import annotations

import logging
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.mail import EmailMessage
from django.db.models import Q

from tool_calling import models, signals
from tool_calling.calls import approvals
from tool_calling.conf import settings as app_settings

__all__ = ["approver_addresses", "connect", "notify_approvers"]

logger = logging.getLogger("tool_calling.approvals")


def approver_addresses(execution: models.ToolExecution) -> list[str]:
    """The e-mail addresses of the active users who may approve ``execution``.

    Holders of the permission (directly or through a group) and superusers; not the person
    whose turn made the call unless self-approval is allowed.
    """
    app_label, codename = approvals.APPROVE_PERMISSION.split(".")
    permission = Permission.objects.filter(
        content_type__app_label=app_label, codename=codename
    ).first()
    who = Q(is_superuser=True)
    if permission is not None:
        who |= Q(user_permissions=permission) | Q(groups__permissions=permission)
    users = get_user_model()._default_manager.filter(who, is_active=True).exclude(email="")
    if execution.user_id is not None and not app_settings.APPROVALS["ALLOW_SELF_APPROVAL"]:
        users = users.exclude(pk=execution.user_id)
    return sorted(set(users.values_list("email", flat=True)))


def _message(execution: models.ToolExecution) -> tuple[str, str]:
    asked_by = execution.user.get_username() if execution.user is not None else "no user"
    conversation = execution.conversation
    title = (conversation.title if conversation is not None else "") or "an untitled conversation"
    expires = (
        execution.approval_expires_at.strftime("%Y-%m-%d %H:%M UTC")
        if execution.approval_expires_at is not None
        else "never"
    )
    subject = f"A call of {execution.tool_name} waits for your approval"
    body = (
        f"The tool {execution.tool_name} was called in {title!r}, asked by {asked_by}, and "
        "waits for an approver.\n"
        f"It expires: {expires}.\n\n"
        "Decide it in the approval queue (the chat page, or the admin's approval queue)."
    )
    return subject, body


def notify_approvers(execution: models.ToolExecution) -> int:
    """Send the e-mail about ``execution`` if the setting is on; returns how many were sent."""
    if not app_settings.APPROVALS["NOTIFY_BY_EMAIL"]:
        return 0
    recipients = approver_addresses(execution)
    if not recipients:
        return 0
    subject, body = _message(execution)
    sent = EmailMessage(subject, body, to=[], bcc=recipients).send(fail_silently=False)
    logger.info("Told %s approvers by e-mail of tool call %s", len(recipients), execution.pk)
    return sent


def _on_requested(sender: Any, *, execution: models.ToolExecution, **kwargs: Any) -> None:
    if approvals.stage(execution) == approvals.APPROVER:
        notify_approvers(execution)


def _on_decided(
    sender: Any, *, execution: models.ToolExecution, decision: str, **kwargs: Any
) -> None:
    if decision == "confirmed":
        notify_approvers(execution)


def connect() -> None:
    """Connect the receivers (``AppConfig.ready()`` does)."""
    signals.approval_requested.connect(_on_requested, dispatch_uid="tc_notify_requested")
    signals.approval_decided.connect(_on_decided, dispatch_uid="tc_notify_decided")
