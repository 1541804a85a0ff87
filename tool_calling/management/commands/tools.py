"""``manage.py tools list|call|enable|disable|limit`` for operators, scripts and deploys.

``enable``, ``disable`` and ``limit`` change the same rows the admin's actions change, with the
same code (``tool_calling.tool_state``), and print what changed; with ``--user`` each change is
also written to the tool's admin history as that user's. Unknown names change nothing and exit
with an error, so a deploy script that misspells a tool fails loudly::

    manage.py tools disable refund_order
    manage.py tools limit get_weather 5          # 5 calls per turn
    manage.py tools limit get_weather default    # LIMITS' default again
    manage.py tools limit get_weather none       # excluded from per-tool limits
"""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib.admin.models import CHANGE
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from tool_calling import models, tool_state
from tool_calling._compat import log_actions
from tool_calling.core.chat.messages import AssistantMessage, ToolCall
from tool_calling.core.chat.prompt import Prompt, ToolCallingChatOptions
from tool_calling.core.chat.response import ChatResponse, Generation
from tool_calling.exceptions import ToolCallingError
from tool_calling.governance import governed_turn
from tool_calling.registry import registry


class Command(BaseCommand):
    """List the tools and their governance, or call one through the governed path."""

    help = (
        "List tools (`tools list`), run one through the governed path (`tools call`), or "
        "change them: `tools enable|disable NAME...`, `tools limit NAME... N|default|none`."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """Declare the list and call subcommands."""
        sub = parser.add_subparsers(dest="action", required=True)
        sub.add_parser(
            "list", help="List every tool with its state, who decides its calls, and limits."
        )
        call = sub.add_parser("call", help="Run one tool as the model would, audited.")
        call.add_argument("name", help="The tool's name.")
        call.add_argument("arguments", nargs="?", default="{}", help="Arguments as a JSON object.")
        call.add_argument("--user", help="Username to run as (its groups decide access).")
        for action, text in (("enable", "Offer the tools again"), ("disable", "Stop offering")):
            parser_ = sub.add_parser(action, help=f"{text} (from the next turn).")
            parser_.add_argument("names", nargs="+", metavar="NAME", help="Tool names.")
            parser_.add_argument("--user", help="Record the change in the admin as this user's.")
        limit = sub.add_parser("limit", help="Set the tools' calls per turn.")
        limit.add_argument("names", nargs="+", metavar="NAME", help="Tool names.")
        limit.add_argument(
            "value",
            help="A number of calls per turn, 'default' (LIMITS' default) or 'none' (excluded "
            "from per-tool limits; the calls still count toward the total per turn).",
        )
        limit.add_argument("--user", help="Record the change in the admin as this user's.")

    def handle(self, *args: Any, **options: Any) -> None:
        """Dispatch to the subcommand."""
        action = options["action"]
        if action == "list":
            self._list()
        elif action == "call":
            self._call(options["name"], options["arguments"], options.get("user"))
        else:
            self._change(action, options["names"], options.get("value"), options.get("user"))

    def _change(
        self, action: str, names: list[str], value: str | None, username: str | None
    ) -> None:
        user = self._user(username) if username else None
        tools = {t.name: t.pk for t in models.Tool.objects.filter(name__in=names)}
        unknown = [name for name in names if name not in tools]
        if unknown:
            raise CommandError(
                f"No tool named {', '.join(map(repr, unknown))} in the database (manage.py "
                "tools list shows them; manage.py sync_tools adds the tools of the code)."
            )
        pks = list(tools.values())
        if action in ("enable", "disable"):
            changed = tool_state.set_flag(pks, "enabled", action == "enable")
            what = "Enabled" if action == "enable" else "Disabled"
        elif value == "none":
            changed = tool_state.set_excluded(pks, True)
            what = "Excluded from per-tool limits"
        else:
            limit = None if value == "default" else _positive_int(value)
            # A number also includes an excluded tool again (tool_state.set_limit).
            changed = tool_state.set_limit(pks, limit)
            what = "Limit: the default" if limit is None else f"Limit: {limit} calls per turn"
        if user is not None and changed:
            log_actions(
                user_id=user.pk,
                queryset=changed,
                action_flag=CHANGE,
                change_message=f"{what} (manage.py tools).",
            )
        for name in sorted(names):
            done = any(tool.name == name for tool in changed)
            self.stdout.write(f"{name}: {what.lower() if done else 'unchanged'}")

    def _user(self, username: str) -> Any:
        try:
            return get_user_model()._default_manager.get_by_natural_key(username)
        except get_user_model().DoesNotExist:
            raise CommandError(f"No user named {username!r}.") from None

    def _list(self) -> None:
        rows = {t.name: t for t in models.Tool.objects.select_related("limit_override")}
        names = sorted(set(rows) | set(registry))
        if not names:
            self.stdout.write("No tools. Define @tool functions in an app's tools.py.")
            return
        header = f"{'NAME':<32} {'STATE':<10} {'SOURCE':<16} {'DECIDED BY':<15} LIMIT"
        self.stdout.write(header)
        for name in names:
            row = rows.get(name)
            if row is None:
                state, source, decided_by, limit = "not synced", "", "", ""
            else:
                state = "missing" if row.missing else ("enabled" if row.enabled else "disabled")
                source = row.source
                # Who confirms or approves each call: the admin's "decided by" column.
                decided_by = row.decided_by
                limit = "default"
                override = getattr(row, "limit_override", None)
                if override is not None:
                    if override.excluded:
                        limit = "excluded"
                    elif override.max_calls_per_turn:
                        limit = str(override.max_calls_per_turn)
            self.stdout.write(f"{name:<32} {state:<10} {source:<16} {decided_by:<15} {limit}")

    def _call(self, name: str, arguments: str, username: str | None) -> None:
        user = self._user(username) if username else None
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


def _positive_int(value: str | None) -> int:
    try:
        number = int(value or "")
    except ValueError:
        number = 0
    if number < 1:
        raise CommandError(
            f"The limit must be a number of calls per turn (1 or more), 'default' or 'none', "
            f"not {value!r}."
        )
    return number
