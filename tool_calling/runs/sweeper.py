"""The sweeper of durable runs: queues the steps that were lost (publish failed, broker lost)."""

from __future__ import annotations

import logging

from django.db.models import Q
from django.utils import timezone

from tool_calling import models
from tool_calling.runs import lifecycle

__all__ = ["sweep_runs"]

logger = logging.getLogger("tool_calling.runs")

_BATCH = 500


def sweep_runs() -> int:
    """Queue a step for each active run no step holds or will be queued for.

    Returns:
        How many steps were queued.
    """
    now = timezone.now()
    grace = now - lifecycle.lease()
    count = 0
    idle = models.Run.objects.filter(status__in=models.RUN_ACTIVE_STATUSES).filter(
        Q(step_lease_expires_at=None) | Q(step_lease_expires_at__lt=now)
    )
    for run_id, waiting_for, created in idle.values_list("pk", "waiting_for_id", "created_at")[
        :_BATCH
    ]:
        if waiting_for is None:
            if created < grace:
                count += lifecycle.publish(run_id)
            continue
        running = (
            models.ToolExecution.objects.filter(run_id=run_id, assistant_message_id=waiting_for)
            .exclude(status__in=models.TERMINAL_STATUSES)
            .exists()
        )
        if not running and lifecycle.wake(run_id, waiting_for):
            count += 1
    if count:
        logger.info("Swept durable runs: queued %s steps", count)
    return count
