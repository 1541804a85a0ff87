"""``manage.py chat "message"``: one turn with the configured model and the registered tools."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tool_calling import (
    ChatClient,
    InMemoryChatMemoryRepository,
    MessageChatMemoryAdvisor,
    MessageWindowChatMemory,
)
from tool_calling.exceptions import ChatModelError, ToolCallingError
from tool_calling.registry import registry


class Command(BaseCommand):
    """Run one turn and print the answer."""

    help = (
        "Run one chat turn with the configured model (TOOL_CALLING['CHAT_MODEL'], OPENAI_*) and "
        "the registered tools, and print the answer."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """Declare the message, --conversation, --tool, --stream and --system."""
        parser.add_argument("message", help="What the user says.")
        parser.add_argument(
            "--conversation", help="Conversation id whose memory the turn continues."
        )
        parser.add_argument(
            "--tool",
            action="append",
            dest="tools",
            metavar="NAME",
            help="Offer only this registered tool (repeatable). Default: every registered tool.",
        )
        parser.add_argument("--stream", action="store_true", help="Print the answer as it streams.")
        parser.add_argument("--system", help="A system message for the turn.")

    def handle(self, *args: Any, **options: Any) -> None:
        """Run the turn with the registry's tools and print the answer."""
        from tool_calling.core.providers.openai import OpenAIChatModel

        names = options["tools"]
        if names:
            unknown = [n for n in names if registry.get(n) is None]
            if unknown:
                raise CommandError(
                    f"Unknown tool(s): {', '.join(unknown)}. "
                    f"Registered tools: {', '.join(registry) or 'none'}."
                )
            tools = [registry.get(n) for n in names]
        else:
            tools = registry.callbacks()

        builder = ChatClient.builder(OpenAIChatModel()).default_tools(tools)
        if options["system"]:
            builder.default_system(options["system"])
        if options["conversation"]:
            memory = MessageWindowChatMemory(InMemoryChatMemoryRepository())
            builder.default_advisors(MessageChatMemoryAdvisor(memory))
        request = builder.build().prompt(options["message"])
        if options["conversation"]:
            request.conversation_id(options["conversation"])
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
