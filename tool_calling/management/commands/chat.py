"""``manage.py chat "message"``: one governed, stored turn with the configured model."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from tool_calling import models
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

    def add_arguments(self, parser: CommandParser) -> None:
        """Declare the message, --conversation, --tool, --stream, --system and --user."""
        parser.add_argument("message", help="What the user says.")
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
        user = None
        if options["user"]:
            try:
                user = get_user_model()._default_manager.get_by_natural_key(options["user"])
            except get_user_model().DoesNotExist:
                raise CommandError(f"No user named {options['user']!r}.") from None
        names = options["tools"]
        if names:
            unknown = [n for n in names if n not in registry]
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
