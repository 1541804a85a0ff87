"""``tool_calling.db.backends.sqlite3``: SQLite under many threads and processes.

Each test opens its own database file through Django's connection handling (never the test
database), with a busy timeout far shorter than a writer would wait on a busy database without
the write gate: a "database is locked" that reached the caller would fail the test.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from django.db.utils import ConnectionHandler, OperationalError

from tool_calling._compat import DJANGO_5_1
from tool_calling.db import sqlite_connection_created
from tool_calling.db.backends.sqlite3 import base

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _own_databases(django_db_blocker: Any) -> Any:
    """These tests open database files of their own, never the test database."""
    with django_db_blocker.unblock():
        yield


def handler(path: Path, engine: str = "tool_calling.db.backends.sqlite3", **options: Any):
    options = {"init_command": "PRAGMA journal_mode=WAL;", **options}
    if engine == "django.db.backends.sqlite3" and not DJANGO_5_1:
        # Django's own backend takes these two from 5.1 on (ours from 4.2 on, tool_calling._compat);
        # the files these tests open are in WAL mode already (make_table).
        options = {
            k: v for k, v in options.items() if k not in ("init_command", "transaction_mode")
        }
    return ConnectionHandler({"default": {"ENGINE": engine, "NAME": str(path), "OPTIONS": options}})


def make_table(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, writer TEXT, n INTEGER)")


def in_transaction(connection: Any, statements: list[tuple[str, list[Any]]]) -> None:
    """What the outermost ``atomic()`` does on ``connection``: begin, run, commit (or roll back)."""
    connection.set_autocommit(False, force_begin_transaction_with_broken_autocommit=True)
    try:
        with connection.cursor() as cursor:
            for sql, params in statements:
                cursor.execute(sql, params)
        connection.commit()
    except BaseException:
        connection.rollback()
        raise
    finally:
        connection.set_autocommit(True)


def test_the_backend_defaults_to_immediate_transactions_and_a_long_busy_timeout(tmp_path):
    connection = handler(tmp_path / "db.sqlite3")["default"]
    params = connection.get_connection_params()
    assert connection.transaction_mode == "IMMEDIATE"
    assert params["timeout"] == base.DEFAULT_TIMEOUT == 30.0
    configured = handler(tmp_path / "db.sqlite3", transaction_mode="DEFERRED", timeout=2)["default"]
    assert configured.get_connection_params()["timeout"] == 2
    assert configured.transaction_mode == "DEFERRED"


def test_r11_a_hundred_threads_writing_at_once_never_see_database_is_locked(tmp_path):
    """100 threads, each 10 autocommit INSERTs and 10 transactions of two, busy timeout 5 s
    (Python's default): Django's own backend fails it, its writers polling for the lock."""
    path = tmp_path / "db.sqlite3"
    make_table(path)
    connections = handler(path, timeout=5)
    errors: list[BaseException] = []
    start = threading.Barrier(100)

    def write(index: int) -> None:
        connection = connections["default"]
        try:
            start.wait()
            for n in range(10):
                with connection.cursor() as cursor:
                    cursor.execute("INSERT INTO t (writer, n) VALUES (%s, %s)", [f"a{index}", n])
                in_transaction(
                    connection,
                    [
                        ("SELECT COUNT(*) FROM t", []),
                        ("UPDATE t SET n = n + 1 WHERE writer = %s", [f"a{index}"]),
                        ("INSERT INTO t (writer, n) VALUES (%s, %s)", [f"b{index}", n]),
                    ],
                )
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=write, args=(i,)) for i in range(100)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT COUNT(*) FROM t").fetchone() == (2000,)


WRITER = """
import sys
sys.path.insert(0, {root!r})
import django
from django.conf import settings
settings.configure(DATABASES={{"default": {{
    "ENGINE": "tool_calling.db.backends.sqlite3", "NAME": {path!r},
    "OPTIONS": {{"timeout": 1, "init_command": "PRAGMA journal_mode=WAL;"}}}}}})
django.setup()
import threading, time
from django.db import connection, connections, transaction
def write(i):
    for n in range(10):
        with transaction.atomic():
            with connection.cursor() as c:
                c.execute("INSERT INTO t (writer, n) VALUES (%s, %s)", [{name!r} + str(i), n])
                time.sleep(0.003)  # work done inside the transaction, holding the lock
    connections.close_all()
threads = [threading.Thread(target=write, args=(i,)) for i in range(30)]
[t.start() for t in threads]
[t.join() for t in threads]
"""


def test_r11_two_processes_of_thirty_writing_threads_each_share_the_database(tmp_path):
    """Across processes the gate's file lock queues writers: no one polls for SQLite's lock.

    Each transaction holds the lock 3 ms; with a 1 s busy timeout, Django's own backend fails
    (its writers sleep through the moments the lock is free), the gate's queue never waits that
    long (60 writers x 3 ms)."""
    path = tmp_path / "db.sqlite3"
    make_table(path)
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER.format(root=str(ROOT), path=str(path), name=name)],
            stderr=subprocess.PIPE,
            env={k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"},
        )
        for name in ("p", "q")
    ]
    outputs = [process.communicate(timeout=120)[1].decode() for process in processes]
    assert [process.returncode for process in processes] == [0, 0], outputs
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT COUNT(*) FROM t").fetchone() == (600,)


def test_a_writer_that_waits_past_the_timeout_gets_database_is_locked(tmp_path):
    """The gate does not wait for ever: past the timeout the writer fails as SQLite would."""
    path = tmp_path / "db.sqlite3"
    make_table(path)
    connections = handler(path, timeout=0.2)
    held = threading.Event()
    release = threading.Event()

    def hold() -> None:
        connection = connections["default"]
        connection.set_autocommit(False, force_begin_transaction_with_broken_autocommit=True)
        held.set()
        release.wait(10)
        connection.rollback()
        connection.set_autocommit(True)
        connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    connection = connections["default"]
    try:
        with pytest.raises(OperationalError, match="database is locked"):
            with connection.cursor() as cursor:
                cursor.execute("INSERT INTO t (writer, n) VALUES ('late', 0)")
    finally:
        release.set()
        holder.join(10)
        connection.close()
    # Once the holder let go, writers go through again.
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO t (writer, n) VALUES ('after', 0)")
    connection.close()


@pytest.mark.parametrize(
    "engine", ["tool_calling.db.backends.sqlite3", "django.db.backends.sqlite3"]
)
def test_json_support_is_seen_while_another_connection_holds_the_write_lock(tmp_path, engine):
    """Django asks in a transaction: with IMMEDIATE and a busy database it answered "no" for the
    connection's whole life (``JSONObject() is not supported``). Asked outside, it holds."""
    path = tmp_path / "db.sqlite3"
    make_table(path)
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        connection = handler(path, engine, transaction_mode="IMMEDIATE", timeout=0.05)["default"]
        connection.ensure_connection()
        if engine == "django.db.backends.sqlite3":  # tool_calling's receiver, as ready() connects
            sqlite_connection_created(sender=type(connection), connection=connection)
        assert connection.features.supports_json_field is True
        assert connection.features.has_json_object_function is True
        connection.close()
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()


def test_the_receiver_leaves_other_vendors_and_answered_features_alone(tmp_path):
    connection = handler(tmp_path / "db.sqlite3", "django.db.backends.sqlite3")["default"]
    connection.ensure_connection()
    connection.features.supports_json_field = False  # answered already: kept
    sqlite_connection_created(sender=None, connection=connection)
    assert connection.features.supports_json_field is False
    connection.close()


def test_writers_of_a_process_pass_the_gate_in_the_order_they_came() -> None:
    """The gate's lock is fair: ``threading.Lock`` let a writer wait past its timeout while
    others took the lock again and again."""
    lock = base._FairLock()
    assert lock.acquire(1)
    order: list[int] = []
    waiting = []

    def writer(number: int) -> None:
        assert lock.acquire(10)
        order.append(number)
        lock.release()

    for number in range(5):
        thread = threading.Thread(target=writer, args=(number,))
        thread.start()
        waiting.append(thread)
        while len(lock._waiters) < number + 1:  # queued before the next one comes
            time.sleep(0.001)
    lock.release()
    for thread in waiting:
        thread.join(10)
    assert order == [0, 1, 2, 3, 4]
    assert not lock._held and not lock._waiters
    assert lock.acquire(0.01)
    assert not base._FairLock.acquire(lock, 0.05)  # held: a waiter gives up at its timeout
    assert not lock._waiters


@pytest.mark.parametrize("write", ["in_a_transaction", "one_statement"])
def test_a_writer_waits_for_a_reader_still_fetching_from_a_shared_cache_database(write):
    """Django's test database is in memory with a shared cache, which locks whole tables: a reader
    whose cursor still has rows to give holds its table, and SQLite fails a writer of another
    connection at once ("database table is locked": its busy wait does not apply there). The
    writer waits instead, and writes once the reader let go."""
    name = f"file:tc_shared_cache_{write}?mode=memory&cache=shared"
    reader = sqlite3.connect(name, uri=True, check_same_thread=False)  # keeps the database alive
    reader.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, writer TEXT, n INTEGER)")
    reader.executemany("INSERT INTO t (writer, n) VALUES ('seed', ?)", [(i,) for i in range(50)])
    reader.commit()
    connections = ConnectionHandler(
        {"default": {"ENGINE": "tool_calling.db.backends.sqlite3", "NAME": name}}
    )
    rows = reader.execute("SELECT n FROM t")
    assert rows.fetchone() == (0,)  # the statement is open: the reader holds the table
    outcome: list[Any] = []

    def writer() -> None:
        connection = connections["default"]
        statement = ("INSERT INTO t (writer, n) VALUES ('writer', 1)", [])
        try:
            if write == "in_a_transaction":
                in_transaction(connection, [statement])
            else:
                with connection.cursor() as cursor:
                    cursor.execute(*statement)
            outcome.append("written")
        except Exception as error:  # noqa: BLE001 - what the writer met is the test's result
            outcome.append(error)
        finally:
            connection.close()

    thread = threading.Thread(target=writer)
    thread.start()
    thread.join(0.5)
    assert thread.is_alive() and outcome == []  # waiting for the reader, not failed
    assert len(rows.fetchall()) == 49  # the reader reads on, then lets go of the table
    thread.join(10)
    assert outcome == ["written"]
    assert reader.execute("SELECT count(*) FROM t WHERE writer = 'writer'").fetchone() == (1,)
    reader.close()
