"""Django's SQLite backend, made to hold under hundreds of threads writing at once.

Name it as the engine of a SQLite database::

    DATABASES = {"default": {"ENGINE": "tool_calling.db.backends.sqlite3", "NAME": "db.sqlite3"}}

SQLite lets one connection write at a time. Its own wait for the write lock is a poll: a
connection that finds the lock taken sleeps (1 ms, then longer, up to 100 ms) and tries again,
so under a Celery thread pool (hundreds of threads in one process, each with its connection)
writers miss the moments the lock is free, queue for seconds, and fail with "database is
locked" once the busy timeout passes. This backend adds a write gate per database file: a
writer passes it before it writes (at ``BEGIN`` of a transaction, or around one write statement
outside a transaction) and lets the next one in at the end. Inside a process the gate is a
lock, between processes (a web server and its workers) an ``flock`` of ``<NAME>-writer.lock``
beside the database, both waited for by the kernel: each writer is woken the moment the one
before it ended, and SQLite's own lock is free when it gets there. Reads never pass the gate
(WAL lets them run beside a writer), except on a shared-cache in-memory database (Django's test
database), which locks whole tables: there reads pass it too, and a statement or ``BEGIN`` that
meets a table another connection still holds (a reader fetching its rows) is tried again until
the timeout, since SQLite fails it at once instead of waiting. Writers that do not use this
backend (another program, a project's second settings file) still meet SQLite's own lock and
its poll.

Defaults, each overridden by the database's ``OPTIONS``: ``transaction_mode`` ``"IMMEDIATE"``
(a transaction takes the write lock when it begins, so it never fails half-way when it first
writes) and ``timeout`` 30 seconds (the wait for the gate and for SQLite's lock; Python's own
default is 5). Set ``PRAGMA journal_mode=WAL`` in ``init_command`` as well: readers then never
wait for a writer.

It also fixes, for its connections, Django's check of SQLite's JSON support, which runs in a
transaction and, with ``transaction_mode`` ``"IMMEDIATE"``, reports "no JSON" when it meets a
busy database (``NotSupportedError: JSONObject() is not supported`` for the rest of that
connection's life): ``tool_calling`` applies the same fix to connections of Django's own
SQLite backend.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

from django.db.backends.sqlite3 import base, features
from django.db.utils import OperationalError
from django.utils.functional import cached_property

from tool_calling._compat import DJANGO_5_1

__all__ = ["DatabaseWrapper", "json_supported"]

DEFAULT_TIMEOUT = 30.0
"""Seconds a writer waits for the gate, then for SQLite's lock, before "database is locked"."""

_TRANSACTION_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE")
"""A transaction's own statements: the transaction holds the gate from its beginning."""

_TABLE_LOCKED = "database table is locked"
"""What SQLite answers at once, with no busy wait, when a table of a shared-cache database is
locked by another connection (a reader's cursor that is still being fetched from, a writer)."""

_FIRST_PAUSE, _LONGEST_PAUSE = 0.001, 0.02
"""Seconds between tries at a locked table of a shared-cache database: doubled from the first."""

_UNGATED = ("SELECT", "PRAGMA", "EXPLAIN", "BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE")
"""Statements that never pass the gate themselves: reads (Django's own PRAGMAs read), and the
transaction's own statements (the transaction holds the gate from its beginning)."""


def json_supported(connection: Any) -> bool:
    """Whether SQLite's JSON functions work on ``connection`` (a raw ``sqlite3`` connection).

    Asked outside any transaction: a read needs no lock, so a busy database cannot make it
    answer "no" as Django's own check does.
    """
    try:
        connection.execute('SELECT JSON(\'{"a": "b"}\')').fetchone()
    except sqlite3.OperationalError:
        return False
    return True


class _FileLock:
    """An exclusive ``flock`` on a file, taken with a timeout (``flock`` itself has none).

    Only the thread that holds its process's gate asks for it, so at most one request is open
    at a time. A free lock is taken at once; a taken one is waited for by a helper thread
    blocked in ``flock`` (the kernel wakes it as soon as the other process lets go, where a
    poll would sleep through the free moments), which hands it to the requester, or gives it
    back if the requester stopped waiting. The kernel frees it if its process dies.
    """

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self.changed = threading.Condition()
        self.waiting = False
        """The helper thread is (or is about to be) blocked in ``flock``."""
        self.wanted = False
        """A requester waits for the helper's lock."""
        self.granted = False
        """The helper took the lock for the requester."""
        self.helper: threading.Thread | None = None

    def acquire(self, timeout: float) -> bool:
        """Take the lock within ``timeout`` seconds; False if it stayed taken."""
        with self.changed:
            if not self.waiting:
                try:
                    fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    self.waiting = True
                    if self.helper is None:
                        self.helper = threading.Thread(
                            target=self._help, name="tool-calling-sqlite-lock", daemon=True
                        )
                        self.helper.start()
                    self.changed.notify_all()
                else:
                    return True
            self.wanted = True
            granted = self.changed.wait_for(lambda: self.granted, timeout)
            self.wanted = False
            self.granted = False
            return granted

    def release(self) -> None:
        """Let the lock go."""
        fcntl.flock(self.fd, fcntl.LOCK_UN)

    def _help(self) -> None:
        while True:
            with self.changed:
                self.changed.wait_for(lambda: self.waiting)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
            with self.changed:
                self.waiting = False
                if self.wanted:
                    self.granted = True
                    self.changed.notify_all()
                else:  # the requester gave up meanwhile
                    fcntl.flock(self.fd, fcntl.LOCK_UN)

    def forget(self) -> None:
        """Close the file in a forked child (the parent's lock stays the parent's)."""
        with contextlib.suppress(OSError):
            os.close(self.fd)


class _FairLock:
    """A lock handed to its waiters in the order they came (``threading.Lock`` is not fair).

    With hundreds of writers, an unfair lock let one wait past its timeout while others took
    the lock again and again. Not re-entrant, and released by whichever thread ends the write:
    a connection shared between threads (Django's live test server shares in-memory databases)
    may begin a transaction in one thread and end it in another.
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._held = False
        self._waiters: collections.deque[threading.Lock] = collections.deque()

    def acquire(self, timeout: float) -> bool:
        """Take the lock within ``timeout`` seconds, after those who waited before."""
        with self._mutex:
            if not self._held:
                self._held = True
                return True
            waiter = threading.Lock()
            waiter.acquire()
            self._waiters.append(waiter)
        if waiter.acquire(timeout=timeout):
            return True  # handed over by release()
        with self._mutex:
            try:
                self._waiters.remove(waiter)
            except ValueError:
                return True  # handed over just as the wait ended
            return False

    def release(self) -> None:
        """Hand the lock to the first waiter, or free it."""
        with self._mutex:
            if self._waiters:
                self._waiters.popleft().release()
            else:
                self._held = False


class _Gate:
    """The write gate of one database: a fair lock for threads, a file lock for processes.

    An in-memory database, which no other process opens, has no file lock.
    """

    def __init__(self, path: str | None) -> None:
        self.lock = _FairLock()
        self.file = _FileLock(path) if path is not None else None

    def enter(self, timeout: float) -> None:
        """Wait until this thread may write, at most ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        if not self.lock.acquire(timeout=timeout):
            raise sqlite3.OperationalError("database is locked")
        if self.file is not None and not self.file.acquire(max(0.0, deadline - time.monotonic())):
            self.lock.release()
            raise sqlite3.OperationalError("database is locked")

    def leave(self) -> None:
        """Let the next writer in."""
        try:
            if self.file is not None:
                self.file.release()
        finally:
            self.lock.release()


_gates: dict[str, _Gate] = {}
_gates_lock = threading.Lock()


def _gate(name: str, in_memory: bool) -> _Gate:
    gate = _gates.get(name)
    if gate is None:
        with _gates_lock:
            gate = _gates.get(name)
            if gate is None:
                path = None if in_memory else f"{os.path.abspath(name)}-writer.lock"
                gate = _gates[name] = _Gate(path)
    return gate


def _forget_gates() -> None:
    # A forked child (a Celery pool process) must not inherit a gate its parent held.
    global _gates_lock
    for gate in _gates.values():
        if gate.file is not None:
            gate.file.forget()
    _gates.clear()
    _gates_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_gates)


class DatabaseFeatures(features.DatabaseFeatures):
    """Django's SQLite features; JSON support is asked outside a transaction."""

    # Django's own is a cached_property too; django-stubs declares a plain attribute.
    @cached_property  # type: ignore[override]
    def supports_json_field(self) -> bool:  # type: ignore[override]
        """Whether SQLite's JSON1 functions are available."""
        self.connection.ensure_connection()
        return json_supported(self.connection.connection)


def _table_locked(error: Exception) -> bool:
    return str(error).startswith(_TABLE_LOCKED)


def _until_tables_are_free(attempt: Callable[[float], Any], timeout: float) -> Any:
    """``attempt(seconds left)``, again while it fails with "database table is locked".

    On a shared-cache database (Django's test database is one) a table another connection
    still holds, a reader fetching its rows for instance, fails a statement or ``BEGIN`` at once:
    SQLite's busy wait does not apply there. Tried again until ``timeout``; ``attempt`` leaves
    the gate before it fails, so the reader can take it for its next statement meanwhile.
    """
    deadline = time.monotonic() + timeout
    pause = _FIRST_PAUSE
    while True:
        try:
            return attempt(max(0.0, deadline - time.monotonic()))
        except (sqlite3.OperationalError, OperationalError) as error:
            if not _table_locked(error) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(2 * pause, _LONGEST_PAUSE)


class SQLiteCursorWrapper(base.SQLiteCursorWrapper):
    """Django's cursor; a write outside a transaction passes the gate.

    On a shared-cache in-memory database (``shared_cache``) reads pass it too, and a statement
    that meets a locked table is tried again (:func:`_until_tables_are_free`).
    """

    gate: _Gate
    timeout: float
    shared_cache: bool

    def execute(self, query: str, params: Any = None) -> Any:
        """Run ``query``; a write outside a transaction waits for the gate first."""
        return self._run(super().execute, query, params)

    def executemany(self, query: str, param_list: Any) -> Any:
        """Run ``query`` for each parameter set; as :meth:`execute` for the gate."""
        return self._run(super().executemany, query, param_list)

    def _run(self, method: Any, query: str, arguments: Any) -> Any:
        head = query.lstrip()[:9].upper()
        if head.startswith(_TRANSACTION_CONTROL):
            # BEGIN runs with the gate already taken (never twice: no re-entry); a transaction
            # holds it to its end. DatabaseWrapper tries a BEGIN again itself.
            return method(query, arguments)
        # A whole-table lock of a shared-cache database makes a writer fail at once, readers'
        # locks included, so there reads pass the gate too. A file database in WAL mode needs
        # not: its readers run beside the writer.
        gated = not self.connection.in_transaction and (
            self.shared_cache or not head.startswith(_UNGATED)
        )

        def attempt(seconds: float) -> Any:
            if not gated:
                return method(query, arguments)
            self.gate.enter(seconds)
            try:
                return method(query, arguments)
            finally:
                self.gate.leave()

        if self.shared_cache:
            return _until_tables_are_free(attempt, self.timeout)
        return attempt(self.timeout)


class DatabaseWrapper(base.DatabaseWrapper):
    """Django's SQLite ``DatabaseWrapper`` with a per-process write gate (module docstring)."""

    features_class = DatabaseFeatures

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._holds_gate = False

    @cached_property
    def _write_gate(self) -> _Gate:
        return _gate(str(self.settings_dict["NAME"]), self.is_in_memory_db())

    def get_connection_params(self) -> dict[str, Any]:
        """Django's parameters, with this backend's defaults for what ``OPTIONS`` leaves out."""
        options = self.settings_dict.setdefault("OPTIONS", {})
        options.setdefault("transaction_mode", "IMMEDIATE")
        options.setdefault("timeout", DEFAULT_TIMEOUT)
        params: dict[str, Any] = super().get_connection_params()
        if not DJANGO_5_1:
            # What Django 5.1 does with these two OPTIONS; 4.2 and 5.0 would pass them to
            # sqlite3.connect(), which knows neither: _start_transaction_under_autocommit()
            # applies the mode, get_new_connection() runs the commands.
            mode = params.pop("transaction_mode", None)
            self.transaction_mode = mode.upper() if mode else None
            self.init_commands = params.pop("init_command", "").split(";")
        return params

    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        """Django's connection; before Django 5.1, with ``OPTIONS["init_command"]`` run on it."""
        connection = super().get_new_connection(conn_params)
        if not DJANGO_5_1:
            for command in self.init_commands:
                if command := command.strip():
                    connection.execute(command)
        return connection

    @property
    def _gate_timeout(self) -> float:
        return float(self.settings_dict["OPTIONS"].get("timeout", DEFAULT_TIMEOUT))

    def create_cursor(self, name: str | None = None) -> Any:
        """A cursor whose writes outside a transaction pass the gate."""
        cursor = self.connection.cursor(factory=SQLiteCursorWrapper)
        cursor.gate = self._write_gate
        cursor.timeout = self._gate_timeout
        cursor.shared_cache = self.is_in_memory_db()
        return cursor

    def _start_transaction_under_autocommit(self) -> None:
        if self.is_in_memory_db():
            _until_tables_are_free(self._begin_in_gate, self._gate_timeout)
        else:
            self._begin_in_gate(self._gate_timeout)

    def _begin_in_gate(self, seconds: float) -> None:
        with self.wrap_database_errors:
            self._write_gate.enter(seconds)
        self._holds_gate = True
        try:
            self._begin()
        except BaseException:
            self._leave_gate()
            raise

    def _begin(self) -> None:
        if DJANGO_5_1:
            super()._start_transaction_under_autocommit()  # type: ignore[misc]
        else:  # what Django 5.1 does with OPTIONS["transaction_mode"]
            mode = self.transaction_mode
            self.cursor().execute(f"BEGIN {mode}" if mode else "BEGIN")

    def _leave_gate(self) -> None:
        if self._holds_gate:
            self._holds_gate = False
            self._write_gate.leave()

    def _commit(self) -> None:
        try:
            super()._commit()  # type: ignore[misc]
        finally:
            self._leave_gate()

    def _rollback(self) -> None:
        try:
            super()._rollback()  # type: ignore[misc]
        finally:
            self._leave_gate()

    def _close(self) -> None:
        try:
            super()._close()  # type: ignore[misc]
        finally:
            self._leave_gate()
