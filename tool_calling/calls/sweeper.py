"""The sweeper of tool calls: re-sends lost calls, settles calls whose worker died, cleans up.

``tool_calling.sweep_tool_executions`` (run every 30-60 s by Celery beat) calls :func:`sweep`
and then sweeps durable runs. Every change is a conditional transition, so two sweepers, or a
sweeper and a worker, never act twice on one call.
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass

from django.db.models import Max, Q
from django.utils import timezone

from tool_calling import models
from tool_calling.calls import lifecycle
from tool_calling.calls.approvals import expire_approvals
from tool_calling.calls.dispatch import Dispatch, dispatch
from tool_calling.conf import hard_time_limit
from tool_calling.conf import settings as app_settings

__all__ = ["SweepReport", "sweep"]

logger = logging.getLogger("tool_calling.calls")

_BATCH = 500
"""Rows the sweeper handles per kind and run; the next run takes the rest."""

S = models.ExecutionStatus


@dataclass
class SweepReport:
    """What one sweep did."""

    redispatched: int = 0
    """Calls sent to the broker again."""
    settled: int = 0
    """Calls ended because their worker died and they may not run again."""
    purged: int = 0
    """Finished calls whose exact working data was dropped."""
    expired: int = 0
    """Calls denied because nobody approved them in time."""

    def as_dict(self) -> dict[str, int]:
        """The counts by name."""
        return {
            "redispatched": self.redispatched,
            "settled": self.settled,
            "purged": self.purged,
            "expired": self.expired,
        }


def _resend(rows: list[Dispatch]) -> int:
    sent = [row.execution_id for row in rows if dispatch(row)]
    if sent:
        lifecycle.mark_dispatched(sent)
    return len(sent)


def sweep() -> SweepReport:
    """Re-dispatch lost calls, settle calls whose worker died, drop delivered working data.

    Sends again the ``pending`` calls that never reached the broker (the publish failed, or the
    process died before it) and those sent ``REDISPATCH_AFTER`` seconds ago that no worker
    started; for ``running`` calls whose lease expired, sends again the idempotent ones with
    attempts left and ends the others (``unknown`` or ``failed``); denies the calls whose
    approval expired.
    """
    execution = app_settings.EXECUTION
    now = timezone.now()
    lease = lifecycle.lease()
    report = SweepReport()
    on_workers = models.ToolExecution.objects.filter(mode=models.ExecutionMode.CELERY)
    fields = ("pk", "tool_name", "queue", "timeout")

    # The lease's length of grace lets a call whose publish just failed be sent by its caller's
    # retry first; REDISPATCH_AFTER covers a message lost with the broker.
    lost = on_workers.filter(status=S.PENDING).filter(
        Q(dispatched_at=None, created_at__lt=now - lease)
        | Q(dispatched_at__lt=now - datetime.timedelta(seconds=int(execution["REDISPATCH_AFTER"])))
    )
    report.redispatched += _resend(
        [Dispatch(*row) for row in lost.order_by("pk").values_list(*fields)[:_BATCH]]
    )

    expired = on_workers.filter(status=S.RUNNING).filter(
        Q(lease_expires_at__lt=now) | Q(lease_expires_at=None)
    )
    again = []
    for row in expired.order_by("pk").values(
        *lifecycle.REF_FIELDS, "idempotent", "dispatched_at", "queue", "timeout"
    )[:_BATCH]:
        settled = lifecycle.settle_lost(lifecycle.CallRef.of(row), idempotent=row["idempotent"])
        if settled is not None:
            report.settled += settled
            continue
        sent = row["dispatched_at"]
        # One message per lease period is enough: the first delivery takes the call over.
        if sent is None or sent < now - lease:
            again.append(Dispatch(row["id"], row["tool_name"], row["queue"], row["timeout"]))
    report.redispatched += _resend(again)

    # The exact results (not redacted) of calls nobody is waiting for any more, counted from
    # the end of the call: an approved call may start long after it was made.
    longest = max(
        int(execution["TIMEOUT"]),
        models.Tool.objects.aggregate(longest=Max("timeout"))["longest"] or 0,
    )
    before = now - datetime.timedelta(
        seconds=hard_time_limit(longest) + int(execution["WAIT_MARGIN"])
    )
    report.purged = lifecycle.purge_payloads(
        on_workers.filter(Q(finished_at__lt=before) | Q(finished_at=None, created_at__lt=before))
    )

    report.expired = expire_approvals(now)
    if report.redispatched or report.settled or report.expired:
        logger.info("Swept tool calls: %s", report.as_dict())
    return report
