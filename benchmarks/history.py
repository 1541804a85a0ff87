"""Benchmark: a stored governed turn as the conversation grows, against its floor in raw SQL.

A benchmark, not a test: it prints Markdown tables and PASS/FAIL lines for the targets, and exits
0 unless it crashes (``--strict`` also exits 1 when a target is missed).

For each size (10, 100, 1,000 and 10,000 stored messages) a conversation is pre-filled with
``bulk_create`` (user / assistant tool call / tool response / answer, as turns store them), then
``--turns`` turns are timed, each one
``governed_chat_client(conversation=conv, model=ScriptedChatModel(...)).prompt(...).call()`` with
one tool round: the model asks for one tool call, the tool answers at once, the model answers.
After each timed turn the rows it added are deleted (untimed), so every turn runs at its size.

Framework time per turn = wall time of the turn - time inside the (instant, scripted) model - the
tool's own time (measured by calling the tool directly). The median over the turns is reported,
with the phases that make it up.

The floor, measured in the same run: the statements one turn runs are read with
``connection.execute_wrapper`` (and its commits by wrapping the connection's ``commit``); its
INSERTs and UPDATEs are then written again with the driver alone (``sqlite3`` on the same WAL
file, ``psycopg`` on the same PostgreSQL database), with the same parameters and in the same
transactions, so the same rows in the same number of commits. Primary-key sequences are set back
before each replay, so the replay writes the very rows the turn wrote (checked column by column
once per size). A second replay runs every statement of the turn, its reads included.

Databases: SQLite (a file in WAL mode with synchronous=NORMAL and IMMEDIATE transactions, as
project/settings.py configures it) always; PostgreSQL with ``--postgres URL`` (a database
``tc_bench_history_<pid>`` is created on that server and dropped afterwards), or
``--postgres auto`` for the throwaway server of scripts/setup_postgres.sh (``TC_PG_PORT``). Each
database runs in its own child process, because project/settings.py reads DATABASE_URL when it
is imported.

    python benchmarks/history.py [--postgres URL|auto] [--turns 20] [--sizes 10,100,1000,10000]
                                 [--profile] [--profile-size N] [--json PATH] [--strict]

Targets: at most 14 statements per turn besides transaction control; framework time
at most 20x its floor; flat with history (10,000 stored messages within 1.1x of 10). When a
target is missed (or with ``--profile``) one size is profiled: the statements of one turn with
their times and plans, and the functions where the time goes.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import _database  # noqa: E402

SIZES = (10, 100, 1000, 10000)
TURNS = 20
WARMUP_TURNS = 3
CAPTURED_TURNS = 5  # turns whose statements are read, per size (the first one is replayed)
TARGET_STATEMENTS = 14
TARGET_FLOOR_RATIO = 20.0
TARGET_FLAT_RATIO = 1.1
LABELS = {"sqlite": "SQLite (WAL)", "postgresql": "PostgreSQL"}

# (phase, owner module, attribute path): wrapped to time the phase within a turn.
PHASES: tuple[tuple[str, str, str], ...] = (
    ("claim", "tool_calling.conversations", "claim_conversation"),
    ("claim", "tool_calling.conversations", "release_conversation"),
    ("memory_load", "tool_calling.conversations", "TurnLog.find_by_conversation_id"),
    ("memory_save", "tool_calling.conversations", "TurnLog.add"),
    ("limit_counting", "tool_calling.core.execution.manager", "find_breaches"),
    ("governed_call", "tool_calling.governance", "GovernedToolCallingManager.call_tool"),
    ("recheck", "tool_calling.calls.running", "admit"),
    ("audit", "tool_calling.calls.lifecycle", "record_started"),
    ("audit", "tool_calling.calls.lifecycle", "finish"),
    ("audit", "tool_calling.calls.lifecycle", "record_refused"),
    ("governed_tools", "tool_calling.resolvers", "GovernedTools.__init__"),
)
PHASE_NAMES = (
    "claim",
    "memory_load",
    "memory_save",
    "limit_counting",
    "governed_call",
    "recheck",
    "audit",
    "governed_tools",
)
# Phases that never run inside one another: the framework time minus their sum is the rest.
TOP_PHASES = (
    "claim",
    "memory_load",
    "memory_save",
    "limit_counting",
    "governed_call",
    "governed_tools",
)


# =============================================================================================
# Child: one database, every size
# =============================================================================================


def _setup_django(database_url: str) -> None:
    _database.setup_django(database_url, "history")


class _Clock:
    """Seconds spent in instrumented phases during the current turn."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}
        self.missing: list[str] = []

    def reset(self) -> None:
        self.totals = {}

    def add(self, phase: str, seconds: float) -> None:
        self.totals[phase] = self.totals.get(phase, 0.0) + seconds

    def wrap(self, module_name: str, path: str, phase: str) -> None:
        import importlib

        owner: Any = importlib.import_module(module_name)
        *parents, attribute = path.split(".")
        try:
            for part in parents:
                owner = getattr(owner, part)
            original = getattr(owner, attribute)
        except AttributeError:
            self.missing.append(f"{module_name}.{path}")
            return
        clock = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                clock.add(phase, time.perf_counter() - started)

        timed.__wrapped__ = original  # type: ignore[attr-defined]
        setattr(owner, attribute, timed)


CLOCK = _Clock()


def _instrument() -> None:
    for phase, module_name, path in PHASES:
        CLOCK.wrap(module_name, path, phase)


def _lookup(key: str) -> str:
    """The tool's body: instant, so that the turn measures the framework."""
    return f"value of {key}"


def _make_tool() -> Any:
    from tool_calling import tool

    @tool
    def lookup(key: str) -> str:
        """Look a key up (instant)."""
        started = time.perf_counter()
        try:
            return _lookup(key)
        finally:
            CLOCK.add("tool", time.perf_counter() - started)

    return lookup


def _model(step: int) -> Any:
    """A scripted model whose time (prompt bookkeeping, usage counting) is measured apart."""
    from tool_calling.testing import ScriptedChatModel, text, tool_call

    class TimedScriptedChatModel(ScriptedChatModel):
        def call(self, prompt: Any) -> Any:
            started = time.perf_counter()
            try:
                return super().call(prompt)
            finally:
                CLOCK.add("model", time.perf_counter() - started)

    return TimedScriptedChatModel(
        [
            tool_call("lookup", id=f"call_{step}", key=f"k{step}"),
            text(f"The value of k{step} is known now; anything else?"),
        ]
    )


def _history_rows(conversation: Any, size: int) -> Iterator[Any]:
    """``size`` Message rows as turns store them: user, tool call, tool response, answer."""
    from tool_calling import models
    from tool_calling.core.chat.messages import (
        AssistantMessage,
        ToolCall,
        ToolResponse,
        ToolResponseMessage,
        UserMessage,
    )
    from tool_calling.repositories import message_to_fields

    for index in range(size):
        turn, position = divmod(index, 4)
        message: Any
        if position == 0:
            message = UserMessage(f"Question number {turn}: what is the value of key k{turn}?")
        elif position == 1:
            message = AssistantMessage(
                None,
                [ToolCall(f"old_{turn}", "lookup", json.dumps({"key": f"k{turn}"}))],
                {"id": f"chatcmpl-{turn}a", "role": "assistant"},
            )
        elif position == 2:
            message = ToolResponseMessage(
                [ToolResponse(f"old_{turn}", "lookup", f"value of k{turn} " + "x" * 80)]
            )
        else:
            message = AssistantMessage(
                f"The value of k{turn} is {turn}. " + "It was looked up for you. " * 3,
                [],
                {"id": f"chatcmpl-{turn}b", "role": "assistant"},
            )
        yield models.Message(
            conversation=conversation, sequence=index + 1, **message_to_fields(message)
        )


def _prefill(size: int) -> Any:
    from django.db import connection

    from tool_calling import models

    conversation = models.Conversation.objects.create(title=f"history {size}")
    models.Message.objects.bulk_create(_history_rows(conversation, size), batch_size=1000)
    with connection.cursor() as cursor:
        # A long-lived database has statistics; a table filled a moment ago may not yet.
        cursor.execute("ANALYZE")
    return conversation


def _turn(conversation: Any, registry: Any, step: int) -> tuple[float, dict[str, float]]:
    """Run one turn; return its wall time and the phase totals (seconds)."""
    from tool_calling.governance import governed_chat_client

    model = _model(step)
    CLOCK.reset()
    started = time.perf_counter()
    client = governed_chat_client(conversation=conversation, model=model, tool_registry=registry)
    reply = client.prompt(f"What is the value of k{step}?").call().content()
    wall = time.perf_counter() - started
    assert reply and reply.startswith(f"The value of k{step}"), reply
    model.assert_consumed()
    return wall, dict(CLOCK.totals)


def _trim(conversation: Any, size: int) -> None:
    from tool_calling import models

    models.Message.objects.filter(conversation=conversation, sequence__gt=size).delete()


# -- the floor ----------------------------------------------------------------------------------


def _pk_tables() -> dict[str, str]:
    """Table -> primary-key column of every installed model with an auto-incremented key."""
    from django.apps import apps
    from django.db import models as django_models

    tables = {}
    for model in apps.get_models(include_auto_created=True):
        pk = model._meta.pk
        if isinstance(pk, django_models.AutoField | django_models.BigAutoField):
            tables[model._meta.db_table] = pk.column
    return tables


def _rows(table: str, column: str, ids: list[int] | None) -> list[tuple[Any, ...]]:
    """Every column of rows ``ids`` of ``table`` (all rows when ``ids`` is None), in key order."""
    from django.db import connection

    quote = connection.ops.quote_name
    sql = f"SELECT * FROM {quote(table)}"
    params: list[Any] = []
    if ids is not None:
        sql += f" WHERE {quote(column)} IN ({', '.join(['%s'] * len(ids))})"
        params = list(ids)
    with connection.cursor() as cursor:
        cursor.execute(sql + f" ORDER BY {quote(column)}", params)
        return [tuple(row) for row in cursor.fetchall()]


def _delete_rows(columns: dict[str, str], ids: dict[str, list[int]]) -> None:
    """Delete rows ``ids`` of each table, in one transaction (foreign keys are deferred)."""
    from django.db import connection, transaction

    quote = connection.ops.quote_name
    with transaction.atomic(), connection.cursor() as cursor:
        for table in reversed(list(columns)):
            if ids.get(table):
                cursor.execute(
                    f"DELETE FROM {quote(table)} WHERE {quote(columns[table])} IN "
                    f"({', '.join(['%s'] * len(ids[table]))})",
                    ids[table],
                )


def _new_ids(columns: dict[str, str], before: dict[str, int]) -> dict[str, list[int]]:
    """The keys above ``before`` in each table: the rows inserted since, in key order."""
    from django.db import connection

    quote = connection.ops.quote_name
    ids = {}
    with connection.cursor() as cursor:
        for table, column in columns.items():
            cursor.execute(
                f"SELECT {quote(column)} FROM {quote(table)} WHERE {quote(column)} > %s "
                f"ORDER BY {quote(column)}",
                [before[table]],
            )
            ids[table] = [row[0] for row in cursor.fetchall()]
    return ids


def _timed_turn(
    conversation: Any, registry: Any, step: int, columns: dict[str, str], *, read: bool = False
) -> tuple[float, dict[str, float], _database.Capture | None]:
    """One turn, then (untimed) every row it inserted deleted: messages, its audit row...

    So each turn runs at its size, and (SQLite hands out max(key) + 1) the floor's replay can
    write its rows under their own keys again. With ``read``, the turn's statements are read.
    """
    before = _database.sequence_values(list(columns))
    captured = None
    if read:
        with _database.capture() as captured:
            wall, totals = _turn(conversation, registry, step)
    else:
        wall, totals = _turn(conversation, registry, step)
    _delete_rows(columns, _new_ids(columns, before))
    return wall, totals, captured


class Floor:
    """One size's turn, captured, and its statements replayed raw (see the module docstring)."""

    def __init__(self, conversation: Any, registry: Any, size: int, raw: Any, begin: str):
        from django.db import connection

        self.conversation = conversation
        self.size = size
        pk_tables = _pk_tables()
        self.before = _database.sequence_values(list(pk_tables))
        with _database.capture() as captured:
            _turn(conversation, registry, 10_000_000)
        self.captured = captured
        self.counts = captured.counts()
        statements = captured.statements
        inserted = [s.table for s in statements if s.head == "INSERT" and s.table]
        updated = [s.table for s in statements if s.head in ("UPDATE", "DELETE") and s.table]
        # Tables in the order the turn first wrote them.
        self.tables = list(dict.fromkeys(inserted))
        unknown = [t for t in self.tables if t not in pk_tables]
        if unknown:
            raise SystemExit(f"The turn inserted into {unknown}: no auto-incremented key to reset")
        self.columns = {t: pk_tables[t] for t in self.tables}
        self.before = {t: self.before[t] for t in self.tables}
        self.ids = _new_ids(self.columns, self.before)
        # Tables the turn only updated (the conversation's claim): compared whole when small.
        self.updated_only = [t for t in dict.fromkeys(updated) if t not in self.tables]
        units = captured.units()
        vendor = connection.vendor
        self.writes = _database.RawReplay(units, raw, begin, vendor, writes_only=True)
        self.every = _database.RawReplay(units, raw, begin, vendor, writes_only=False)
        self._verify(pk_tables)

    def _snapshot(self, pk_tables: dict[str, str]) -> dict[str, list[tuple[Any, ...]]]:
        snapshot = {t: _rows(t, self.columns[t], self.ids[t]) for t in self.tables}
        for table in self.updated_only:
            if table in pk_tables:
                snapshot[table] = _rows(table, pk_tables[table], None)
        return snapshot

    def _delete_rows(self) -> None:
        _delete_rows(self.columns, self.ids)

    def _verify(self, pk_tables: dict[str, str]) -> None:
        """Replay the writes once and check they wrote exactly the turn's rows."""
        framework = self._snapshot(pk_tables)
        self._delete_rows()
        after = _database.sequence_values(self.tables)
        _database.set_sequence_values(self.before)
        rowcounts = self.writes.run()
        replayed = self._snapshot(pk_tables)
        self._delete_rows()
        _database.set_sequence_values(after)
        problems = self.writes.mismatches(rowcounts)
        for table, rows in framework.items():
            if replayed.get(table) != rows:
                problems.append(f"{table}: {rows} written by the turn, {replayed.get(table)} raw")
        if problems:
            raise SystemExit(
                f"The raw replay of the turn at {self.size} messages did not write the same rows:"
                "\n  " + "\n  ".join(problems)
            )
        self.time(self.every)  # reads included: runs, and changes the same number of rows

    def time(self, replay: _database.RawReplay) -> float:
        """Milliseconds of one replay (resetting the keys before and deleting its rows after)."""
        after = _database.sequence_values(self.tables)
        _database.set_sequence_values(self.before)
        started = time.perf_counter()
        rowcounts = replay.run()
        elapsed = time.perf_counter() - started
        self._delete_rows()
        _database.set_sequence_values(after)
        problems = replay.mismatches(rowcounts)
        if problems:
            raise SystemExit(f"Raw replay at {self.size} messages: {problems}")
        return elapsed * 1000


# -- profile ------------------------------------------------------------------------------------


def _profile(conversation: Any, registry: Any, size: int, turns: int) -> str:
    profiler = cProfile.Profile()
    for step in range(turns):
        profiler.enable()
        _turn(conversation, registry, 20_000_000 + step)
        profiler.disable()
        _trim(conversation, size)
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.strip_dirs()
    out.write(f"--- top 25 by own time, {turns} turns at {size} stored messages\n")
    stats.sort_stats("tottime").print_stats(25)
    out.write(f"--- top 30 by cumulative time, {turns} turns at {size} stored messages\n")
    stats.sort_stats("cumulative").print_stats(30)
    return out.getvalue()


def _explain(captured: _database.Capture) -> list[str]:
    """The plan of every read the turn ran, with the turn's own parameters."""
    from django.db import connection

    prefix = "EXPLAIN QUERY PLAN" if connection.vendor == "sqlite" else "EXPLAIN"
    plans = []
    with connection.cursor() as cursor:
        for number, statement in enumerate(captured.statements, start=1):
            if statement.kind != "read" or statement.many:
                continue
            cursor.execute(f"{prefix} {statement.sql}", statement.params)
            rows = "\n    ".join(" ".join(map(str, row)) for row in cursor.fetchall())
            plans.append(f"{number:>3}. {' '.join(statement.sql.split())[:100]}\n    {rows}")
    return plans


# -- the child's run ----------------------------------------------------------------------------


def child(args: argparse.Namespace) -> None:
    _setup_django(args.database_url)
    from django.db import connection

    from tool_calling.registry import ToolRegistry
    from tool_calling.sync import sync_tools

    _instrument()
    registry = ToolRegistry()
    registry.register(_make_tool(), source="benchmarks")
    sync_tools(registry)
    tool_direct = min(timeit.repeat(lambda: _lookup("k1"), number=10_000, repeat=5)) / 10_000

    results: dict[str, Any] = {
        "vendor": connection.vendor,
        "server": _database.server_version(),
        "settings": _settings_note(),
        "tool_direct_ms": tool_direct * 1000,
        "not_instrumented": CLOCK.missing,
        "sizes": {},
    }
    conversations = {size: _prefill(size) for size in args.sizes}
    for size, conversation in conversations.items():
        for step in range(WARMUP_TURNS):
            _turn(conversation, registry, 1_000_000 + step)
            _trim(conversation, size)
    raw, begin = _database.raw_connection()
    floors = {
        size: Floor(conversation, registry, size, raw, begin)
        for size, conversation in conversations.items()
    }
    for floor in floors.values():  # warm the raw connection and its statements
        floor.time(floor.writes)
        floor.time(floor.every)
    # More turns read (untimed, among the timed ones), for the statements' time in the driver.
    captures = {size: [floors[size].captured] for size in args.sizes}
    walls: dict[int, list[float]] = {size: [] for size in args.sizes}
    frameworks: dict[int, list[float]] = {size: [] for size in args.sizes}
    models_ms: dict[int, list[float]] = {size: [] for size in args.sizes}
    floor_writes: dict[int, list[float]] = {size: [] for size in args.sizes}
    floor_every: dict[int, list[float]] = {size: [] for size in args.sizes}
    phases = {size: {phase: [] for phase in (*PHASE_NAMES, "rest")} for size in args.sizes}
    # Round-robin over the sizes (turn 1 of every size, then turn 2, ...) with each size's floor
    # right after its turn, so that a busy phase of the machine hits all of them alike.
    for step in range(args.turns):
        for size, conversation in conversations.items():
            wall, totals, _ = _timed_turn(conversation, registry, step, floors[size].columns)
            model = totals.get("model", 0.0)
            tool = totals.get("tool", 0.0)
            # The tool's own time, as calling it directly costs (one call per turn).
            framework = wall - model - tool_direct
            walls[size].append(wall * 1000)
            models_ms[size].append(model * 1000)
            frameworks[size].append(framework * 1000)
            for phase in PHASE_NAMES:
                value = totals.get(phase, 0.0)
                if phase == "governed_call":
                    value -= tool
                phases[size][phase].append(value * 1000)
            top = sum(totals.get(p, 0.0) for p in TOP_PHASES) - tool
            phases[size]["rest"].append((framework - top) * 1000)
            floor_writes[size].append(floors[size].time(floors[size].writes))
            floor_every[size].append(floors[size].time(floors[size].every))
            if len(captures[size]) < CAPTURED_TURNS:
                columns, step_id = floors[size].columns, 30_000_000 + step
                *_, read = _timed_turn(conversation, registry, step_id, columns, read=True)
                assert read is not None
                captures[size].append(read)
    for size in args.sizes:
        floor = floors[size]
        counted = [c.counts() for c in captures[size]]
        results["sizes"][str(size)] = {
            "turn_ms": statistics.median(walls[size]),
            "model_ms": statistics.median(models_ms[size]),
            "framework_ms": statistics.median(frameworks[size]),
            "framework_min_ms": min(frameworks[size]),
            "framework_max_ms": max(frameworks[size]),
            "floor_ms": statistics.median(floor_writes[size]),
            "floor_min_ms": min(floor_writes[size]),
            "replay_every_ms": statistics.median(floor_every[size]),
            "floor_statements": floor.writes.statements,
            "floor_commits": floor.writes.commits,
            "phases_ms": {phase: statistics.median(v) for phase, v in phases[size].items()},
            **floor.counts,
            "statements_max": max(c["statements"] for c in counted),
            "commits_max": max(c["commits"] for c in counted),
            "driver_ms": statistics.median(sum(s.ms for s in c.statements) for c in captures[size]),
            "samples": {
                "framework_ms": frameworks[size],
                "floor_ms": floor_writes[size],
                "replay_every_ms": floor_every[size],
            },
        }
    raw.close()
    if args.profile:
        size = args.profile_size or max(args.sizes)
        if size not in conversations:
            raise SystemExit(f"--profile-size {size} is not one of --sizes {args.sizes}")
        floor = floors[size]
        results["profile"] = {
            "size": size,
            "statements": floor.captured.listing(),
            "explain": _explain(floor.captured),
            "functions": _profile(conversations[size], registry, size, args.turns),
        }
    Path(args.child_json).write_text(json.dumps(results))


def _settings_note() -> str:
    from django.conf import settings
    from django.db import connection

    database = settings.DATABASES["default"]
    options = database.get("OPTIONS", {})
    parts = [f"CONN_MAX_AGE={database.get('CONN_MAX_AGE')}"]
    if connection.vendor == "sqlite":
        parts.append(f"transaction_mode={options.get('transaction_mode')}")
        parts.append(f"init_command={options.get('init_command')!r}")
    return ", ".join(parts)


# =============================================================================================
# Parent: run the children, print the report
# =============================================================================================


def _run_child(
    name: str, database_url: str, args: argparse.Namespace, profile: bool
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        command = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--child-json",
            str(out),
            "--database-url",
            database_url,
            "--turns",
            str(args.turns),
            "--sizes",
            ",".join(map(str, args.sizes)),
        ]
        if profile:
            command.append("--profile")
            if args.profile_size:
                command += ["--profile-size", str(args.profile_size)]
        env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
        subprocess.run(command, check=True, cwd=ROOT, env=env)
        result: dict[str, Any] = json.loads(out.read_text())
    result["name"] = name
    return result


@contextmanager
def _sqlite_database() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="tc-bench-history-") as tmp:
        yield f"sqlite:///{Path(tmp) / 'history.sqlite3'}"


def _measure(name: str, database: Callable[[], Any], args: argparse.Namespace) -> dict[str, Any]:
    with database() as url:
        result = _run_child(name, url, args, profile=args.profile)
    if not args.profile and not all(ok for ok, _ in _verdicts(result)):
        # Missed a target: run again with the profile.
        with database() as url:
            profiled = _run_child(name, url, args, profile=True)
        result["profile"] = profiled["profile"]
        result["profile_run_sizes"] = {
            size: {k: v for k, v in row.items() if k != "samples"}
            for size, row in profiled["sizes"].items()
        }
    return result


def _verdicts(result: dict[str, Any]) -> list[tuple[bool, str]]:
    sizes = result["sizes"]
    label = LABELS.get(result["vendor"], result["vendor"])
    smallest, largest = min(sizes, key=int), max(sizes, key=int)
    most = max(sizes, key=lambda s: sizes[s]["statements_max"])
    statements = sizes[most]["statements_max"]
    worst = max(sizes, key=lambda s: sizes[s]["framework_ms"] / sizes[s]["floor_ms"])
    ratio = sizes[worst]["framework_ms"] / sizes[worst]["floor_ms"]
    base, big = sizes[smallest]["framework_ms"], sizes[largest]["framework_ms"]
    flat = big / base if base > 0 else float("inf")
    return [
        (
            statements <= TARGET_STATEMENTS,
            f"{label}: {statements} statements per turn besides transaction control "
            f"(most at {int(most):,} messages; {sizes[most]['commits']} commits) "
            f"<= {TARGET_STATEMENTS}",
        ),
        (
            ratio <= TARGET_FLOOR_RATIO,
            f"{label}: framework time {ratio:.1f}x its floor at {int(worst):,} messages, the "
            f"worst size ({sizes[worst]['framework_ms']:.2f} ms vs {sizes[worst]['floor_ms']:.3f}"
            f" ms for the same rows in raw SQL) <= {TARGET_FLOOR_RATIO:g}x",
        ),
        (
            flat <= TARGET_FLAT_RATIO,
            f"{label}: {int(largest):,} messages at {flat:.2f}x the {int(smallest):,} case "
            f"({big:.2f} ms vs {base:.2f} ms of framework time) <= {TARGET_FLAT_RATIO}x",
        ),
    ]


def _table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| Database | Stored messages | Turn (ms) | Model (ms) | Framework (ms) | vs smallest | "
        "Best (ms) | Floor (ms) | Framework / floor | Replay of every statement (ms) | "
        "Statements | Reads | Writes | Commits | Driver time (ms) |",
        "|" + "---|" * 2 + "---:|" * 13,
    ]
    for result in results:
        sizes = result["sizes"]
        base = sizes[min(sizes, key=int)]["framework_ms"]
        for size in sorted(sizes, key=int):
            row = sizes[size]
            lines.append(
                f"| {LABELS.get(result['vendor'], result['vendor'])} | {int(size):,} | "
                f"{row['turn_ms']:.2f} | {row['model_ms']:.2f} | **{row['framework_ms']:.2f}** | "
                f"{row['framework_ms'] / base:.2f}x | {row['framework_min_ms']:.2f} | "
                f"{row['floor_ms']:.3f} | **{row['framework_ms'] / row['floor_ms']:.1f}x** | "
                f"{row['replay_every_ms']:.3f} | {row['statements']} | {row['reads']} | "
                f"{row['writes']} | {row['commits']} | {row['driver_ms']:.2f} |"
            )
    return "\n".join(lines)


def _phase_table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| Database | Stored messages | Claim + release | Memory load | Memory save | "
        "Limit counting | Governed call | of which re-check | of which audit | Governed tools | "
        "Rest |",
        "|" + "---|" * 2 + "---:|" * 9,
    ]
    for result in results:
        sizes = result["sizes"]
        for size in sorted(sizes, key=int):
            p = sizes[size]["phases_ms"]
            lines.append(
                f"| {LABELS.get(result['vendor'], result['vendor'])} | {int(size):,} | "
                f"{p['claim']:.2f} | {p['memory_load']:.2f} | {p['memory_save']:.2f} | "
                f"{p['limit_counting']:.3f} | {p['governed_call']:.2f} | {p['recheck']:.2f} | "
                f"{p['audit']:.2f} | {p['governed_tools']:.2f} | {p['rest']:.2f} |"
            )
    return "\n".join(lines)


def _profile_report(result: dict[str, Any]) -> str:
    profile = result["profile"]
    label = LABELS.get(result["vendor"], result["vendor"])
    out = [f"### Profile: {label}, {profile['size']:,} stored messages", ""]
    out.append(
        "The statements of one turn (time inside the driver's execute; tx = inside an atomic "
        "block, ac = autocommit, its own transaction; (commit) where the connection committed):"
    )
    out += ["", "```", *profile["statements"], "```", ""]
    out += ["Plans of the turn's reads, with its parameters:", "", "```", *profile["explain"]]
    out += ["```", "", "```", profile["functions"].rstrip(), "```"]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", metavar="URL", help="also run on PostgreSQL (or 'auto')")
    parser.add_argument("--turns", type=int, default=TURNS, help="timed turns per size (20)")
    parser.add_argument(
        "--sizes",
        type=lambda text: [int(part) for part in text.split(",")],
        default=list(SIZES),
        help="stored messages, comma-separated (default 10,100,1000,10000)",
    )
    parser.add_argument("--profile", action="store_true", help="profile one size's turns")
    parser.add_argument(
        "--profile-size", type=int, help="the size --profile profiles (default: the largest)"
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--child-json", help=argparse.SUPPRESS)
    parser.add_argument("--database-url", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_json:
        child(args)
        return 0

    started = time.perf_counter()
    results = [_measure("sqlite", _sqlite_database, args)]
    if args.postgres:
        url = args.postgres
        results.append(
            _measure(
                "postgresql",
                lambda: _database.postgres_database(url, "tc_bench_history"),
                args,
            )
        )

    import django

    print("## Conversation history: a stored turn against its floor, as the conversation grows")
    print()
    print(
        f"Python {platform.python_version()}, Django {django.get_version()}, "
        f"{platform.machine()}, {os.cpu_count()} CPUs; median of {args.turns} turns per size "
        f"after {WARMUP_TURNS} warm-up turns; one tool round per turn; "
        f"{time.perf_counter() - started:.0f} s in all."
    )
    speed = min(timeit.repeat("sum(range(1000))", number=2000, repeat=5)) / 2000 * 1e6
    print(f"- Machine speed, for scale: sum(range(1000)) takes {speed:.1f} us here.")
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"- Load average when the report was printed: {load}")
    for result in results:
        label = LABELS.get(result["vendor"], result["vendor"])
        print(f"- {label}: {result['server']}; {result['settings']}")
        if result["not_instrumented"]:
            print(f"  - Not found, so not timed: {', '.join(result['not_instrumented'])}")
    print(
        f"- Tool called directly: {results[0]['tool_direct_ms'] * 1000:.2f} us per call "
        "(subtracted, with the time inside the scripted model, from the turn's wall time)."
    )
    print()
    print(_table(results))
    print()
    print(
        "Framework = turn - model - tool. Floor = the turn's INSERTs and UPDATEs (read with "
        "connection.execute_wrapper) written again with the driver alone (sqlite3 / psycopg) "
        "on the same database, same parameters, same transactions: the same rows in the same "
        "number of commits. Replay of every statement: the same with the turn's reads too. "
        "Statements, reads, writes, commits: those of the replayed turn, besides transaction "
        "control (BEGIN, COMMIT, SAVEPOINT, RELEASE); commits = its write transactions (the "
        f"target uses the most of up to {CAPTURED_TURNS} turns read per size, untimed, among "
        "the timed ones). Driver time: the statements' time inside the driver's execute, "
        "median of those turns. "
        "Medians of the timed turns; best = the fastest."
    )
    print()
    print(_phase_table(results))
    print()
    print(
        "Phases: medians in ms of time inside the wrapped functions, within the framework time: "
        "claim + release (conversations.claim_conversation / release_conversation), memory load "
        "(TurnLog.find_by_conversation_id), memory save (TurnLog.add), limit counting "
        "(the manager's find_breaches), governed call "
        "(GovernedToolCallingManager.call_tool, tool excluded; of which the re-check, "
        "the gate's admit, and the audit, "
        "calls.lifecycle's record_started + finish), governed tools (the turn's GovernedTools "
        "snapshot). Rest = framework - the six top-level phases (the core loop, advisors, "
        "the client)."
    )
    print()
    print("### Targets")
    print()
    passed = True
    for result in results:
        for ok, text in _verdicts(result):
            passed = passed and ok
            print(f"- {'PASS' if ok else 'FAIL'} {text}")
    for result in results:
        if "profile" in result:
            print()
            print(_profile_report(result))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 1 if args.strict and not passed else 0


if __name__ == "__main__":
    sys.exit(main())
