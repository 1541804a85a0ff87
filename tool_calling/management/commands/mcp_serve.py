"""``manage.py mcp_serve --user NAME``: the governed tools of one user over MCP on stdio."""

from __future__ import annotations

import logging
import sys
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from tool_calling.mcp.serving import serve_stdio


class Command(BaseCommand):
    """Serve the tools USER may use over MCP on stdin/stdout (for desktop clients and IDEs)."""

    help = (
        "Serve the governed tools of one user over MCP on stdin and stdout, until the client "
        "disconnects: what the user lists and calls follows the admin's governance, and every "
        "call is audited. Logs go to stderr (stdout carries the protocol)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """Declare --user."""
        parser.add_argument("--user", required=True, help="Username whose tools are served.")

    def handle(self, *args: Any, **options: Any) -> None:
        """Look the user up, then serve until the client closes stdin."""
        username = options["user"]
        model = get_user_model()
        user = model._default_manager.filter(**{model.USERNAME_FIELD: username}).first()
        if user is None or not user.is_active:
            raise CommandError(f"No active user {username!r}: give the username of an active user.")
        # stdout is the protocol's channel: nothing else may write to it.
        for handler in logging.getLogger().handlers:
            if getattr(handler, "stream", None) is sys.stdout:
                handler.setStream(sys.stderr)  # type: ignore[attr-defined]
        serve_stdio(user)
