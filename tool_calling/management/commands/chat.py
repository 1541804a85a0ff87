"""``manage.py chat "message"``: one governed, stored turn with the configured model.

The message is the argument, or stdin with ``-`` (``echo "Hi" | manage.py chat -``); without
an argument stdin is read when it is not a terminal. A blank message, and one longer than
``API["MAX_MESSAGE_CHARS"]``, are refused as the HTTP API refuses them.
"""

from __future__ import annotations

import sys
import uuid
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from tool_calling import models
from tool_calling.conf import settings as app_settings
from tool_calling.exceptions import ChatModelError, ToolCallingError
from tool_calling.governance import governed_chat_client
from tool_calling.registry import registry
from tool_calling.resolvers import is_available_to


class Command(BaseCommand):
    """Run one turn, store it in a conversation, and print the answer."""

    help = (
        "Run one chat turn with the configured model (TOOL_CALLING['CHAT_MODEL'], OPENAI_*) and "
        "the enabled tools, store it as a conversation, and print the answer."
    )
    stealth_options = ("stdin",)
    """``call_command("chat", "-", stdin=...)`` reads the message from that file."""

    def add_arguments(self, parser: CommandParser) -> None:
        """Declare the message, --conversation, --tool, --stream, --system and --user."""
        parser.add_argument(
            "message",
            nargs="?",
            help="What the user says; '-' (or nothing, from a pipe) reads it from stdin.",
        )
        parser.add_argument(
            "--conversation", help="Id of a stored conversation to continue (default: a new one)."
        )
        parser.add_argument(
            "--tool",
            action="append",
            dest="tools",
            metavar="NAME",
            help="Offer only this tool (repeatable). Default: every enabled tool.",
        )
        parser.add_argument("--stream", action="store_true", help="Print the answer as it streams.")
        parser.add_argument("--system", help="A system message for the turn.")
        parser.add_argument(
            "--user", help="Username to run the turn as (its groups decide the tools it may use)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        """Run the turn and print the answer; the conversation id goes to stderr."""
        options["message"] = self._message(options["message"], options.get("stdin") or sys.stdin)
        user = None
        if options["user"]:
            try:
                user = get_user_model()._default_manager.get_by_natural_key(options["user"])
            except get_user_model().DoesNotExist:
                raise CommandError(f"No user named {options['user']!r}.") from None
        names = options["tools"]
        if names:
            # Registered tools, and the tools mirrored from MCP servers.
            remote = set(
                models.McpServerTool.objects.filter(tool__name__in=names).values_list(
                    "tool__name", flat=True
                )
            )
            unknown = [n for n in names if n not in registry and n not in remote]
            if unknown:
                raise CommandError(
                    f"Unknown tool(s): {', '.join(unknown)}. "
                    f"Registered tools: {', '.join(registry) or 'none'}."
                )
            # Governance would drop these silently and the turn would run without them.
            unavailable = [n for n in names if not is_available_to(n, user)]
            if unavailable:
                who = f" to user {options['user']!r}" if user is not None else ""
                raise CommandError(
                    f"Tool(s) not available{who}: {', '.join(unavailable)}. An operator "
                    "disabled them, they are missing from the code, or they are restricted to "
                    "other groups."
                )
        conversation = self._conversation(options["conversation"], user, options["message"])
        client = governed_chat_client(
            user=user, conversation=conversation, tool_names=names, system=options["system"]
        )
        request = client.prompt(options["message"]).conversation_id(str(conversation.pk))
        self.stderr.write(f"Conversation: {conversation.pk}")
        try:
            if options["stream"]:
                for piece in request.stream().content():
                    self.stdout.write(piece, ending="")
                    self.stdout.flush()
                self.stdout.write("")
            else:
                self.stdout.write(request.call().content() or "")
        except (ChatModelError, ToolCallingError) as exc:
            raise CommandError(str(exc)) from exc

    def _message(self, message: str | None, stdin: Any) -> str:
        """The argument, or stdin's text; refused when blank or too long, as in the API."""
        if message is None and stdin.isatty():
            raise CommandError(
                'Give the message as an argument (manage.py chat "What\'s the weather?"), or '
                "pipe it in with '-' (echo \"What's the weather?\" | manage.py chat -)."
            )
        if message is None or message == "-":
            message = stdin.read().removesuffix("\n")
        assert message is not None
        if not message.strip():
            raise CommandError(
                "The message is empty: give the text to send as an argument, or on stdin with '-'."
            )
        limit = int(app_settings.API["MAX_MESSAGE_CHARS"])
        if len(message) > limit:
            raise CommandError(
                f"The message is {len(message)} characters long; at most {limit} are accepted "
                "(TOOL_CALLING['API']['MAX_MESSAGE_CHARS'])."
            )
        return message

    def _conversation(self, conversation_id: str | None, user: Any, message: str) -> Any:
        if conversation_id is None:
            return models.Conversation.objects.create(owner=user, title=message[:200])
        try:
            conversation = models.Conversation.objects.get(pk=uuid.UUID(conversation_id))
        except (ValueError, models.Conversation.DoesNotExist):
            raise CommandError(f"No conversation with id {conversation_id!r}.") from None
        owner_id = conversation.owner_id
        if (
            user is not None
            and owner_id is not None
            and owner_id != user.pk
            and not user.is_superuser
        ):
            raise CommandError(
                f"Conversation {conversation_id} belongs to another user; "
                f"{user.get_username()!r} cannot continue it."
            )
        return conversation
