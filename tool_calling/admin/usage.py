"""The figures of the admin's dashboards: one tool's usage over 14 days, and the overview.

Each figure comes from a fixed number of queries, whatever the size of the audit, and each
query reads an index range bounded by its window (migration ``0008``):

- a tool's calls, errors and timed calls per day: one query grouped by day over
  ``(tool_name, created_at, is_error, status, duration_ms)``, read from the index alone;
- its p50 and p95 durations per day and over the window: one query that numbers the timed
  calls by duration (``ROW_NUMBER()`` within each day and over the window) and keeps the rows
  at the wanted ranks, since SQLite has no percentile function. The rank is the nearest-rank
  one, ``ceil(p / 100 * n)``, which is what PostgreSQL's ``percentile_disc`` returns too;
- its limit refusals per day: one query over its refused calls of the window;
- its last error, however old: one row of the partial index on ``is_error``;
- the runs of today per status: one query, one index range per status;
- the calls waiting for approval and the oldest one: two queries on ``(status, created_at)``;
- today's decisions on waiting calls by kind and their median wait: one query over the day's
  decided calls (the median of at most ``MEDIAN_SAMPLE`` of them, computed here);
- the tokens per day (``Message.usage`` of the model's messages; the ``model_message`` run
  events carry the same counts, so they are not added): one statement, an aggregate per day not
  in the cache over that day's range of ``(created_at) WHERE role = 'assistant'``. A day's
  figures never change once it is over, so they are cached (Django's default cache) from
  ``SETTLED_AFTER`` past its end on; today is always read live.

Days are those of the current time zone (``TIME_ZONE``), as in the admin's date hierarchy.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db.models import (
    BigIntegerField,
    Case,
    Count,
    F,
    Func,
    IntegerField,
    Q,
    QuerySet,
    Sum,
    Value,
    When,
    Window,
)
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce, RowNumber
from django.utils import timezone

from tool_calling import models
from tool_calling.admin.metrics import ERROR_STATUSES
from tool_calling.core.execution.limits import breach_text

logger = logging.getLogger(__name__)

DAYS = 14
"""How many days the dashboards show, today included."""

PERCENTILES = (50, 95)
"""The duration percentiles of a tool's usage page."""

SETTLED_AFTER = timedelta(minutes=10)
"""How long after a day's end its token figures are cached: rows written in its last moments
are committed by then."""

TOKEN_CACHE_SECONDS = (DAYS + 1) * 24 * 3600
"""How long a day's token figures stay in the cache (the dashboards show them that long)."""

_FAILED = Q(is_error=True) | Q(status__in=ERROR_STATUSES)


def _limit_texts() -> tuple[str, ...]:
    """How the audited result of a call refused by a limit starts (the model's text)."""
    return tuple(
        text.partition("(")[0] + "(" for text in (breach_text("tool", 1), breach_text(None, 1))
    )


LIMIT_REFUSAL_TEXTS = _limit_texts()
"""A limit refusal is a refused call whose audited result starts with one of these: the texts
of ``core.execution.limits.breach_text`` up to the limit's number. (An ``AUDIT_REDACTOR`` that
rewrites those texts hides the refusals from this count.)"""


# -- days ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Day:
    """One day of the current time zone."""

    date: date
    """The day."""
    start: datetime
    """Its first moment."""
    end: datetime
    """The first moment of the next day."""

    @property
    def is_today(self) -> bool:
        """Whether the day is not over yet."""
        return self.end > timezone.now()


def _midnight(day: date) -> datetime:
    moment = datetime.combine(day, time.min)
    if settings.USE_TZ:
        return timezone.make_aware(moment)
    return moment


def last_days(count: int = DAYS, *, now: datetime | None = None) -> list[Day]:
    """The ``count`` days up to today, oldest first."""
    moment = now or timezone.now()
    today = timezone.localdate(moment) if settings.USE_TZ else moment.date()
    days = [today - timedelta(days=back) for back in range(count - 1, -1, -1)]
    return [Day(day, _midnight(day), _midnight(day + timedelta(days=1))) for day in days]


def _in(day: Day) -> Q:
    return Q(created_at__gte=day.start, created_at__lt=day.end)


def _nearest_rank(percentile: int, count: int) -> int:
    """The 1-based rank of ``percentile`` among ``count`` sorted values (nearest-rank)."""
    return max(1, math.ceil(percentile / 100 * count))


# -- one tool --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolDay:
    """One day of a tool's calls."""

    day: Day
    calls: int
    """Calls made that day (their audit rows), in any state."""
    errors: int
    """Calls the model was told failed: errors, refusals, timeouts, denials, unknown outcomes."""
    timed: int
    """Calls with a duration (they ran, or were refused at once)."""
    limit_refusals: int
    """Calls refused because a call limit was reached."""
    durations: dict[int, int | None]
    """The duration in ms at each of ``PERCENTILES``; ``None`` without timed calls."""

    @property
    def error_rate(self) -> float | None:
        """Errors per 100 calls; ``None`` without calls."""
        return self.errors * 100 / self.calls if self.calls else None


@dataclass(frozen=True)
class LastError:
    """The newest call of a tool that the model was told failed."""

    id: int
    created_at: datetime
    status: str
    status_label: str
    error_type: str
    result: str
    """What the model was told (as audited)."""


@dataclass(frozen=True)
class ToolUsage:
    """A tool's calls over the last ``DAYS`` days."""

    tool_name: str
    days: list[ToolDay]
    durations: dict[int, int | None]
    """The duration in ms at each of ``PERCENTILES`` over all the days."""
    last_error: LastError | None
    """However long ago."""

    @property
    def calls(self) -> int:
        """Calls over the days."""
        return sum(day.calls for day in self.days)

    @property
    def errors(self) -> int:
        """Errors over the days."""
        return sum(day.errors for day in self.days)

    @property
    def limit_refusals(self) -> int:
        """Limit refusals over the days."""
        return sum(day.limit_refusals for day in self.days)

    @property
    def error_rate(self) -> float | None:
        """Errors per 100 calls over the days; ``None`` without calls."""
        return self.errors * 100 / self.calls if self.calls else None


def _day_of(days: Sequence[Day]) -> Case:
    """The index in ``days`` of a row's day, for rows inside them (the cheapest grouping).

    A ``CASE`` of the days' ends, compared once per row, instead of one conditional aggregate
    per day and figure: the database then groups the rows by day in one pass.
    """
    return Case(
        *(When(created_at__lt=day.end, then=Value(index)) for index, day in enumerate(days)),
        output_field=IntegerField(),
    )


def tool_usage(tool_name: str, *, days: Sequence[Day] | None = None) -> ToolUsage:
    """The usage of ``tool_name`` over ``days`` (default: ``last_days()``): four queries.

    The calls are matched by name, as the model sent it, so a tool's usage includes calls made
    before its row was created or after it went missing from code.
    """
    days = list(days or last_days())
    window = models.ToolExecution.objects.filter(
        tool_name=tool_name, created_at__gte=days[0].start, created_at__lt=days[-1].end
    ).order_by()
    counts = {
        row["day"]: row
        for row in window.annotate(day=_day_of(days))
        .values("day")
        .annotate(
            calls=Count("created_at"),
            errors=Count("created_at", filter=_FAILED),
            timed=Count("duration_ms"),
        )
        .order_by()
    }
    empty = {"calls": 0, "errors": 0, "timed": 0}
    timed = [counts.get(index, empty)["timed"] for index in range(len(days))]
    durations = _durations(window, days, timed)
    refusals = _limit_refusals(window, days)
    tool_days = [
        ToolDay(
            day=day,
            calls=counts.get(index, empty)["calls"],
            errors=counts.get(index, empty)["errors"],
            timed=timed[index],
            limit_refusals=refusals.get(index, 0),
            durations={p: durations.get((index, p)) for p in PERCENTILES},
        )
        for index, day in enumerate(days)
    ]
    return ToolUsage(
        tool_name=tool_name,
        days=tool_days,
        durations={p: durations.get((None, p)) for p in PERCENTILES},
        last_error=_last_error(tool_name),
    )


def _durations(
    window: QuerySet[models.ToolExecution], days: list[Day], timed: list[int]
) -> dict[tuple[int | None, int], int]:
    """Each day's and the window's durations at ``PERCENTILES``, in one query (none if none).

    The timed calls are numbered in order of duration twice, within their day and over the
    window (``ROW_NUMBER()``: one sort each); the rows at the wanted ranks (from the counts
    already read) are the answer. Keys: ``(day index, p)``, and ``(None, p)`` for the window.
    """
    total = sum(timed)
    if not total:
        return {}
    at_day_ranks = Q()
    for index, count in enumerate(timed):
        if count:
            ranks = sorted({_nearest_rank(p, count) for p in PERCENTILES})
            at_day_ranks |= Q(day=index, rank_in_day__in=ranks)
    overall = sorted({_nearest_rank(p, total) for p in PERCENTILES})
    rows = (
        window.filter(duration_ms__isnull=False)
        .annotate(
            day=_day_of(days),
            rank_in_day=Window(
                RowNumber(), partition_by=[F("day")], order_by=F("duration_ms").asc()
            ),
            rank=Window(RowNumber(), order_by=F("duration_ms").asc()),
        )
        .filter(at_day_ranks | Q(rank__in=overall))
        .values_list("day", "rank_in_day", "rank", "duration_ms")
    )
    found: dict[tuple[int | None, int], int] = {}
    for day, rank_in_day, rank, duration in rows:
        assert duration is not None  # the rows are those with a duration
        for p in PERCENTILES:
            if rank_in_day == _nearest_rank(p, timed[day]):
                found[(day, p)] = duration
            if rank == _nearest_rank(p, total):
                found[(None, p)] = duration
    return found


def _limit_refusals(window: QuerySet[models.ToolExecution], days: list[Day]) -> dict[int, int]:
    """Each day's calls refused by a call limit: one query over the window's refused calls."""
    by_text = Q()
    for text in LIMIT_REFUSAL_TEXTS:
        by_text |= Q(result__startswith=text)
    rows = (
        window.filter(Q(status=models.ExecutionStatus.REFUSED) & by_text)
        .annotate(day=_day_of(days))
        .values("day")
        .annotate(count=Count("created_at"))
        .order_by()
    )
    return {row["day"]: row["count"] for row in rows}


def _last_error(tool_name: str) -> LastError | None:
    """The newest call of the tool with ``is_error`` (set on every ending but success)."""
    row = (
        models.ToolExecution.objects.filter(tool_name=tool_name, is_error=True)
        .order_by("-created_at")
        .only("pk", "created_at", "status", "error_type", "result")
        .first()
    )
    if row is None:
        return None
    return LastError(
        id=row.pk,
        created_at=row.created_at,
        status=row.status,
        status_label=str(row.get_status_display()),
        error_type=row.error_type,
        result=row.result,
    )


# -- the overview ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunCount:
    """How many of today's runs are in one state."""

    status: str
    label: str
    count: int


@dataclass(frozen=True)
class OldestApproval:
    """The call that has waited longest for a person."""

    id: int
    tool_name: str
    created_at: datetime
    requested_by: str
    """Whose turn made the call (empty when unknown)."""


@dataclass(frozen=True)
class Decisions:
    """The decisions people took today on waiting calls, by kind, and how long calls waited."""

    confirmed: int = 0
    """Calls the user whose turn it was confirmed (and that needed nobody else)."""
    approved: int = 0
    """Calls an approver approved."""
    denied: int = 0
    """Calls the user declined or an approver denied."""
    expired: int = 0
    """Calls nobody decided in time."""
    median_wait: float | None = None
    """The median seconds from a call's request to its decision; ``None`` without decisions."""

    @property
    def total(self) -> int:
        """Every decision of the day."""
        return self.confirmed + self.approved + self.denied + self.expired


MEDIAN_SAMPLE = 10_000
"""Most decisions of a day the median wait is computed from (the latest ones)."""


def decisions(day: Day) -> Decisions:
    """Today's decisions by kind and their median wait: one query on the day's decided calls."""
    decided = (
        models.ToolExecution.objects.filter(
            decided_at__gte=day.start,
            decided_at__lt=day.end,
            approval__in=[
                models.ApprovalDecision.APPROVED,
                models.ApprovalDecision.DENIED,
                models.ApprovalDecision.EXPIRED,
            ],
        )
        .order_by("-decided_at")
        .values_list("approval", "deciders", "created_at", "decided_at")[:MEDIAN_SAMPLE]
    )
    counts = {"confirmed": 0, "approved": 0, "denied": 0, "expired": 0}
    waits: list[float] = []
    for approval, deciders, created, decided_at in decided:
        if decided_at is None:  # excluded by the filter; for the type checker
            continue
        if approval == models.ApprovalDecision.APPROVED:
            kind = "confirmed" if deciders == models.Deciders.USER else "approved"
        else:
            kind = str(approval)
        counts[kind] += 1
        waits.append((decided_at - created).total_seconds())
    return Decisions(**counts, median_wait=statistics.median(waits) if waits else None)


@dataclass(frozen=True)
class TokenDay:
    """The tokens the model's answers of one day reported."""

    day: Day
    messages: int
    """The model's messages stored that day (tool calls and answers)."""
    prompt: int
    completion: int

    @property
    def total(self) -> int:
        """Prompt and completion tokens."""
        return self.prompt + self.completion


@dataclass(frozen=True)
class Overview:
    """What the admin's overview shows."""

    today: Day
    runs: list[RunCount]
    """Today's runs per state, in the order of ``RunStatus``."""
    waiting: int
    """Calls waiting for approval now."""
    oldest: OldestApproval | None
    tokens: list[TokenDay]
    decisions: Decisions = Decisions()
    """Today's decisions on waiting calls, by kind, and their median wait."""

    @property
    def runs_today(self) -> int:
        """Runs started today."""
        return sum(run.count for run in self.runs)


def overview(*, days: Sequence[Day] | None = None) -> Overview:
    """The overview's figures: five queries (four when the cache has every past day)."""
    days = list(days or last_days())
    today = days[-1]
    statuses = list(models.RunStatus)
    counts = models.Run.objects.filter(
        status__in=statuses, created_at__gte=today.start, created_at__lt=today.end
    ).aggregate(
        **{str(status): Count("created_at", filter=Q(status=status)) for status in statuses}
    )
    waiting_calls = models.ToolExecution.objects.filter(
        status=models.ExecutionStatus.AWAITING_APPROVAL
    ).order_by()
    oldest = waiting_calls.select_related("user").order_by("created_at", "pk").first()
    waiting = waiting_calls.count() if oldest is not None else 0
    return Overview(
        today=today,
        runs=[RunCount(str(s), str(s.label), counts[str(s)]) for s in statuses],
        waiting=waiting,
        oldest=(
            OldestApproval(
                id=oldest.pk,
                tool_name=oldest.tool_name,
                created_at=oldest.created_at,
                requested_by=str(oldest.user) if oldest.user is not None else "",
            )
            if oldest is not None
            else None
        ),
        tokens=token_usage(days),
        decisions=decisions(today),
    )


class JSONNumber(Func):
    """The number under ``key`` of a JSON column: ``NULL`` when missing, never an error.

    PostgreSQL refuses to cast a string to a number, so a value that is not a JSON number
    counts as ``NULL`` there; SQLite casts it (a numeric string to its number, others to 0).
    """

    output_field = BigIntegerField()

    def __init__(self, column: str, key: str) -> None:
        if not key.isidentifier():
            raise ValueError(f"JSONNumber key must be an identifier, got {key!r}")
        self.key = key
        super().__init__(column)

    def as_sql(  # noqa: D102
        self,
        compiler: Any,
        connection: Any,
        function: str | None = None,
        template: str | None = None,
        arg_joiner: str | None = None,
        **extra_context: Any,
    ) -> Any:
        # Other databases: the key's text cast to an integer (an error for non-numbers).
        [column] = self.get_source_expressions()
        return compiler.compile(Cast(KeyTextTransform(self.key, column), BigIntegerField()))

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:  # noqa: D102
        column_sql, params = compiler.compile(self.get_source_expressions()[0])
        return f"CAST(json_extract({column_sql}, %s) AS INTEGER)", (*params, f"$.{self.key}")

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:  # noqa: D102
        column_sql, params = compiler.compile(self.get_source_expressions()[0])
        sql = (
            f"CASE WHEN jsonb_typeof({column_sql} -> %s) = 'number' "
            f"THEN ({column_sql} ->> %s)::numeric::bigint END"
        )
        return sql, (*params, self.key, *params, self.key)


def _token_key(day: Day) -> str:
    zone = timezone.get_current_timezone_name() if settings.USE_TZ else "naive"
    return f"tool_calling:admin:tokens:v1:{zone}:{day.date.isoformat()}"


def token_usage(days: Sequence[Day], *, now: datetime | None = None) -> list[TokenDay]:
    """The tokens of the model's messages per day: one query for the days not cached.

    A day is cached once it has been over for ``SETTLED_AFTER`` (at ``now``, default the
    current time); an unreachable cache only means that every day is read from the database.
    """
    now = now or timezone.now()
    keys = {day: _token_key(day) for day in days}
    try:
        cached: dict[str, Any] = cache.get_many(list(keys.values()))
    except Exception:  # the cache is down: read every day, say so once per page
        logger.warning("The admin's token figures could not be read from the cache", exc_info=True)
        cached = {}
    figures: dict[Day, tuple[int, int, int]] = {}
    missing: list[Day] = []
    for day in days:
        value = cached.get(keys[day])
        if isinstance(value, (list, tuple)) and len(value) == 3:
            figures[day] = (int(value[0]), int(value[1]), int(value[2]))
        else:
            missing.append(day)
    if missing:
        # One aggregate per missing day over its index range, in one statement (UNION ALL):
        # grouping the rows of many days by a CASE made PostgreSQL sort them all on disk.
        parts = [
            models.Message.objects.filter(
                role=models.MessageRole.ASSISTANT,
                created_at__gte=day.start,
                created_at__lt=day.end,
            )
            .order_by()
            .annotate(day=Value(index, IntegerField()))
            .values("day")
            .annotate(
                messages=Count("created_at"),
                prompt=Coalesce(Sum(JSONNumber("usage", "prompt_tokens")), 0),
                completion=Coalesce(Sum(JSONNumber("usage", "completion_tokens")), 0),
            )
            for index, day in enumerate(missing)
        ]
        rows = parts[0].union(*parts[1:], all=True) if len(parts) > 1 else parts[0]
        counts = {row["day"]: row for row in rows}
        settled: dict[str, tuple[int, int, int]] = {}
        for day in missing:
            row = counts.get(missing.index(day), {"messages": 0, "prompt": 0, "completion": 0})
            value = (row["messages"], row["prompt"], row["completion"])
            figures[day] = value
            if day.end + SETTLED_AFTER <= now:
                settled[keys[day]] = value
        if settled:
            try:
                cache.set_many(settled, TOKEN_CACHE_SECONDS)
            except Exception:
                logger.warning("The admin's token figures could not be cached", exc_info=True)
    return [
        TokenDay(day, messages=figures[day][0], prompt=figures[day][1], completion=figures[day][2])
        for day in days
    ]
