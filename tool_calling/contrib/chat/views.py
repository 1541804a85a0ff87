"""The chat page's views: the user's conversations and one conversation.

The views render the page and what is stored; everything the page then does (send a message,
follow the run, decide on approvals) goes through tool_calling's public HTTP API from the
browser (``static/tool_calling_chat/chat.js``). A user sees only their own conversations here,
staff included (the admin is where operators read other people's).
"""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.paginator import Page, Paginator
from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import get_token
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils.translation import gettext as _

from tool_calling import models
from tool_calling.calls.approvals import can_decide
from tool_calling.contrib.chat._transcript import transcript

__all__ = ["MAX_MESSAGES", "PAGE_SIZE", "conversation", "index"]

PAGE_SIZE = 30
"""Conversations listed per page (``?page=N``)."""

MAX_MESSAGES = 200
"""Stored messages a conversation page shows at most (the newest)."""

_ANY_ID = uuid.UUID(int=0)
"""Stands for a conversation id in the URL the page fills in for new conversations."""


def _conversations(request: HttpRequest) -> Page:
    own = models.Conversation.objects.filter(owner_id=request.user.pk).order_by(
        "-updated_at", "-created_at"
    )
    return Paginator(own, PAGE_SIZE).get_page(request.GET.get("page"))


def _context(request: HttpRequest, **extra: Any) -> dict[str, Any]:
    """What every chat page needs: the user's conversations and the page's configuration."""
    approver = can_decide(request.user)
    config: dict[str, Any] = {
        "csrfToken": get_token(request),
        "api": {
            "conversations": reverse("tool_calling:conversation-list"),
            "executions": reverse("tool_calling:tool-execution-list"),
        },
        "conversationPage": reverse("tool_calling_chat:conversation", args=[_ANY_ID]),
        "anyId": str(_ANY_ID),
        "canApprove": approver,
        "statusLabels": dict(models.ExecutionStatus.choices),
        "conversation": None,
        "activeRun": None,
    }
    config.update(extra.pop("config", {}))
    return {
        "conversations": _conversations(request),
        "can_approve": approver,
        "config": config,
        **extra,
    }


@login_required
def index(request: HttpRequest) -> HttpResponse:
    """The user's conversations and a message box that starts a new one."""
    return render(request, "tool_calling_chat/index.html", _context(request))


@login_required
def conversation(request: HttpRequest, pk: uuid.UUID) -> HttpResponse:
    """One of the user's conversations (404 for anyone else's), and its active run if any.

    While a run answers, the page shows the stored messages up to the run's user message and
    rebuilds the rest from the run's events (the API's stream), so a reload loses nothing
    and shows nothing twice.
    """
    chat = get_object_or_404(models.Conversation, pk=pk, owner_id=request.user.pk)
    active = (
        chat.runs.filter(status__in=models.RUN_ACTIVE_STATUSES)
        .select_related("user_message")
        .order_by("-created_at")
        .first()
    )
    stored = chat.messages.order_by("-sequence")
    run_config = None
    if active is not None:
        if active.user_message is not None:
            stored = stored.filter(sequence__lte=active.user_message.sequence)
        run_config = {
            "id": str(active.pk),
            "eventsUrl": reverse("tool_calling:run-events", kwargs={"pk": active.pk}),
            "cancelUrl": reverse("tool_calling:run-cancel", kwargs={"pk": active.pk}),
            "userSequence": active.user_message.sequence if active.user_message else None,
        }
    total = stored.count()
    newest = list(stored[:MAX_MESSAGES])
    newest.reverse()
    detail = reverse("tool_calling:conversation-detail", kwargs={"pk": chat.pk})
    context = _context(
        request,
        chat=chat,
        title=chat.title or _("Untitled conversation"),
        entries=transcript(chat, newest),
        hidden_messages=max(0, total - len(newest)),
        config={
            "conversation": {
                "id": str(chat.pk),
                "url": detail,
                "messagesUrl": reverse(
                    "tool_calling:conversation-messages", kwargs={"pk": chat.pk}
                ),
            },
            "activeRun": run_config,
        },
    )
    return render(request, "tool_calling_chat/conversation.html", context)
