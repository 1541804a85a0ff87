"""Benchmark: per-turn framework and database cost as a stored conversation grows.

A benchmark, not a test: it prints a Markdown table and PASS/FAIL lines for the targets, and exits
0 unless it crashes (``--strict`` also exits 1 when a target is missed).

For each size (10, 100, 1,000 and 10,000 stored messages) a conversation is pre-filled with
``bulk_create`` (user / assistant tool call / tool response / answer, as turns store them), then
``--turns`` turns are timed, each one
``governed_chat_client(conversation=conv, model=ScriptedChatModel(...)).prompt(...).call()`` with
one tool round: the model asks for one tool call, the tool answers at once, the model answers. The
memory advisor loads the window twice, stores four messages, the manager counts the turn's calls
against the limits, and the governed manager re-checks the tool and writes its audit row. After
each timed turn the rows it added are deleted (untimed), so every turn runs at exactly that size.

Framework time per turn = wall time of the turn - time inside the (instant, scripted) model - the
tool's own time (measured by calling the tool directly). The median over the turns is reported,
with the phases that make it up (memory window load, memory save, limit counting, governance
re-check and audit), and the queries of one turn.

Databases: SQLite (a file in WAL mode with synchronous=NORMAL and IMMEDIATE transactions, as
project/settings.py configures it) always; PostgreSQL with ``--postgres URL`` (a database
``tc_bench_history_<pid>`` is created on that server and dropped afterwards), or
``--postgres auto`` to start the throwaway server of scripts/setup_postgres.sh. Each database runs
in its own child process, because project/settings.py reads DATABASE_URL when it is imported.

    python benchmarks/history.py [--postgres URL|auto] [--turns 20] [--sizes 10,100,1000,10000]
                                 [--profile] [--json PATH] [--strict]

Targets: the 10,000 case within 1.2x of the 10 case, and under 5 ms of framework time per turn on
SQLite (WAL), under 8 ms on PostgreSQL. When a target is missed the 10,000 case is profiled: the
queries of one turn with their times, and the functions where the time goes.
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

SIZES = (10, 100, 1000, 10000)
TURNS = 20
WARMUP_TURNS = 3
TARGET_RATIO = 1.2
TARGET_MS = {"sqlite": 5.0, "postgresql": 8.0}
LABELS = {"sqlite": "SQLite (WAL)", "postgresql": "PostgreSQL"}
PHASES = ("memory_load", "memory_save", "limit_counting", "governed_call", "governed_tools")


# =============================================================================================
# Child: one database, every size
# =============================================================================================


def _setup_django(database_url: str) -> None:
    os.environ["DATABASE_URL"] = database_url
    os.environ["DJANGO_SETTINGS_MODULE"] = "project.settings"
    # DEBUG off: with DEBUG on Django records every query, which is not what production pays.
    os.environ["DJANGO_DEBUG"] = "false"
    os.environ.setdefault("DJANGO_SECRET_KEY", "benchmarks-history-not-a-secret")
    import django

    django.setup()
    import logging

    # The INFO lines of tool_calling would go to the console on every turn; keep them out.
    logging.getLogger("tool_calling").setLevel(logging.WARNING)
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


class _Clock:
    """Seconds spent in instrumented phases during the current turn."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}

    def reset(self) -> None:
        self.totals = {}

    def wrap(self, owner: Any, attribute: str, phase: str) -> None:
        original = getattr(owner, attribute, None)
        if original is None:
            return
        totals = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - started
                totals.totals[phase] = totals.totals.get(phase, 0.0) + elapsed

        timed.__wrapped__ = original  # type: ignore[attr-defined]
        setattr(owner, attribute, timed)


CLOCK = _Clock()


def _instrument() -> None:
    from tool_calling import governance, resolvers
    from tool_calling.core.chat import memory
    from tool_calling.core.execution import limits

    CLOCK.wrap(memory.MessageWindowChatMemory, "get", "memory_load")
    CLOCK.wrap(memory.MessageWindowChatMemory, "add", "memory_save")
    CLOCK.wrap(limits.LimitCounter, "__init__", "limit_counting")
    CLOCK.wrap(limits.LimitCounter, "add", "limit_counting")
    # Governance around the tool: re-check of the Tool row, audit row written and updated.
    CLOCK.wrap(governance.GovernedToolCallingManager, "_governed_call", "governed_call")
    # The per-turn snapshot of the tools the user may use (built with the client).
    CLOCK.wrap(resolvers.GovernedTools, "__init__", "governed_tools")


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
            elapsed = time.perf_counter() - started
            CLOCK.totals["tool"] = CLOCK.totals.get("tool", 0.0) + elapsed

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
                elapsed = time.perf_counter() - started
                CLOCK.totals["model"] = CLOCK.totals.get("model", 0.0) + elapsed

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


def _queries_of_one_turn(conversation: Any, registry: Any, size: int) -> list[dict[str, Any]]:
    """The statements of one turn, each timed around the driver's execute (row fetching of
    large SELECTs continues after it, in Django's result iterator)."""
    from django.db import connection

    captured: list[dict[str, Any]] = []

    def timing(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            captured.append({"sql": sql, "ms": (time.perf_counter() - started) * 1000})

    with connection.execute_wrapper(timing):
        _turn(conversation, registry, 10_000_000)
    _trim(conversation, size)
    return captured


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
    out.write(f"--- top 25 by cumulative time, {turns} turns at {size} stored messages\n")
    stats.sort_stats("cumulative").print_stats(25)
    return out.getvalue()


def _explain(conversation: Any) -> list[str]:
    """The plans of the window query and of the next-sequence query at this size."""
    from django.db import connection

    from tool_calling import models

    window = models.Message.objects.filter(conversation_id=conversation.pk)
    plans = [window.order_by("-sequence")[:208].explain()]
    prefix = "EXPLAIN QUERY PLAN" if connection.vendor == "sqlite" else "EXPLAIN"
    table = models.Message._meta.db_table
    field = models.Message._meta.get_field("conversation")
    pk = field.get_db_prep_value(conversation.pk, connection)
    with connection.cursor() as cursor:
        cursor.execute(
            f'{prefix} SELECT MAX("sequence") FROM "{table}" WHERE "conversation_id" = %s', [pk]
        )
        plans.append("\n".join(" ".join(map(str, row)) for row in cursor.fetchall()))
    return plans


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
        "server": _server_version(connection),
        "tool_direct_ms": tool_direct * 1000,
        "sizes": {},
    }
    conversations = {size: _prefill(size) for size in args.sizes}
    for size, conversation in conversations.items():
        for step in range(WARMUP_TURNS):
            _turn(conversation, registry, 1_000_000 + step)
            _trim(conversation, size)
    walls: dict[int, list[float]] = {size: [] for size in args.sizes}
    frameworks: dict[int, list[float]] = {size: [] for size in args.sizes}
    models_ms: dict[int, list[float]] = {size: [] for size in args.sizes}
    phases = {size: {phase: [] for phase in PHASES} for size in args.sizes}
    # Round-robin over the sizes (turn 1 of every size, then turn 2, ...), so that a busy phase
    # of the machine hits every size alike and the ratios stay fair.
    for step in range(args.turns):
        for size, conversation in conversations.items():
            wall, totals = _turn(conversation, registry, step)
            _trim(conversation, size)
            model = totals.get("model", 0.0)
            # The tool's own time, as calling it directly costs (one call per turn).
            framework = wall - model - tool_direct
            walls[size].append(wall * 1000)
            models_ms[size].append(model * 1000)
            frameworks[size].append(framework * 1000)
            for phase in PHASES:
                value = totals.get(phase, 0.0)
                if phase == "governed_call":
                    value -= totals.get("tool", 0.0)
                phases[size][phase].append(value * 1000)
    for size, conversation in conversations.items():
        queries = _queries_of_one_turn(conversation, registry, size)
        results["sizes"][str(size)] = {
            "turn_ms": statistics.median(walls[size]),
            "model_ms": statistics.median(models_ms[size]),
            "framework_ms": statistics.median(frameworks[size]),
            "framework_min_ms": min(frameworks[size]),
            "framework_max_ms": max(frameworks[size]),
            "phases_ms": {
                phase: statistics.median(values) for phase, values in phases[size].items()
            },
            "queries": len(queries),
            "query_ms": sum(q["ms"] for q in queries),
        }
    largest = max(args.sizes)
    if args.profile:
        conversation = conversations[largest]
        results["profile"] = {
            "size": largest,
            "queries": _queries_of_one_turn(conversation, registry, largest),
            "explain": _explain(conversation),
            "functions": _profile(conversation, registry, largest, args.turns),
        }
    Path(args.child_json).write_text(json.dumps(results))


def _server_version(connection: Any) -> str:
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("select sqlite_version()")
            version = f"SQLite {cursor.fetchone()[0]}"
            cursor.execute("PRAGMA journal_mode")
            version += f", journal_mode={cursor.fetchone()[0]}"
            cursor.execute("PRAGMA synchronous")
            version += f", synchronous={cursor.fetchone()[0]} (1 = NORMAL)"
            return version
        cursor.execute("select version()")
        version = cursor.fetchone()[0].split(" on ")[0]
        cursor.execute("show fsync")
        fsync = cursor.fetchone()[0]
        cursor.execute("show synchronous_commit")
        return f"{version}, fsync={fsync}, synchronous_commit={cursor.fetchone()[0]}"


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
        env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
        subprocess.run(command, check=True, cwd=ROOT, env=env)
        result: dict[str, Any] = json.loads(out.read_text())
    result["name"] = name
    return result


@contextmanager
def _sqlite_database() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="tc-bench-history-") as tmp:
        yield f"sqlite:///{Path(tmp) / 'history.sqlite3'}"


@contextmanager
def _postgres_database(url: str) -> Iterator[str]:
    import dj_database_url
    import psycopg

    if url == "auto":
        started = subprocess.run(
            ["bash", str(ROOT / "scripts" / "setup_postgres.sh")],
            check=True,
            capture_output=True,
            text=True,
        )
        url = started.stdout.strip().splitlines()[-1]
    config = dj_database_url.parse(url)
    name = f"tc_bench_history_{os.getpid()}"
    admin = {
        "host": config.get("HOST") or None,
        "port": config.get("PORT") or None,
        "user": config.get("USER") or None,
        "password": config.get("PASSWORD") or None,
        "dbname": config.get("NAME") or "postgres",
        "autocommit": True,
    }
    with psycopg.connect(**admin) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, query = url.partition("?")
    try:
        yield base.rsplit("/", 1)[0] + f"/{name}" + (f"?{query}" if query else "")
    finally:
        with psycopg.connect(**admin) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _measure(name: str, database: Callable[[], Any], args: argparse.Namespace) -> dict[str, Any]:
    with database() as url:
        result = _run_child(name, url, args, profile=args.profile)
    if not args.profile and not _verdicts(result)[0]:
        # Missed a target: run again with the profile of the largest case.
        with database() as url:
            profiled = _run_child(name, url, args, profile=True)
        result["profile"] = profiled["profile"]
        result["profile_run_sizes"] = profiled["sizes"]
    return result


def _verdicts(result: dict[str, Any]) -> tuple[bool, list[str]]:
    sizes = result["sizes"]
    smallest, largest = min(sizes, key=int), max(sizes, key=int)
    base, big = sizes[smallest]["framework_ms"], sizes[largest]["framework_ms"]
    ratio = big / base if base > 0 else float("inf")
    limit = TARGET_MS[result["vendor"]]
    label = LABELS.get(result["vendor"], result["vendor"])
    ratio_ok, ms_ok = ratio <= TARGET_RATIO, big < limit
    lines = [
        f"- {'PASS' if ratio_ok else 'FAIL'} {label}: {int(largest):,} messages at "
        f"{ratio:.2f}x the {int(smallest):,} case (target <= {TARGET_RATIO}x)",
        f"- {'PASS' if ms_ok else 'FAIL'} {label}: {big:.2f} ms framework time per turn at "
        f"{int(largest):,} messages (target < {limit:g} ms)",
    ]
    return ratio_ok and ms_ok, lines


def _table(results: list[dict[str, Any]]) -> str:
    head = (
        "| Database | Stored messages | Turn (ms) | Model (ms) | Framework (ms) | vs 10 | "
        "Best (ms) | Memory load | Memory save | Limit counting | Governed call | Governed tools | "
        "Queries | Query time (ms) |"
    )
    lines = [head, "|" + "---|" * 14]
    for result in results:
        sizes = result["sizes"]
        base = sizes[min(sizes, key=int)]["framework_ms"]
        for size in sorted(sizes, key=int):
            row = sizes[size]
            phases = row["phases_ms"]
            lines.append(
                f"| {LABELS.get(result['vendor'], result['vendor'])} | {int(size):,} | "
                f"{row['turn_ms']:.2f} | {row['model_ms']:.2f} | **{row['framework_ms']:.2f}** | "
                f"{row['framework_ms'] / base:.2f}x | {row['framework_min_ms']:.2f} | "
                f"{phases['memory_load']:.2f} | "
                f"{phases['memory_save']:.2f} | {phases['limit_counting']:.3f} | "
                f"{phases['governed_call']:.2f} | {phases['governed_tools']:.2f} | "
                f"{row['queries']} | {row['query_ms']:.2f} |"
            )
    return "\n".join(lines)


def _profile_report(result: dict[str, Any]) -> str:
    profile = result["profile"]
    label = LABELS.get(result["vendor"], result["vendor"])
    out = [f"### Profile: {label}, {profile['size']:,} stored messages", ""]
    queries = profile["queries"]
    out.append(
        f"Queries of one turn: {len(queries)}, {sum(q['ms'] for q in queries):.2f} ms in the "
        "database driver's execute:"
    )
    out.append("")
    out.append("```")
    for number, query in enumerate(queries, start=1):
        sql = " ".join(query["sql"].split())
        out.append(f"{number:>3}. {query['ms']:7.3f} ms  {sql[:160]}")
    out.append("```")
    out.append("")
    out.append("Plans of the window query and of the next-sequence aggregate:")
    out.append("")
    out.append("```")
    out.extend(profile["explain"])
    out.append("```")
    out.append("")
    out.append("```")
    out.append(profile["functions"].rstrip())
    out.append("```")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", metavar="URL", help="also run on PostgreSQL (or 'auto')")
    parser.add_argument("--turns", type=int, default=TURNS, help="timed turns per size")
    parser.add_argument(
        "--sizes",
        type=lambda text: [int(part) for part in text.split(",")],
        default=list(SIZES),
        help="stored messages, comma-separated (default 10,100,1000,10000)",
    )
    parser.add_argument("--profile", action="store_true", help="profile the largest size")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--child-json", help=argparse.SUPPRESS)
    parser.add_argument("--database-url", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_json:
        child(args)
        return 0

    results = [_measure("sqlite", _sqlite_database, args)]
    if args.postgres:
        url = args.postgres
        results.append(_measure("postgresql", lambda: _postgres_database(url), args))

    import django

    print("## Conversation history: per-turn cost as the stored conversation grows")
    print()
    print(
        f"Python {platform.python_version()}, Django {django.get_version()}, "
        f"{platform.machine()}, {os.cpu_count()} CPUs; median of {args.turns} turns per size "
        f"after {WARMUP_TURNS} warm-up turns; one tool round per turn."
    )
    speed = min(timeit.repeat("sum(range(1000))", number=2000, repeat=5)) / 2000 * 1e6
    print(f"- Machine speed, for scale: sum(range(1000)) takes {speed:.1f} us here.")
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"- Load average when the report was printed: {load}")
    for result in results:
        print(f"- {LABELS.get(result['vendor'], result['vendor'])}: {result['server']}")
    print(
        f"- Tool called directly: {results[0]['tool_direct_ms'] * 1000:.2f} us per call "
        "(subtracted, with the time inside the scripted model, from the turn's wall time)."
    )
    print()
    print(_table(results))
    print()
    print(
        "Framework = turn - model - tool. Phases are medians in ms and overlap the framework "
        "time: memory load (MessageWindowChatMemory.get, twice per turn), memory save (.add, four "
        "times), limit counting (LimitCounter), governed call (re-check of the Tool row and the "
        "audit row, tool excluded), governed tools (the per-turn snapshot of available tools). "
        "Queries: the statements of one turn and their time in the driver's execute "
        "(connection.execute_wrapper)."
    )
    print()
    print("### Targets")
    print()
    passed = True
    for result in results:
        ok, lines = _verdicts(result)
        passed = passed and ok
        print("\n".join(lines))
    for result in results:
        if "profile" in result:
            print()
            print(_profile_report(result))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 1 if args.strict and not passed else 0


if __name__ == "__main__":
    sys.exit(main())
