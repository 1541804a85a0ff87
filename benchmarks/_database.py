"""Database helpers of the benchmarks: what a block of code runs, replayed raw; throwaway databases.

:func:`capture` records every statement Django's connection runs in a block (through
``connection.execute_wrapper``) and every commit and rollback of that connection, so that a
benchmark can count statements and write transactions and replay the same statements with the
database driver alone (:class:`RawReplay`): the floor the framework is measured against.

:func:`setup_django` sets Django up for a benchmark's child process. :func:`postgres_database`
creates a database for one benchmark run on a PostgreSQL server
(``auto``: the throwaway server of scripts/setup_postgres.sh) and drops it afterwards.

Imported after ``django.setup()`` where it touches Django; the standard library otherwise.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "END", "START")
"""First words of transaction-control statements (not counted as the code's statements)."""
WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")
"""First words of statements that write rows."""

_QMARK = re.compile(r"(?<!%)%s")  # Django's "format" placeholders, as its SQLite wrapper converts
_TABLE = re.compile(r'^\s*(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+"([^"]+)"', re.IGNORECASE)


# -- what a block runs ----------------------------------------------------------------------------


@dataclass
class Statement:
    """One statement a block ran, as Django handed it to the driver."""

    sql: str
    params: Any
    many: bool
    ms: float
    """Time inside the driver's execute (row fetching of large SELECTs continues after it)."""
    rowcount: int
    in_atomic: bool
    """Run inside ``transaction.atomic()`` (else in autocommit mode: its own transaction)."""

    @property
    def head(self) -> str:
        """The statement's first word, upper case."""
        return self.sql.lstrip().split(None, 1)[0].upper() if self.sql.strip() else ""

    @property
    def kind(self) -> str:
        """``control`` (BEGIN, COMMIT, SAVEPOINT...), ``write`` or ``read``."""
        head = self.head
        if head in CONTROL:
            return "control"
        return "write" if head in WRITES else "read"

    @property
    def table(self) -> str:
        """The table an INSERT, UPDATE or DELETE writes ("" for other statements)."""
        found = _TABLE.match(self.sql)
        return found.group(1) if found else ""


@dataclass
class Unit:
    """Statements that committed together: one atomic block, or one autocommit statement."""

    statements: list[Statement] = field(default_factory=list)
    atomic: bool = False
    end: str = "autocommit"
    """``commit``, ``rollback``, ``autocommit`` (one statement, its own transaction) or ``open``."""

    @property
    def writes(self) -> bool:
        """Whether the unit wrote anything (a write transaction)."""
        return any(s.kind == "write" for s in self.statements)


@dataclass
class Capture:
    """What Django's connection ran during a :func:`capture` block, in order."""

    events: list[Statement | str] = field(default_factory=list)
    """Statements, and the strings ``"commit"`` / ``"rollback"`` where the connection did so."""

    @property
    def statements(self) -> list[Statement]:
        """Every statement, transaction control included."""
        return [e for e in self.events if isinstance(e, Statement)]

    def units(self) -> list[Unit]:
        """The statements grouped by the transaction they committed in (control dropped)."""
        units: list[Unit] = []
        current: Unit | None = None
        for event in self.events:
            if isinstance(event, str):
                if current is not None:
                    current.end = event
                    units.append(current)
                    current = None
                continue
            if event.kind == "control":
                if event.head in ("BEGIN", "START") and current is None:
                    current = Unit(atomic=True, end="open")
                continue
            if current is None and event.in_atomic:
                current = Unit(atomic=True, end="open")
            if current is not None:
                current.statements.append(event)
            else:
                units.append(Unit([event], atomic=False, end="autocommit"))
        if current is not None:
            units.append(current)
        return units

    def counts(self) -> dict[str, int]:
        """Statements besides transaction control, reads, writes, write transactions, control."""
        statements = self.statements
        units = self.units()
        return {
            "statements": sum(1 for s in statements if s.kind != "control"),
            "reads": sum(1 for s in statements if s.kind == "read"),
            "writes": sum(1 for s in statements if s.kind == "write"),
            "commits": sum(1 for u in units if u.writes and u.end in ("commit", "autocommit")),
            "rollbacks": sum(1 for u in units if u.end == "rollback"),
            "control": sum(1 for s in statements if s.kind == "control"),
        }

    def listing(self, width: int = 150) -> list[str]:
        """One line per statement: number, time, kind, the SQL cut to ``width``."""
        lines = []
        number = 0
        for event in self.events:
            if isinstance(event, str):
                lines.append(f"       {'':>9}  ({event})")
                continue
            number += 1
            sql = " ".join(event.sql.split())
            mark = "tx" if event.in_atomic else "ac"
            lines.append(f"{number:>4}. {event.ms:7.3f} ms {mark} {event.kind:<7} {sql[:width]}")
        return lines


@contextmanager
def capture(alias: str = "default") -> Iterator[Capture]:
    """Record the statements, commits and rollbacks of this thread's connection ``alias``.

    Statements go through ``connection.execute_wrapper``; commits and rollbacks are noted by
    wrapping the connection's ``commit`` and ``rollback`` (``transaction.atomic`` calls them),
    so a commit is seen on PostgreSQL too, where Django sends no COMMIT statement.
    """
    from django.db import connections

    connection = connections[alias]
    result = Capture()

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        in_atomic = bool(context["connection"].in_atomic_block)
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            ms = (time.perf_counter() - started) * 1000
            rowcount = getattr(context["cursor"], "rowcount", -1)
            copied = [list(p) for p in params] if many else params
            result.events.append(Statement(sql, copied, many, ms, rowcount, in_atomic))

    commit, rollback = connection.commit, connection.rollback

    def noted_commit() -> None:
        commit()
        result.events.append("commit")

    def noted_rollback() -> None:
        rollback()
        result.events.append("rollback")

    connection.commit = noted_commit
    connection.rollback = noted_rollback
    try:
        with connection.execute_wrapper(wrapper):
            yield result
    finally:
        del connection.commit
        del connection.rollback


# -- the same statements, with the driver alone ---------------------------------------------------


def raw_connection(alias: str = "default") -> tuple[Any, str]:
    """A new DB-API connection to the database of ``alias``, as a plain program would open it.

    SQLite: ``sqlite3`` on the same file in autocommit mode (``isolation_level=None``) with
    Django's pragmas (foreign keys on; the project's ``init_command``: WAL, synchronous
    NORMAL). PostgreSQL: ``psycopg`` in autocommit mode, with Django's connection parameters
    and psycopg's ``ClientCursor`` (the binding Django uses by default). Returns the
    connection and the statement that opens a transaction (BEGIN IMMEDIATE on SQLite, as the
    project configures it).
    """
    from django.db import connections

    wrapper = connections[alias]
    settings = wrapper.settings_dict
    if wrapper.vendor == "sqlite":
        import sqlite3

        options = settings.get("OPTIONS", {})
        raw = sqlite3.connect(
            settings["NAME"],
            isolation_level=None,
            timeout=options.get("timeout", 5),
            check_same_thread=False,
        )
        raw.execute("PRAGMA foreign_keys = ON")
        init = options.get("init_command")
        if init:
            raw.executescript(init)
        mode = options.get("transaction_mode")
        return raw, f"BEGIN {mode}" if mode else "BEGIN"
    if wrapper.vendor == "postgresql":
        import psycopg

        # Django's connection parameters (its adapters, prepared statements off), with
        # psycopg's own client-side-binding cursor in place of Django's subclass of it: the
        # same protocol Django speaks, without Django.
        params = wrapper.get_connection_params()
        params["cursor_factory"] = psycopg.ClientCursor
        raw = psycopg.connect(**params, autocommit=True)
        return raw, "BEGIN"
    raise SystemExit(f"No raw replay for the {wrapper.vendor!r} database backend")


class RawReplay:
    """Runs captured statements again through a raw connection, in the same transactions.

    ``writes_only`` keeps the INSERTs, UPDATEs and DELETEs (and drops units left without
    writes): the same rows written in the same number of commits. Otherwise every statement
    runs, reads included (their rows fetched). Autocommit statements run on their own; an
    atomic block's statements run between BEGIN and COMMIT.
    """

    def __init__(
        self, units: list[Unit], raw: Any, begin: str, vendor: str, *, writes_only: bool
    ) -> None:
        self.raw = raw
        self.begin = begin
        self.plan: list[tuple[bool, list[tuple[str, Any, bool]]]] = []
        self.kept: list[Statement] = []
        for unit in units:
            kept = [s for s in unit.statements if s.kind == "write" or not writes_only]
            if not kept or unit.end == "rollback":
                continue
            prepared = []
            for statement in kept:
                sql = statement.sql
                if vendor == "sqlite":
                    sql = _QMARK.sub("?", sql).replace("%%", "%")
                prepared.append((sql, statement.params, statement.many))
            self.plan.append((unit.atomic, prepared))
            self.kept.extend(kept)
        self.cursor = raw.cursor()

    @property
    def statements(self) -> int:
        """How many statements one run sends (transaction control excluded)."""
        return len(self.kept)

    @property
    def commits(self) -> int:
        """How many transactions one run commits."""
        return len(self.plan)

    def run(self) -> list[int]:
        """Run the statements once; return the rowcount of each."""
        cursor = self.cursor
        rowcounts = []
        for atomic, statements in self.plan:
            if atomic:
                cursor.execute(self.begin)
            for sql, params, many in statements:
                if many:
                    cursor.executemany(sql, params)
                elif params is None:
                    cursor.execute(sql)
                else:
                    cursor.execute(sql, params)
                if cursor.description is not None:
                    cursor.fetchall()
                rowcounts.append(cursor.rowcount)
            if atomic:
                cursor.execute("COMMIT")
        return rowcounts

    def mismatches(self, rowcounts: list[int]) -> list[str]:
        """The UPDATEs and DELETEs of a run that changed another number of rows than Django's."""
        return [
            f"{s.head} {s.table}: {got} rows, Django's {s.rowcount}"
            for s, got in zip(self.kept, rowcounts, strict=True)
            if s.head in ("UPDATE", "DELETE") and got != s.rowcount
        ]


# -- primary-key sequences (to write the very same rows again) ------------------------------------


def sequence_values(tables: list[str]) -> dict[str, int]:
    """The last primary key handed out in each table (SQLite AUTOINCREMENT / PostgreSQL)."""
    from django.db import connection

    values = {}
    with connection.cursor() as cursor:
        for table in tables:
            if connection.vendor == "sqlite":
                cursor.execute("SELECT seq FROM sqlite_sequence WHERE name = %s", [table])
                row = cursor.fetchone()
                values[table] = int(row[0]) if row else 0
            else:
                cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [f'"{table}"'])
                sequence = cursor.fetchone()[0]
                cursor.execute(f"SELECT last_value, is_called FROM {sequence}")
                last, called = cursor.fetchone()
                values[table] = int(last) if called else int(last) - 1
    return values


def set_sequence_values(values: dict[str, int]) -> None:
    """Make the next primary key of each table ``value + 1``."""
    from django.db import connection

    with connection.cursor() as cursor:
        for table, value in values.items():
            if connection.vendor == "sqlite":
                cursor.execute(
                    "UPDATE sqlite_sequence SET seq = %s WHERE name = %s", [value, table]
                )
            else:
                cursor.execute(
                    "SELECT setval(pg_get_serial_sequence(%s, 'id'), %s, %s)",
                    [f'"{table}"', max(value, 1), value >= 1],
                )


# -- throwaway PostgreSQL databases ---------------------------------------------------------------


def setup_django(database_url: str, name: str) -> None:
    """Set Django up on the example project's settings with ``database_url``, then migrate.

    DEBUG off (with it on, Django records every query, which production does not pay), a
    throwaway secret key, and tool_calling's INFO lines kept off the console.
    """
    os.environ["DATABASE_URL"] = database_url
    os.environ["DJANGO_SETTINGS_MODULE"] = "project.settings"
    os.environ["DJANGO_DEBUG"] = "false"
    os.environ.setdefault("DJANGO_SECRET_KEY", f"benchmarks-{name}-not-a-secret")
    import logging

    import django

    django.setup()
    logging.getLogger("tool_calling").setLevel(logging.WARNING)
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def postgres_server(url: str) -> str:
    """``url``, or with ``auto`` the URL of scripts/setup_postgres.sh's server (started if needed).

    The script reads ``TC_PG_PORT`` (default 54329).
    """
    if url != "auto":
        return url
    started = subprocess.run(
        ["bash", str(ROOT / "scripts" / "setup_postgres.sh")],
        check=True,
        capture_output=True,
        text=True,
    )
    return started.stdout.strip().splitlines()[-1]


@contextmanager
def postgres_database(url: str, prefix: str) -> Iterator[str]:
    """Create database ``<prefix>_<pid>`` on the server of ``url`` (or ``auto``); drop it after.

    Yields the new database's URL.
    """
    import dj_database_url
    import psycopg

    url = postgres_server(url)
    config = dj_database_url.parse(url)
    name = f"{prefix}_{os.getpid()}"
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


def server_version() -> str:
    """The database server's version and the settings that decide a commit's cost."""
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("select sqlite_version()")
            version = f"SQLite {cursor.fetchone()[0]}"
            cursor.execute("PRAGMA journal_mode")
            version += f", journal_mode={cursor.fetchone()[0]}"
            cursor.execute("PRAGMA synchronous")
            return version + f", synchronous={cursor.fetchone()[0]} (1 = NORMAL, 2 = FULL)"
        cursor.execute("select version()")
        version = cursor.fetchone()[0].split(" on ")[0]
        cursor.execute("show fsync")
        fsync = cursor.fetchone()[0]
        cursor.execute("show synchronous_commit")
        return f"{version}, fsync={fsync}, synchronous_commit={cursor.fetchone()[0]}"
