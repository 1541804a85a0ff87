"""``manage.py sync_tools [--dry-run]``: mirror the code's tools into the Tool table."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from tool_calling.sync import sync_tools


class Command(BaseCommand):
    """Mirror the tool registry into the database, keeping operator settings."""

    help = (
        "Mirror the registered tools into the Tool table: new tools, changed schemas, and tools "
        "that vanished from code (marked missing). Operator settings are kept."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """Declare --dry-run."""
        parser.add_argument(
            "--dry-run", action="store_true", help="Show what would change; change nothing."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        """Sync and print a summary."""
        dry_run = options["dry_run"]
        report = sync_tools(dry_run=dry_run)
        verb = "Would" if dry_run else ""
        for label, names in (
            ("create", report.created),
            ("update", report.changed),
            ("mark missing", report.missing),
            ("restore", report.restored),
        ):
            for name in names:
                action = f"{verb} {label}".strip().capitalize()
                self.stdout.write(f"{action}: {name}")
        summary = (
            f"{len(report.created)} new, {len(report.changed)} changed, "
            f"{len(report.missing)} missing, {len(report.restored)} restored, "
            f"{len(report.unchanged)} unchanged"
        )
        self.stdout.write(("Dry run: " if dry_run else "") + summary + ".")
