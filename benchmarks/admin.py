"""Benchmark: every admin page and both dashboards with a million audit rows.

A benchmark, not a test: it prints a Markdown table and PASS/FAIL lines for the target, and exits
0 unless it crashes (``--strict`` also exits 1 when a target is missed).

The database is filled with raw bulk inserts (SQLite ``executemany``, PostgreSQL ``COPY``) in
the shape of a busy deployment, from one seeded random generator so that every run and both
databases hold the same rows:

- 500 tools, called with a Zipf-like popularity (the busiest tool makes about 15% of the calls);
- ``--rows`` audit rows (1,000,000 by default) spread over 90 days up to now, in time order:
  92% succeeded, 3.5% failed, 1.5% refused (60% of those by a call limit, with the limit's
  text), timeouts, unknown outcomes and denials, a few hundred calls waiting for approval in
  the last two days and a few running; durations log-normal around 120 ms;
- ``--rows / 10`` conversations with 6 to 24 messages each (1.5 messages per audit row), the
  model's messages carrying token usage; ``--rows / 4`` runs.

PostgreSQL is then ``VACUUM ANALYZE``d (what autovacuum does after a bulk load); SQLite is left
without ``ANALYZE`` (Django never runs it), so its planner sees what a fresh deployment shows.

Each page is requested through Django's test client, logged in as a superuser (middleware,
views, templates: the server's whole work, no network), once to warm up and then ``--repeats``
times; the median and the fastest are reported, with the number of queries of one request. The
overview is timed twice: with every past day of its token figures cached (what every view but
the first of a day sees) and with an empty cache (the first view of the day). The dashboards'
figures are checked against the generated rows.

Databases: SQLite (a file in WAL mode, as project/settings.py configures it) always; PostgreSQL
with ``--postgres URL`` (a database ``tc_bench_admin_<pid>`` is created on that server and
dropped afterwards) or ``--postgres auto`` (the throwaway server of scripts/setup_postgres.sh,
on ``TC_PG_PORT``). Each database runs in its own child process.

    python benchmarks/admin.py [--postgres URL|auto] [--rows 1000000] [--repeats 5]
                               [--explain] [--json PATH] [--strict]

Target: every page answers within 300 ms on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# Import from the checkout, never from benchmarks/ (whose modules may shadow packages).
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import _database  # noqa: E402

ROWS = 1_000_000
TOOLS = 500
SPAN_DAYS = 90
REPEATS = 5
BASELINE_ROWS = 10_000
TARGET_MS = 300.0
SEED = 16
LABELS = {"sqlite": "SQLite (WAL)", "postgresql": "PostgreSQL"}


# =============================================================================================
# Child: one database
# =============================================================================================


def _setup_django(database_url: str) -> None:
    import logging

    from django.test.utils import override_settings

    _database.setup_django(database_url, "admin")
    logging.getLogger("django.request").setLevel(logging.ERROR)
    # A process-local cache (the project's is Redis): the overview caches past days' tokens.
    override_settings(
        CACHES={"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    ).enable()


# -- seeding ---------------------------------------------------------------------------------------


class _Writer:
    """Raw bulk inserts of model rows, with values in each database's own format."""

    def __init__(self) -> None:
        from django.db import connection

        connection.ensure_connection()
        self.connection = connection
        self.vendor = connection.vendor

    def _converters(self, fields: list[Any]) -> list[Callable[[Any], Any]]:
        from django.db import models as db_models

        sqlite = self.vendor == "sqlite"

        def identity(value: Any) -> Any:
            return value

        def dt(value: Any) -> Any:
            if value is None or not sqlite:
                return value
            return str(value.astimezone(UTC).replace(tzinfo=None))

        def boolean(value: Any) -> Any:
            return int(value) if sqlite and value is not None else value

        def as_json(value: Any) -> Any:
            return None if value is None else json.dumps(value)

        def as_uuid(value: Any) -> Any:
            if value is None:
                return None
            return value.hex if sqlite else value

        converters: list[Callable[[Any], Any]] = []
        for field in fields:
            target = field.target_field if field.is_relation else field
            if isinstance(target, db_models.DateTimeField):
                converters.append(dt)
            elif isinstance(target, db_models.BooleanField):
                converters.append(boolean)
            elif isinstance(target, db_models.JSONField):
                converters.append(as_json)
            elif isinstance(target, db_models.UUIDField):
                converters.append(as_uuid)
            else:
                converters.append(identity)
        return converters

    def insert(self, model: Any, rows: Iterator[dict[str, Any]]) -> int:
        """Insert ``rows`` (column values by field name; missing ones get defaults)."""
        from django.db import models as db_models

        fields = [
            f
            for f in model._meta.concrete_fields
            if not (f.primary_key and isinstance(f, db_models.AutoField))
        ]
        defaults: dict[str, Any] = {}
        for field in fields:
            if field.has_default():
                defaults[field.attname] = field.get_default()
            elif field.null:
                defaults[field.attname] = None
            elif isinstance(field, db_models.DateTimeField):
                defaults[field.attname] = None  # set by the caller
            else:
                defaults[field.attname] = field.get_default()
        converters = self._converters(fields)
        names = [f.attname for f in fields]
        columns = ", ".join(f'"{f.column}"' for f in fields)
        table = model._meta.db_table

        # Defaults converted once; a row converts only the values it gives.
        template = [
            convert(defaults[name]) for convert, name in zip(converters, names, strict=True)
        ]
        position = {name: index for index, name in enumerate(names)}
        convert_of = dict(zip(names, converters, strict=True))

        def values() -> Iterator[tuple[Any, ...]]:
            for row in rows:
                value = list(template)
                for name, given in row.items():
                    value[position[name]] = convert_of[name](given)
                yield tuple(value)

        count = 0
        raw = self.connection.connection
        if self.vendor == "sqlite":
            marks = ", ".join("?" for _ in fields)
            sql = f'INSERT INTO "{table}" ({columns}) VALUES ({marks})'
            batch: list[tuple[Any, ...]] = []

            def flush() -> None:
                # One transaction per batch: Django's connection autocommits each statement.
                raw.execute("BEGIN")
                raw.executemany(sql, batch)
                raw.execute("COMMIT")
                batch.clear()

            for value in values():
                batch.append(value)
                count += 1
                if len(batch) == 20_000:
                    flush()
            if batch:
                flush()
        else:
            with raw.cursor() as cursor:
                with cursor.copy(f'COPY "{table}" ({columns}) FROM STDIN') as copy:
                    for value in values():
                        copy.write_row(value)
                        count += 1
            raw.commit()
        return count


def _progress(what: str, since: float) -> None:
    print(f"  seeded {what} ({time.perf_counter() - since:.0f} s)", file=sys.stderr, flush=True)


def _zipf_weights(count: int) -> list[float]:
    weights = [1 / (rank + 1) for rank in range(count)]
    total = sum(weights)
    return [w / total for w in weights]


class _Expected:
    """What the dashboards must show, counted from the generated rows as they are written."""

    def __init__(self, days: list[Any], tools: list[str]) -> None:
        self.start = days[0].start
        self.day_of = {day.date: index for index, day in enumerate(days)}
        self.watched = set(tools)
        self.calls: dict[str, Counter[int]] = defaultdict(Counter)
        self.errors: dict[str, Counter[int]] = defaultdict(Counter)
        self.refusals: dict[str, Counter[int]] = defaultdict(Counter)
        self.durations: dict[str, list[int]] = defaultdict(list)
        self.prompt: Counter[int] = Counter()
        self.completion: Counter[int] = Counter()
        self.waiting = 0

    def day(self, moment: datetime) -> int | None:
        from django.utils import timezone

        if moment < self.start:
            return None
        return self.day_of.get(timezone.localdate(moment))


class _Seeder:
    """Writes the rows of the deployment, in batches whose union has the same shape."""

    def __init__(self, total_rows: int, expected: _Expected) -> None:
        from django.contrib.auth.models import User

        from tool_calling import models
        from tool_calling.core.execution.limits import breach_text

        self.started = time.perf_counter()
        self.rng = random.Random(SEED)
        self.now = datetime.now(UTC)
        self.span = timedelta(days=SPAN_DAYS)
        self.writer = _Writer()
        self.expected = expected
        self.counts: Counter[str] = Counter()
        users = [User(username=f"user{n:03d}") for n in range(20)]
        for user in users:
            user.set_unusable_password()
        User.objects.bulk_create(users)
        self.user_ids = list(User.objects.values_list("pk", flat=True))
        User.objects.create_superuser("bench", "bench@example.com", "bench")
        self.names = [f"tool_{n:03d}" for n in range(TOOLS)]
        models.Tool.objects.bulk_create(
            models.Tool(name=name, description=f"Benchmark tool {name}.", source="bench")
            for name in self.names
        )
        self.tool_ids = dict(models.Tool.objects.values_list("name", "pk"))
        self.weights = _zipf_weights(TOOLS)
        self.limit_text = {name: breach_text(name, 40) for name in self.names}
        # About 300 calls wait for approval in all: a queue people keep short.
        self.waiting_share = min(1.0, 300 / max(1.0, total_rows * 2 / SPAN_DAYS))

    def add(self, rows: int) -> None:
        """``rows`` audit rows, ``rows / 10`` conversations (with messages), ``rows / 4`` runs."""
        from tool_calling import models

        rng, now, span, expected = self.rng, self.now, self.span, self.expected
        user_ids = self.user_ids
        conversations = max(1, rows // 10)
        # Conversations and their messages, in time order.
        starts = sorted(now - span * rng.random() for _ in range(conversations))
        conversation_ids = [uuid.UUID(int=rng.getrandbits(128), version=4) for _ in starts]
        lengths = [rng.randint(6, 24) for _ in starts]

        def conversation_rows() -> Iterator[dict[str, Any]]:
            for pk, start, length in zip(conversation_ids, starts, lengths, strict=True):
                yield {
                    "id": pk,
                    "owner_id": rng.choice(user_ids),
                    "title": f"Conversation {pk.hex[:8]}",
                    "created_at": start,
                    "updated_at": start + timedelta(seconds=10 * length),
                }

        def message_rows() -> Iterator[dict[str, Any]]:
            roles = ("user", "assistant", "tool", "assistant")
            for pk, start, length in zip(conversation_ids, starts, lengths, strict=True):
                for sequence in range(1, length + 1):
                    role = roles[(sequence - 1) % 4]
                    created = start + timedelta(seconds=10 * sequence)
                    usage: dict[str, int] = {}
                    if role == "assistant":
                        prompt = rng.randint(300, 6000)
                        completion = rng.randint(10, 600)
                        usage = {
                            "prompt_tokens": prompt,
                            "completion_tokens": completion,
                            "total_tokens": prompt + completion,
                        }
                        day = expected.day(created)
                        if day is not None:
                            expected.prompt[day] += prompt
                            expected.completion[day] += completion
                    yield {
                        "conversation_id": pk,
                        "sequence": sequence,
                        "role": role,
                        "text": "A message of the benchmark's conversations. " * 3,
                        "tool_calls": (
                            [{"id": "call_1", "name": "tool_001", "arguments": '{"q": "x"}'}]
                            if role == "assistant" and sequence % 4 == 2
                            else []
                        ),
                        "usage": usage,
                        "created_at": created,
                    }

        self._write("conversations", models.Conversation, conversation_rows())
        self._write("messages", models.Message, message_rows())

        run_times = sorted(now - span * rng.random() for _ in range(max(1, rows // 4)))

        def run_rows() -> Iterator[dict[str, Any]]:
            for created in run_times:
                age = now - created
                if age < timedelta(minutes=2):
                    status = rng.choice(["queued", "running", "awaiting_approval"])
                else:
                    status = rng.choices(["succeeded", "failed", "cancelled"], [95, 3, 2])[0]
                yield {
                    "id": uuid.UUID(int=rng.getrandbits(128), version=4),
                    "conversation_id": rng.choice(conversation_ids),
                    "user_id": rng.choice(user_ids),
                    "status": status,
                    "text": "Run the tools.",
                    "created_at": created,
                    "started_at": created,
                    "finished_at": (
                        created + timedelta(seconds=3) if age > timedelta(minutes=2) else None
                    ),
                }

        self._write("runs", models.Run, run_rows())
        self._write(
            "tool executions", models.ToolExecution, self._executions(rows, conversation_ids)
        )

    def _executions(self, rows: int, conversation_ids: list[uuid.UUID]) -> Iterator[dict[str, Any]]:
        rng, now, expected, limit_text = self.rng, self.now, self.expected, self.limit_text
        statuses = ["succeeded", "failed", "refused", "timed_out", "unknown", "denied"]
        status_weights = [92.0, 3.5, 1.5, 0.5, 0.2, 0.3]
        call_times = sorted(now - self.span * rng.random() for _ in range(rows))
        tool_of_call = rng.choices(self.names, self.weights, k=rows)
        waiting_after = now - timedelta(days=2)
        for created, name in zip(call_times, tool_of_call, strict=True):
            status = rng.choices(statuses, status_weights)[0]
            if created > waiting_after and rng.random() < self.waiting_share:
                status = "awaiting_approval"
            elif now - created < timedelta(minutes=1):
                status = "running"
            duration: int | None = int(rng.lognormvariate(math.log(120), 0.7))
            result, error, error_type = "Done: 42.", "", ""
            if status == "failed":
                error_type = "tools.UpstreamError"
                error = "Traceback (most recent call last):\n  ...\ntools.UpstreamError: 503"
                result = "The tool failed: UpstreamError."
            elif status == "refused":
                duration = 0
                result = limit_text[name] if rng.random() < 0.6 else f"Tool '{name}' is disabled."
            elif status in ("timed_out", "unknown", "awaiting_approval", "running"):
                duration = None
            elif status == "denied":
                duration = 0
                result = "Denied: not now."
            is_error = status not in ("succeeded", "awaiting_approval", "running")
            if status == "awaiting_approval":
                expected.waiting += 1
            if name in expected.watched:
                day = expected.day(created)
                if day is not None:
                    expected.calls[name][day] += 1
                    expected.errors[name][day] += is_error
                    expected.refusals[name][day] += result == limit_text[name]
                    if duration is not None:
                        expected.durations[f"{name}:{day}"].append(duration)
                        expected.durations[name].append(duration)
            yield {
                "conversation_id": rng.choice(conversation_ids),
                "tool_call_id": f"call_{rng.getrandbits(40):x}",
                "tool_id": self.tool_ids[name],
                "tool_name": name,
                "arguments": '{"city": "Oslo", "unit": "celsius"}',
                "result": result,
                "is_error": is_error,
                "status": status,
                "approval": "pending" if status == "awaiting_approval" else "",
                "error": error,
                "error_type": error_type,
                "user_id": rng.choice(self.user_ids),
                "mode": "celery",
                "queue": "tool_calling",
                "attempt": 1,
                "worker": "celery@bench",
                "created_at": created,
                "started_at": created,
                "finished_at": created + timedelta(milliseconds=duration or 0),
                "duration_ms": duration,
            }

    def _write(self, what: str, model: Any, rows: Iterator[dict[str, Any]]) -> None:
        self.counts[what] += self.writer.insert(model, rows)
        _progress(f"{self.counts[what]:,} {what}", self.started)

    def analyze(self) -> None:
        """PostgreSQL's statistics and visibility map, as autovacuum leaves them after a load."""
        _analyze(self.writer)
        _progress("and analyzed", self.started)


def _analyze(writer: _Writer) -> None:
    if writer.vendor != "postgresql":
        return
    raw = writer.connection.connection
    autocommit = raw.autocommit
    raw.autocommit = True
    try:
        raw.execute("VACUUM ANALYZE")
    finally:
        raw.autocommit = autocommit


# -- timing ---------------------------------------------------------------------------------------


def _pages(args: argparse.Namespace) -> list[tuple[str, str, bool]]:
    """(label, URL, whether the cache is emptied before each request) of every timed page."""
    from django.urls import reverse
    from django.utils import timezone

    from tool_calling import models

    busiest = models.Tool.objects.get(name="tool_000")
    median = models.Tool.objects.get(name=f"tool_{TOOLS // 2:03d}")
    today = timezone.localdate()
    day = (
        f"created_at__year={today.year}&created_at__month={today.month}&created_at__day={today.day}"
    )
    month = f"created_at__year={today.year}&created_at__month={today.month}"
    execution = models.ToolExecution.objects.filter(tool_name="tool_000").order_by("-pk").first()
    waiting = (
        models.ToolExecution.objects.filter(status="awaiting_approval")
        .order_by("created_at")
        .first()
    )
    conversation = models.Conversation.objects.order_by("-updated_at").first()
    executions = reverse("admin:tool_calling_toolexecution_changelist")
    tools = reverse("admin:tool_calling_tool_changelist")
    pages = [
        ("admin index", reverse("admin:index"), False),
        ("app index (Tool calling)", reverse("admin:app_list", args=["tool_calling"]), False),
        ("tools: list (500 tools, 24 h counts)", tools, False),
        ("tools: list sorted by calls (24 h)", f"{tools}?o=-7", False),
        ("tools: search", f"{tools}?q=tool_1", False),
        ("tool: change page", reverse("admin:tool_calling_tool_change", args=[busiest.pk]), False),
        ("tool executions: list", executions, False),
        ("tool executions: busiest tool", f"{executions}?tool_name=tool_000", False),
        ("tool executions: status failed", f"{executions}?status__exact=failed", False),
        ("tool executions: this month", f"{executions}?{month}", False),
        ("tool executions: today", f"{executions}?{day}", False),
        ("tool executions: busiest tool today", f"{executions}?tool_name=tool_000&{day}", False),
        ("tool executions: page 50", f"{executions}?p=50", False),
        ("tool executions: search a tool name", f"{executions}?q=tool_042", False),
        (
            "tool execution: change page",
            reverse("admin:tool_calling_toolexecution_change", args=[execution.pk]),
            False,
        ),
        ("conversations: list", reverse("admin:tool_calling_conversation_changelist"), False),
        (
            "conversation: transcript",
            reverse("admin:tool_calling_conversation_change", args=[conversation.pk]),
            False,
        ),
        ("approval queue", reverse("admin:tool_calling_pendingapproval_changelist"), False),
        (
            "approval: decision page",
            reverse("admin:tool_calling_pendingapproval_change", args=[waiting.pk]),
            False,
        ),
        ("overview (past days cached)", reverse("admin:tool_calling_overview"), False),
        (
            "overview (empty cache: first view of a day)",
            reverse("admin:tool_calling_overview"),
            True,
        ),
        (
            "usage: busiest tool (~15% of calls)",
            reverse("admin:tool_calling_tool_usage", args=[busiest.pk]),
            False,
        ),
        (
            "usage: a median tool",
            reverse("admin:tool_calling_tool_usage", args=[median.pk]),
            False,
        ),
    ]
    return pages


def _explain(sql: str) -> list[str]:
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}")
            return [str(row[-1]) for row in cursor.fetchall()]
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}")
        return [row[0] for row in cursor.fetchall()]


def _time_pages(args: argparse.Namespace) -> list[dict[str, Any]]:
    from django.contrib.auth.models import User
    from django.core.cache import cache
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client(SERVER_NAME="localhost")
    client.force_login(User.objects.get(username="bench"))
    results = []
    pages = _pages(args)
    for label, url, cold in pages:  # warm-up: templates, caches of the process
        if cold:
            cache.clear()
        response = client.get(url)
        if response.status_code != 200:
            raise SystemExit(f"{label}: {url} answered {response.status_code}")
    timings: dict[str, list[float]] = {label: [] for label, _url, _cold in pages}
    cpu: dict[str, list[float]] = {label: [] for label, _url, _cold in pages}
    # Round-robin, so that a busy moment of the machine hits every page alike.
    for _ in range(args.repeats):
        for label, url, cold in pages:
            if cold:
                cache.clear()
            started, used = time.perf_counter(), time.process_time()
            client.get(url)
            timings[label].append((time.perf_counter() - started) * 1000)
            cpu[label].append((time.process_time() - used) * 1000)
    for label, url, cold in pages:
        if cold:
            cache.clear()
        with CaptureQueriesContext(connection) as captured:
            client.get(url)
        queries = [q["sql"] for q in captured.captured_queries]
        slowest = []
        for sql in queries:
            if not sql.lstrip().upper().startswith(("SELECT", "(SELECT")):
                continue  # e.g. a server-side cursor's DECLARE: timed through its SELECT
            started = time.perf_counter()
            with connection.cursor() as cursor:
                cursor.execute(sql)
                cursor.fetchall()
            slowest.append(((time.perf_counter() - started) * 1000, sql))
        slowest.sort(reverse=True)
        entry = {
            "page": label,
            "url": url,
            "median_ms": statistics.median(timings[label]),
            "min_ms": min(timings[label]),
            "cpu_ms": statistics.median(cpu[label]),
            "queries": len(queries),
            "slowest_queries": [
                {"ms": ms, "sql": " ".join(sql.split())[:400]} for ms, sql in slowest[:3]
            ],
        }
        if args.explain or entry["median_ms"] > TARGET_MS:
            entry["plan_of_slowest"] = _explain(slowest[0][1]) if slowest else []
        results.append(entry)
    return results


def _check_figures(expected: _Expected, days: list[Any]) -> list[str]:
    """Where the dashboards' figures differ from the generated rows ([] when they agree)."""
    from tool_calling.admin import usage

    problems = []
    for name in sorted(expected.watched):
        figures = usage.tool_usage(name, days=days)
        for index, row in enumerate(figures.days):
            wanted = (
                expected.calls[name][index],
                expected.errors[name][index],
                expected.refusals[name][index],
            )
            if (row.calls, row.errors, row.limit_refusals) != wanted:
                problems.append(f"{name} {row.day.date}: {row} != {wanted}")
            durations = sorted(expected.durations.get(f"{name}:{index}", []))
            for p in usage.PERCENTILES:
                want = (
                    durations[max(1, math.ceil(p / 100 * len(durations))) - 1]
                    if durations
                    else None
                )
                if row.durations[p] != want:
                    problems.append(f"{name} {row.day.date} p{p}: {row.durations[p]} != {want}")
        everything = sorted(expected.durations.get(name, []))
        for p in usage.PERCENTILES:
            want = (
                everything[max(1, math.ceil(p / 100 * len(everything))) - 1] if everything else None
            )
            if figures.durations[p] != want:
                problems.append(f"{name} p{p} over the window: {figures.durations[p]} != {want}")
    overview = usage.overview(days=days)
    for index, day in enumerate(overview.tokens):
        wanted = (expected.prompt[index], expected.completion[index])
        if (day.prompt, day.completion) != wanted:
            problems.append(f"tokens {day.day.date}: {(day.prompt, day.completion)} != {wanted}")
    if overview.waiting != expected.waiting:
        problems.append(f"waiting approvals: {overview.waiting} != {expected.waiting}")
    return problems


def _server_version(connection: Any) -> str:
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("select sqlite_version()")
            version = f"SQLite {cursor.fetchone()[0]}"
            cursor.execute("PRAGMA journal_mode")
            return f"{version}, journal_mode={cursor.fetchone()[0]}"
        cursor.execute("select version()")
        return cursor.fetchone()[0].split(" on ")[0]


def _sizes(connection: Any) -> dict[str, str]:
    from tool_calling import models

    sizes = {}
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("PRAGMA page_count")
            pages = cursor.fetchone()[0]
            cursor.execute("PRAGMA page_size")
            sizes["database"] = f"{pages * cursor.fetchone()[0] / 2**20:.0f} MB"
        else:
            cursor.execute("select pg_database_size(current_database())")
            sizes["database"] = f"{cursor.fetchone()[0] / 2**20:.0f} MB"
    sizes["tool executions"] = f"{models.ToolExecution.objects.count():,}"
    return sizes


def child(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    _setup_django(args.database_url)
    _progress("nothing yet: migrated", started)
    from django.core.cache import cache
    from django.db import connection

    from tool_calling.admin import usage

    days = usage.last_days()
    expected = _Expected(days, ["tool_000", f"tool_{TOOLS // 2:03d}"])
    seeder = _Seeder(args.rows, expected)
    # The baseline: the same pages with a small audit, timed before it grows to full size.
    baseline_rows = min(BASELINE_ROWS, args.rows)
    seeder.add(baseline_rows)
    seeder.analyze()
    baseline = _time_pages(args)
    baseline_load = os.getloadavg()[0]
    seeder.add(args.rows - baseline_rows)
    seeder.analyze()
    # The rows just added went into past days too, which no deployment sees: forget what the
    # baseline's requests cached of them.
    cache.clear()
    seed_seconds = time.perf_counter() - seeder.started
    result = {
        "vendor": connection.vendor,
        "server": _server_version(connection),
        "seed_seconds": seed_seconds,
        "rows": dict(seeder.counts),
        "sizes": _sizes(connection),
        "figures_problems": _check_figures(expected, days),
        "baseline_rows": baseline_rows,
        "baseline_load": baseline_load,
        "baseline": baseline,
        "pages": _time_pages(args),
        "load": os.getloadavg()[0],
    }
    Path(args.child_json).write_text(json.dumps(result))


# =============================================================================================
# Parent: run the children, print the report
# =============================================================================================


def _run_child(name: str, database_url: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        command = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--child-json",
            str(out),
            "--database-url",
            database_url,
            "--rows",
            str(args.rows),
            "--repeats",
            str(args.repeats),
        ]
        if args.explain:
            command.append("--explain")
        env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
        subprocess.run(command, check=True, cwd=ROOT, env=env)
        result: dict[str, Any] = json.loads(out.read_text())
    result["name"] = name
    return result


@contextmanager
def _sqlite_database() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="tc-bench-admin-") as tmp:
        yield f"sqlite:///{Path(tmp) / 'admin.sqlite3'}"


def _postgres_database(url: str) -> Any:
    return _database.postgres_database(url, "tc_bench_admin")


def _table(result: dict[str, Any]) -> str:
    small, large = f"{result['baseline_rows']:,}", f"{result['rows']['tool executions']:,}"
    lines = [
        f"| page | ms, {small} rows | ms, {large} rows | × {small} | CPU ms | queries |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for before, page in zip(result["baseline"], result["pages"], strict=True):
        mark = "" if page["median_ms"] <= TARGET_MS else " ✗"
        ratio = page["median_ms"] / before["median_ms"] if before["median_ms"] else float("inf")
        queries = str(page["queries"])
        if before["queries"] != page["queries"]:
            queries = f"{before['queries']} → {page['queries']}"
        lines.append(
            f"| {page['page']} | {before['median_ms']:.1f} | "
            f"**{page['median_ms']:.1f}** ({page['min_ms']:.1f}){mark} | {ratio:.2f} | "
            f"{page['cpu_ms']:.1f} | {queries} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", metavar="URL", help="also run on PostgreSQL (or 'auto')")
    parser.add_argument("--rows", type=int, default=ROWS, help="audit rows (default 1,000,000)")
    parser.add_argument("--repeats", type=int, default=REPEATS, help="timed requests per page")
    parser.add_argument("--explain", action="store_true", help="plans of each page's slowest query")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--child-json", help=argparse.SUPPRESS)
    parser.add_argument("--database-url", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_json:
        child(args)
        return 0

    results = []
    with _sqlite_database() as url:
        results.append(_run_child("sqlite", url, args))
    if args.postgres:
        with _postgres_database(args.postgres) as url:
            results.append(_run_child("postgresql", url, args))

    import django

    print(f"## The admin with {args.rows:,} audit rows")
    print()
    print(
        f"Python {platform.python_version()}, Django {django.get_version()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs; each page requested through Django's test client as a "
        f"superuser, median of {args.repeats} requests after one warm-up (fastest in brackets)."
    )
    speed = min(timeit.repeat("sum(range(1000))", number=2000, repeat=5)) / 2000 * 1e6
    print(f"- Machine speed, for scale: sum(range(1000)) takes {speed:.1f} us here.")
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"- Load average when the report was printed: {load}")
    for result in results:
        rows = ", ".join(f"{count:,} {name}" for name, count in result["rows"].items())
        sizes = ", ".join(f"{name} {value}" for name, value in result["sizes"].items())
        print(
            f"- {LABELS.get(result['vendor'], result['vendor'])}: {result['server']}; seeded "
            f"{rows} in {result['seed_seconds']:.0f} s ({sizes}); 1-minute load average "
            f"{result['baseline_load']:.1f} while the small audit was timed, "
            f"{result['load']:.1f} while the full one was."
        )
    print(
        "- The baseline is the same page with the first "
        f"{results[0]['baseline_rows']:,} audit rows (and their conversations and runs), timed "
        "in the same process before the rest was added: the ratio shows what the table's size "
        "costs, the milliseconds what the machine gave (other work on it slows every page alike)."
    )
    print(
        "- CPU ms: the CPU time of the Django process during the request (median), the SQLite "
        "queries included, PostgreSQL's own work not: on a busy machine, the wall time minus "
        "this is mostly waiting for a core."
    )
    for result in results:
        print()
        print(f"### {LABELS.get(result['vendor'], result['vendor'])}")
        print()
        print(_table(result))
    print()
    print("### Figures")
    print()
    for result in results:
        label = LABELS.get(result["vendor"], result["vendor"])
        problems = result["figures_problems"]
        if problems:
            print(f"- FAIL {label}: the dashboards differ from the generated rows:")
            for problem in problems[:20]:
                print(f"  - {problem}")
        else:
            print(
                f"- PASS {label}: the dashboards' figures (calls, errors, limit refusals, p50 and "
                "p95 per day of two tools, tokens per day, waiting approvals) match the "
                "generated rows."
            )
    print()
    print("### Targets")
    print()
    passed = all(not result["figures_problems"] for result in results)
    for result in results:
        label = LABELS.get(result["vendor"], result["vendor"])
        for page in result["pages"]:
            ok = page["median_ms"] <= TARGET_MS
            passed = passed and ok
            print(
                f"- {'PASS' if ok else 'FAIL'} {label}: {page['page']} {page['median_ms']:.1f} ms "
                f"(target <= {TARGET_MS:g} ms), {page['queries']} queries"
            )
    slow = [
        (result, page)
        for result in results
        for page in result["pages"]
        if args.explain or page["median_ms"] > TARGET_MS
    ]
    if slow:
        print()
        print("### Slowest queries")
        for result, page in slow:
            print()
            print(
                f"{LABELS.get(result['vendor'], result['vendor'])}, {page['page']} ({page['url']}):"
            )
            print()
            print("```")
            for query in page["slowest_queries"]:
                print(f"{query['ms']:8.2f} ms  {query['sql']}")
            for line in page.get("plan_of_slowest", []):
                print(f"    {line}")
            print("```")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 1 if args.strict and not passed else 0


if __name__ == "__main__":
    sys.exit(main())
