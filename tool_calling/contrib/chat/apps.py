"""App config of the chat page."""

from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ChatConfig(AppConfig):
    """``tool_calling.contrib.chat``: templates, static files and the page's system checks."""

    name = "tool_calling.contrib.chat"
    label = "tool_calling_chat"
    verbose_name = _("Tool calling chat")

    def ready(self) -> None:
        """Register the system checks; nothing else (no models, no database access)."""
        from django.core import checks

        from tool_calling.contrib.chat import checks as chat_checks

        checks.register(chat_checks.check_setup, checks.Tags.urls)
