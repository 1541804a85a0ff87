"""Benchmark: ``manage.py purge_expired`` at a million rows, and what it costs other writers.

A benchmark, not a test: it prints a Markdown table and exits 0 unless it crashes.

The database (SQLite in WAL mode as project/settings.py configures it, or PostgreSQL with
``--postgres URL|auto``) is filled with raw bulk inserts from one seeded random generator,
spread evenly over the last 365 days:

- ``--rows`` audit rows (1,000,000 by default), every call ended;
- ``--rows / 4`` runs, all ended, each with 4 events (``--rows`` events).

The retention is the example project's (``RUN_EVENT_DAYS`` 30, ``FINISHED_RUN_DAYS`` 90,
``AUDIT_DAYS`` 180) with ``BATCH_SIZE`` ``--batch`` (1,000 by default): the events of about 92%
of the runs, 75% of the runs and 51% of the audit rows are past it. The purge is timed as
``purge_expired --dry-run`` (the counts) and then for real, while a second connection writes a
row every 10 ms in a transaction of its own (``BEGIN IMMEDIATE`` on SQLite, as the project
opens its transactions): its slowest write is the longest that a turn or a worker waited for
the purge. What is left is checked against the generated rows.

    python benchmarks/purge.py [--rows 1000000] [--batch 1000] [--postgres URL|auto]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import _database  # noqa: E402

ROWS = 1_000_000
BATCH = 1_000
SPAN_DAYS = 365
EVENTS_PER_RUN = 4
SEED = 25


@contextmanager
def _database_url(postgres: str | None) -> Iterator[str]:
    if postgres:
        with _database.postgres_database(postgres, "tc_bench_purge") as url:
            yield url
    else:
        with tempfile.TemporaryDirectory(prefix="tc-bench-purge-") as tmp:
            yield f"sqlite:///{Path(tmp) / 'purge.sqlite3'}"


def _seed(rows: int, now: datetime) -> dict[str, int]:
    """Insert the rows; return how many of each kind are past the project's retention."""
    from benchmarks.admin import _Writer
    from tool_calling import models

    rng = random.Random(SEED)
    writer = _Writer()
    span = timedelta(days=SPAN_DAYS).total_seconds()
    conversation = uuid.UUID(int=rng.getrandbits(128), version=4)
    writer.insert(
        models.Conversation,
        iter(
            [{"id": conversation, "created_at": now - timedelta(days=SPAN_DAYS), "updated_at": now}]
        ),
    )

    def moments(count: int) -> list[datetime]:
        return sorted(now - timedelta(seconds=rng.random() * span) for _ in range(count))

    run_times = moments(rows // 4)
    run_ids = [uuid.UUID(int=rng.getrandbits(128), version=4) for _ in run_times]
    started = time.perf_counter()
    writer.insert(
        models.Run,
        (
            {
                "id": run_id,
                "conversation_id": conversation,
                "status": "succeeded",
                "text": "Run the tools.",
                "created_at": created,
                "started_at": created,
                "finished_at": created + timedelta(seconds=3),
                "event_count": EVENTS_PER_RUN,
            }
            for run_id, created in zip(run_ids, run_times, strict=True)
        ),
    )
    writer.insert(
        models.RunEvent,
        (
            {
                "run_id": run_id,
                "sequence": sequence,
                "kind": "step",
                "data": {},
                "created_at": created + timedelta(seconds=sequence),
            }
            for run_id, created in zip(run_ids, run_times, strict=True)
            for sequence in range(1, EVENTS_PER_RUN + 1)
        ),
    )
    call_times = moments(rows)
    writer.insert(
        models.ToolExecution,
        (
            {
                "conversation_id": conversation,
                "tool_name": f"tool_{number % 50}",
                "tool_call_id": f"call_{number}",
                "status": "succeeded",
                "arguments": '{"city": "Oslo"}',
                "result": "Sunny",
                "created_at": created,
                "finished_at": created + timedelta(milliseconds=120),
                "duration_ms": 120,
            }
            for number, created in enumerate(call_times)
        ),
    )
    print(f"  seeded in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)

    def older(times: list[datetime], days: int, shift: timedelta = timedelta(0)) -> int:
        return sum(1 for t in times if t + shift < now - timedelta(days=days))

    # The events of the runs that ended over 30 days ago go first; the runs that ended over
    # 90 days ago go next (their events are gone by then).
    return {
        "run_events": older(run_times, 30, timedelta(seconds=3)) * EVENTS_PER_RUN,
        "runs": older(run_times, 90, timedelta(seconds=3)),
        "audit": older(call_times, 180),
        "events_total": len(run_times) * EVENTS_PER_RUN,
        "runs_total": len(run_times),
        "audit_total": len(call_times),
    }


class _Writes(threading.Thread):
    """A second connection writing one row every 10 ms, each in a transaction of its own."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.latencies: list[float] = []
        self.stop = threading.Event()
        self.raw, self.begin = _database.raw_connection()
        self.raw.execute("CREATE TABLE bench_writes (at TEXT)")

    def run(self) -> None:
        cursor = self.raw.cursor()
        while not self.stop.is_set():
            started = time.perf_counter()
            cursor.execute(self.begin)
            cursor.execute("INSERT INTO bench_writes (at) VALUES ('x')")
            cursor.execute("COMMIT")
            self.latencies.append(time.perf_counter() - started)
            time.sleep(0.01)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=ROWS)
    parser.add_argument("--batch", type=int, default=BATCH)
    parser.add_argument("--postgres", help="a PostgreSQL server URL, or 'auto'")
    args = parser.parse_args(argv)

    with _database_url(args.postgres) as url:
        _database.setup_django(url, "purge")
        from django.db import connection
        from django.test.utils import override_settings

        from tool_calling import models
        from tool_calling.conf import settings as app_settings
        from tool_calling.retention import purge_expired

        now = datetime.now(UTC)
        expected = _seed(args.rows, now)
        retention = {**app_settings.RETENTION, "BATCH_SIZE": args.batch}
        with override_settings(TOOL_CALLING={**app_settings.user_settings, "RETENTION": retention}):
            started = time.perf_counter()
            counted = purge_expired(dry_run=True, now=now)
            dry_seconds = time.perf_counter() - started

            writes = _Writes()
            writes.start()
            started = time.perf_counter()
            report = purge_expired(now=now)
            seconds = time.perf_counter() - started
            writes.stop.set()
            writes.join()

        assert counted.as_dict() == report.as_dict(), (counted, report)
        assert report.as_dict() == {k: expected[k] for k in ("run_events", "runs", "audit")}, (
            report,
            expected,
        )
        left = {
            "events": models.RunEvent.objects.count(),
            "runs": models.Run.objects.count(),
            "audit": models.ToolExecution.objects.count(),
        }
        assert left["audit"] == expected["audit_total"] - expected["audit"]
        assert left["runs"] == expected["runs_total"] - expected["runs"]
        deleted = report.run_events + report.runs + report.audit
        latencies = sorted(writes.latencies)
        print()
        print(
            f"Database: {connection.vendor} ({_database.server_version()}), BATCH_SIZE {args.batch}"
        )
        print()
        print("| rows | value |")
        print("|---|---|")
        print(
            f"| seeded | {args.rows:,} audit rows, {expected['runs_total']:,} runs, "
            f"{expected['events_total']:,} run events |"
        )
        print(
            f"| past retention | {report.audit:,} audit rows, {report.runs:,} runs, "
            f"{report.run_events:,} run events |"
        )
        print(f"| `purge_expired --dry-run` | {dry_seconds:.2f} s |")
        print(f"| `purge_expired` | {seconds:.1f} s ({deleted / seconds:,.0f} counted rows/s) |")
        print(
            f"| a concurrent write (every 10 ms, {len(latencies)} writes) | median "
            f"{statistics.median(latencies) * 1000:.1f} ms, p99 "
            f"{latencies[int(len(latencies) * 0.99)] * 1000:.1f} ms, slowest "
            f"{latencies[-1] * 1000:.1f} ms |"
        )
        print(
            f"| left | {left['audit']:,} audit rows, {left['runs']:,} runs, "
            f"{left['events']:,} run events |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
