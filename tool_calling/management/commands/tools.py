"""``manage.py tools list`` and ``manage.py tools call NAME '{json}'`` for operators."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from tool_calling import models
from tool_calling.core.chat.messages import AssistantMessage, ToolCall
from tool_calling.core.chat.prompt import Prompt, ToolCallingChatOptions
from tool_calling.core.chat.response import ChatResponse, Generation
from tool_calling.exceptions import ToolCallingError
from tool_calling.governance import governed_turn
from tool_calling.registry import registry


class Command(BaseCommand):
    """List the tools and their governance, or call one through the governed path."""

    help = "List tools (`tools list`) or run one through the governed path (`tools call`)."

    def add_arguments(self, parser: CommandParser) -> None:
        """Declare the list and call subcommands."""
        sub = parser.add_subparsers(dest="action", required=True)
        sub.add_parser("list", help="List every tool with its state and limits.")
        call = sub.add_parser("call", help="Run one tool as the model would, audited.")
        call.add_argument("name", help="The tool's name.")
        call.add_argument("arguments", nargs="?", default="{}", help="Arguments as a JSON object.")
        call.add_argument("--user", help="Username to run as (its groups decide access).")

    def handle(self, *args: Any, **options: Any) -> None:
        """Dispatch to the subcommand."""
        if options["action"] == "list":
            self._list()
        else:
            self._call(options["name"], options["arguments"], options.get("user"))

    def _list(self) -> None:
        rows = {t.name: t for t in models.Tool.objects.select_related("limit_override")}
        names = sorted(set(rows) | set(registry))
        if not names:
            self.stdout.write("No tools. Define @tool functions in an app's tools.py.")
            return
        header = f"{'NAME':<32} {'STATE':<10} {'SOURCE':<16} {'APPROVAL':<9} LIMIT"
        self.stdout.write(header)
        for name in names:
            row = rows.get(name)
            if row is None:
                state, source, approval, limit = "not synced", "", "", ""
            else:
                state = "missing" if row.missing else ("enabled" if row.enabled else "disabled")
                source = row.source
                approval = "yes" if row.requires_approval else "no"
                limit = "default"
                override = getattr(row, "limit_override", None)
                if override is not None:
                    if override.excluded:
                        limit = "excluded"
                    elif override.max_calls_per_turn:
                        limit = str(override.max_calls_per_turn)
            self.stdout.write(f"{name:<32} {state:<10} {source:<16} {approval:<9} {limit}")

    def _call(self, name: str, arguments: str, username: str | None) -> None:
        user = None
        if username:
            try:
                user = get_user_model()._default_manager.get_by_natural_key(username)
            except get_user_model().DoesNotExist:
                raise CommandError(f"No user named {username!r}.") from None
        # The same tools, manager and server-side context a governed chat turn has.
        turn = governed_turn(user=user)
        manager = turn.manager
        options = ToolCallingChatOptions(
            tool_callbacks=turn.callbacks, tool_context=turn.tool_context
        )
        call = ToolCall(f"cli_{uuid.uuid4().hex[:12]}", name, arguments)
        response = ChatResponse([Generation(AssistantMessage(None, [call]))])
        try:
            result = manager.execute_tool_calls(Prompt("manage.py tools call", options), response)
        except ToolCallingError as exc:
            raise CommandError(str(exc)) from exc
        tool_response = result.conversation_history[-1].responses[0]  # type: ignore[attr-defined]
        if tool_response.is_error:
            raise CommandError(tool_response.response_data)
        self.stdout.write(tool_response.response_data)
