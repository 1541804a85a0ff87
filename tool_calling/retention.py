"""Deleting what ``TOOL_CALLING["RETENTION"]`` no longer keeps, in bounded batches.

Three kinds of rows, each with its own number of days (None keeps them for ever):

- ``RUN_EVENT_DAYS``: the events of runs that ended longer ago than that;
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

from django.db import connections, router, transaction
from django.db import models as db_models
from django.utils import timezone

from tool_calling import models
from tool_calling.calls import lifecycle as calls_lifecycle
from tool_calling.conf import settings as app_settings

__all__ = ["PurgeReport", "purge_expired"]

logger = logging.getLogger("tool_calling.retention")


@dataclass
class PurgeReport:
    """What a purge deleted (or, with ``dry_run``, would delete), per kind of row."""

    run_events: int = 0
    """Events of runs that ended before ``RUN_EVENT_DAYS``."""
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
    queryset: db_models.QuerySet[Any],
    oldest_first: str,
    batch_size: int,
    dry_run: bool,
    dependents: Callable[[list[Any]], object] | None = None,
) -> int:
    """Delete ``queryset``'s rows ``batch_size`` at a time, oldest first; how many there were.

    The ids of a batch are read in the order of an indexed column (``oldest_first``), so each
    read starts at the oldest row left and touches the batch's rows only, however many rows
    were deleted before it (read in no order, each batch could scan past every row kept).
    The rows are then deleted by primary key with one ``DELETE`` (``dependents`` first deletes
    or detaches the rows that point to them): Django's ``QuerySet.delete()`` would read every
    row, and the rows pointing to it, into memory first. No delete signals are sent, as
    ``QuerySet.update()`` sends no save signals.
    """
    queryset = queryset.order_by()
    if dry_run:
        return queryset.count()
    model = queryset.model
    ids = queryset.order_by(oldest_first).values_list("pk", flat=True)
    pk = model._meta.pk
    assert pk is not None
    total = 0
    while True:
        pks = list(ids[:batch_size])
        if not pks:
            return total
        connection = connections[router.db_for_write(model)]
        table = connection.ops.quote_name(model._meta.db_table)
        column = connection.ops.quote_name(pk.column)
        marks = ", ".join(["%s"] * len(pks))
        params = [pk.get_db_prep_value(value, connection) for value in pks]
        with transaction.atomic(using=connection.alias):
            if dependents is not None:
                dependents(pks)
            with connection.cursor() as cursor:
                cursor.execute(f"DELETE FROM {table} WHERE {column} IN ({marks})", params)
        total += len(pks)
        if len(pks) < batch_size:
            return total


def _purge_events(before: datetime.datetime, batch_size: int, dry_run: bool) -> int:
    """Delete the events of the runs that ended before ``before``; how many there were.

    The runs are walked oldest first on the ``finished_at`` index, ``batch_size`` at a time
    (each page starts after the last one: the runs stay, so starting over would walk them all
    again), and their events go ``batch_size`` at a time by the ``run_id`` index.
    """
    if dry_run:
        return models.RunEvent.objects.filter(run__finished_at__lt=before).count()
    ended = models.Run.objects.filter(finished_at__lt=before).order_by("finished_at")
    total = 0
    after: datetime.datetime | None = None
    done_at_after: list[Any] = []  # runs already walked that ended exactly at ``after``
    while True:
        page = ended if after is None else ended.filter(finished_at__gte=after)
        runs = list(
            page.exclude(pk__in=done_at_after).values_list("finished_at", "pk")[:batch_size]
        )
        if not runs:
            return total
        run_ids = [pk for _finished, pk in runs]
        events = models.RunEvent.objects.filter(run__in=run_ids).order_by()
        while True:
            with transaction.atomic():
                pks = list(events.values_list("pk", flat=True)[:batch_size])
                if pks:
                    models.RunEvent.objects.filter(pk__in=pks).delete()  # one DELETE
            total += len(pks)
            if len(pks) < batch_size:
                break
        last = runs[-1][0]
        done_at_after = [pk for finished, pk in runs if finished == last] + (
            done_at_after if last == after else []
        )
        after = last


def _detach_and_delete_events(run_ids: list[Any]) -> None:
    # What the foreign keys' on_delete would do, written as one statement each by the run ids:
    # the runs' events go (CASCADE), their calls' audit rows stay without the run (SET_NULL).
    models.RunEvent.objects.filter(run__in=run_ids).delete()  # one DELETE: nothing points to them
    calls_lifecycle.detach_from_runs(run_ids)


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

    if (before := cutoff("RUN_EVENT_DAYS")) is not None:
        report.run_events = _purge_events(before, batch, dry_run)
    if (before := cutoff("FINISHED_RUN_DAYS")) is not None:
        report.runs = _purge(
            # A run has finished_at once it ended (a retry clears it): no status to read.
            models.Run.objects.filter(finished_at__lt=before),
            "finished_at",
            batch,
            dry_run,
            dependents=_detach_and_delete_events,
        )
    if (before := cutoff("AUDIT_DAYS")) is not None:
        report.audit = _purge(
            models.ToolExecution.objects.filter(
                status__in=list(models.TERMINAL_STATUSES), created_at__lt=before
            ),
            "created_at",
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
