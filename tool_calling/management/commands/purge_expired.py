"""``manage.py purge_expired [--dry-run]``: delete what ``RETENTION`` no longer keeps."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from tool_calling.retention import purge_expired


class Command(BaseCommand):
    """Delete expired run events, finished runs and audit rows, in bounded batches."""

    help = (
        "Delete the run events, finished runs and audit rows older than TOOL_CALLING['RETENTION'] "
        "keeps them, BATCH_SIZE rows per transaction (turns and workers go on meanwhile)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """Declare --dry-run."""
        parser.add_argument(
            "--dry-run", action="store_true", help="Count what would be deleted; delete nothing."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        """Purge (or count) and print one line per kind of row."""
        report = purge_expired(dry_run=options["dry_run"])
        verb = "Would delete" if report.dry_run else "Deleted"
        kept = set(report.kept)
        for key, label, count in (
            ("RUN_EVENT_DAYS", "run events", report.run_events),
            ("FINISHED_RUN_DAYS", "finished runs", report.runs),
            ("AUDIT_DAYS", "audit rows", report.audit),
        ):
            if key in kept:
                self.stdout.write(f"Kept: {label} (RETENTION['{key}'] is None)")
            else:
                self.stdout.write(f"{verb} {count} {label}")
