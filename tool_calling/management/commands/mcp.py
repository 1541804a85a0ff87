"""``manage.py mcp sync [ALIAS ...]`` and ``manage.py mcp list``: MCP servers' tools."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tool_calling import models
from tool_calling.mcp import mirror


class Command(BaseCommand):
    """Mirror MCP servers' tools into the Tool table (pinned), or list the servers."""

    help = (
        "`mcp sync [ALIAS ...]` lists each MCP server's tools now and mirrors them into the Tool "
        "table: new tools arrive disabled, a tool whose definition changed since it was approved "
        "is disabled until an operator approves the new one. `mcp list` shows the servers."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """Declare the sync and list subcommands."""
        sub = parser.add_subparsers(dest="action", required=True)
        sync = sub.add_parser("sync", help="Mirror the tools of the servers (all enabled ones).")
        sync.add_argument("aliases", nargs="*", metavar="ALIAS", help="Servers to sync.")
        sub.add_parser("list", help="List the servers with their tool counts.")

    def handle(self, *args: Any, **options: Any) -> None:
        """Dispatch to the subcommand."""
        if options["action"] == "list":
            self._list()
        else:
            self._sync(options["aliases"])

    def _sync(self, aliases: list[str]) -> None:
        servers = models.McpServer.objects.order_by("alias")
        if aliases:
            servers = servers.filter(alias__in=aliases)
            unknown = sorted(set(aliases) - {server.alias for server in servers})
            if unknown:
                known = ", ".join(models.McpServer.objects.values_list("alias", flat=True))
                raise CommandError(
                    f"Unknown MCP server {', '.join(repr(a) for a in unknown)}. "
                    f"Known servers: {known or 'none (add them in the admin)'}."
                )
        else:
            servers = servers.filter(enabled=True)
        failed = []
        for server in servers:
            report = mirror.sync_server(server)
            for line in report.lines():
                self.stdout.write(line)
            if not report.ok:
                failed.append(server.alias)
        if not servers:
            self.stdout.write("No enabled MCP servers. Add one in the admin (MCP servers).")
        if failed:
            raise CommandError(f"Could not sync: {', '.join(failed)} (see above).")

    def _list(self) -> None:
        servers = models.McpServer.objects.order_by("alias")
        if not servers:
            self.stdout.write("No MCP servers. Add one in the admin (MCP servers).")
            return
        self.stdout.write(f"{'ALIAS':<20} {'TRANSPORT':<16} {'STATE':<9} {'TOOLS':>5} CHANGED")
        for server in servers:
            links = models.McpServerTool.objects.filter(server=server)
            state = "enabled" if server.enabled else "disabled"
            self.stdout.write(
                f"{server.alias:<20} {server.transport:<16} {state:<9} {links.count():>5} "
                f"{links.filter(changed=True).count()}"
            )
