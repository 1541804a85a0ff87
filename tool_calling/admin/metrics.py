"""What the tool list shows of each tool's recent calls: counts and error rate."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db.models import Count, FloatField, IntegerField, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Cast, Coalesce
from django.utils import timezone

from tool_calling import models

# Executions in these states count as errors in the tool list, as does ``is_error``.
ERROR_STATUSES = (
    models.ExecutionStatus.FAILED,
    models.ExecutionStatus.REFUSED,
    models.ExecutionStatus.TIMED_OUT,
    models.ExecutionStatus.OUTCOME_UNKNOWN,
)

# The window of the tool list's "calls" and "error rate" columns.
RECENT_WINDOW = timedelta(hours=24)


def with_recent_usage(tools: QuerySet[models.Tool]) -> QuerySet[models.Tool]:
    """``tools`` annotated with ``calls_24h``, ``errors_24h`` and ``error_rate_24h``.

    The counts are correlated subqueries of the page's own query (no query per row). They
    match executions by ``tool_name`` so that the ``(tool_name, -created_at)`` index bounds
    each count to the window, instead of joining and grouping the whole audit table; the
    list's count queries and filters stay free of them.
    """
    since = timezone.now() - RECENT_WINDOW
    failed = Q(is_error=True) | Q(status__in=ERROR_STATUSES)
    recent = (
        models.ToolExecution.objects.filter(tool_name=OuterRef("name"), created_at__gte=since)
        .order_by()
        .values("tool_name")
    )

    def per_tool(expression: Any, output_field: Any) -> Subquery:
        return Subquery(recent.annotate(value=expression).values("value"), output_field)

    return tools.annotate(
        calls_24h=Coalesce(per_tool(Count("pk"), IntegerField()), 0),
        errors_24h=Coalesce(per_tool(Count("pk", filter=failed), IntegerField()), 0),
        # NULL when there were no calls: no rate rather than a misleading 0%.
        error_rate_24h=per_tool(
            Cast(Count("pk", filter=failed) * 100.0 / Count("pk"), FloatField()),
            FloatField(),
        ),
    )
