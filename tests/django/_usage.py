"""Audit rows, runs and messages placed on chosen days, for the dashboards' tests.

Rows are written with the ORM and then moved to their moment (``created_at`` is set on insert),
so the tests say exactly what the database holds and compute the expected figures from it
themselves.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from tool_calling import models
from tool_calling.core.execution.limits import breach_text

LIMIT_TEXT = breach_text("get_weather", 2)
"""What the model is told when ``get_weather`` reaches its limit of 2 calls per turn."""


def moment(days_ago: int, hour: int = 12, minute: int = 0) -> datetime:
    """``hour:minute`` of the local day ``days_ago`` days before today."""
    today = timezone.localdate()
    day = today - timedelta(days=days_ago)
    return timezone.make_aware(datetime(day.year, day.month, day.day, hour, minute))


@dataclass
class Call:
    """One audit row to write: when, how it ended, how long it took."""

    days_ago: int
    status: str = models.ExecutionStatus.SUCCEEDED
    duration_ms: int | None = 100
    is_error: bool | None = None
    result: str = "ok"
    error_type: str = ""
    hour: int = 12
    extra: dict[str, Any] = field(default_factory=dict)


def write_calls(tool_name: str, calls: Iterable[Call]) -> list[models.ToolExecution]:
    """Write ``calls`` of ``tool_name`` (its ``Tool`` row linked when there is one)."""
    tool = models.Tool.objects.filter(name=tool_name).first()
    rows = []
    for call in calls:
        is_error = (
            call.status != models.ExecutionStatus.SUCCEEDED
            if call.is_error is None
            else call.is_error
        )
        row = models.ToolExecution.objects.create(
            tool=tool,
            tool_name=tool_name,
            status=call.status,
            is_error=is_error,
            duration_ms=call.duration_ms,
            result=call.result,
            error_type=call.error_type,
            **call.extra,
        )
        created = moment(call.days_ago, call.hour)
        models.ToolExecution.objects.filter(pk=row.pk).update(created_at=created)
        row.created_at = created
        rows.append(row)
    return rows


def limit_refusal(days_ago: int) -> Call:
    """A call refused because ``get_weather`` reached its limit, as governance audits it."""
    return Call(
        days_ago,
        status=models.ExecutionStatus.REFUSED,
        duration_ms=0,
        result=LIMIT_TEXT,
    )


def write_runs(conversation: models.Conversation, statuses: dict[str, int], days_ago: int) -> None:
    """``statuses[s]`` runs in state ``s`` created ``days_ago`` days ago."""
    for status, count in statuses.items():
        for _ in range(count):
            run = models.Run.objects.create(conversation=conversation, status=status, text="hi")
            models.Run.objects.filter(pk=run.pk).update(created_at=moment(days_ago, 9))


def write_answers(
    conversation: models.Conversation, usage_by_day: dict[int, list[dict[str, Any]]]
) -> None:
    """Assistant messages with the given ``usage``, ``usage_by_day[days_ago]`` per day."""
    sequence = models.Message.objects.filter(conversation=conversation).count()
    for days_ago, usages in usage_by_day.items():
        for usage in usages:
            sequence += 1
            message = models.Message.objects.create(
                conversation=conversation,
                sequence=sequence,
                role=models.MessageRole.ASSISTANT,
                text="answer",
                usage=usage,
            )
            models.Message.objects.filter(pk=message.pk).update(created_at=moment(days_ago, 10))
