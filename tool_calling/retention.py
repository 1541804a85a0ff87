"""Deleting what ``TOOL_CALLING["RETENTION"]`` no longer keeps, in bounded batches.

Three kinds of rows, each with its own number of days (None keeps them for ever):

- ``RUN_EVENT_DAYS``: the events of runs that ended, older than that;
- ``FINISHED_RUN_DAYS``: runs that ended longer ago than that, with their events (the audit
  rows of their calls stay, without the link to the run);
- ``AUDIT_DAYS``: the audit rows (``ToolExecution``) of calls that ended, created longer ago
  than that. A call still pending, waiting for approval or running is never purged.

Each kind is deleted ``BATCH_SIZE`` rows at a time: the ids of one batch are read through an
index, then deleted by primary key in a transaction of their own. No statement holds a table
for longer than one batch, so turns and workers go on while a purge runs (on SQLite they wait
for one batch at most; on PostgreSQL only the batch's rows are locked). Run by
``manage.py purge_expired [--dry-run]`` and by the Celery task ``tool_calling.purge_expired``
(beat, e.g. hourly).
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import models as db_models
from django.db import transaction
from django.utils import timezone

from tool_calling import models
from tool_calling.conf import settings as app_settings

__all__ = ["PurgeReport", "purge_expired"]

logger = logging.getLogger("tool_calling.retention")


@dataclass
class PurgeReport:
    """What a purge deleted (or, with ``dry_run``, would delete), per kind of row."""

    run_events: int = 0
    """Events of ended runs, older than ``RUN_EVENT_DAYS``."""
    runs: int = 0
    """Runs that ended before ``FINISHED_RUN_DAYS`` (their events go with them, uncounted)."""
    audit: int = 0
    """Audit rows of ended calls, older than ``AUDIT_DAYS``."""
    dry_run: bool = False
    """True when nothing was deleted: the numbers are what a purge would delete now."""
    kept: list[str] = field(default_factory=list)
    """The kinds whose setting is None (kept for ever)."""

    def as_dict(self) -> dict[str, int]:
        """The numbers, for a task's result and for logs."""
        return {"run_events": self.run_events, "runs": self.runs, "audit": self.audit}


def _purge(
    queryset: db_models.QuerySet[db_models.Model],
    batch_size: int,
    dry_run: bool,
    delete: Callable[[list[Any]], object] | None = None,
) -> int:
    """Delete ``queryset``'s rows ``batch_size`` at a time; how many there were."""
    queryset = queryset.order_by()
    if dry_run:
        return queryset.count()
    model = queryset.model
    total = 0
    while True:
        pks = list(queryset.values_list("pk", flat=True)[:batch_size])
        if not pks:
            return total
        with transaction.atomic():
            if delete is not None:
                delete(pks)
            model._default_manager.filter(pk__in=pks).delete()
        total += len(pks)
        if len(pks) < batch_size:
            return total


def _detach_audit(run_ids: list[Any]) -> None:
    # What on_delete=SET_NULL does, written as one UPDATE by the run ids (Django's collector
    # would also read the rows first).
    models.ToolExecution.objects.filter(run__in=run_ids).update(run=None)


def _delete_events(run_ids: list[Any]) -> None:
    models.RunEvent.objects.filter(run__in=run_ids).delete()
    _detach_audit(run_ids)


def purge_expired(*, dry_run: bool = False, now: datetime.datetime | None = None) -> PurgeReport:
    """Delete the rows ``RETENTION`` no longer keeps.

    Args:
        dry_run: Count the rows instead of deleting them.
        now: The time the ages are measured from (default: now).

    Returns:
        How many rows of each kind were (or would be) deleted.
    """
    settings = app_settings.RETENTION
    now = now or timezone.now()
    batch = int(settings["BATCH_SIZE"])
    report = PurgeReport(dry_run=dry_run)

    def cutoff(key: str) -> datetime.datetime | None:
        days = settings[key]
        if days is None:
            report.kept.append(key)
            return None
        return now - datetime.timedelta(days=int(days))

    ended_runs = list(models.RUN_TERMINAL_STATUSES)
    if (before := cutoff("RUN_EVENT_DAYS")) is not None:
        report.run_events = _purge(
            models.RunEvent.objects.filter(created_at__lt=before, run__status__in=ended_runs),
            batch,
            dry_run,
        )
    if (before := cutoff("FINISHED_RUN_DAYS")) is not None:
        report.runs = _purge(
            models.Run.objects.filter(status__in=ended_runs, finished_at__lt=before),
            batch,
            dry_run,
            delete=_delete_events,
        )
    if (before := cutoff("AUDIT_DAYS")) is not None:
        report.audit = _purge(
            models.ToolExecution.objects.filter(
                status__in=list(models.TERMINAL_STATUSES), created_at__lt=before
            ),
            batch,
            dry_run,
        )
    if not dry_run and (report.run_events or report.runs or report.audit):
        logger.info(
            "Purged %d run events, %d runs and %d audit rows past their retention.",
            report.run_events,
            report.runs,
            report.audit,
        )
    return report
